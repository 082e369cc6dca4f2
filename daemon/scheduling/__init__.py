"""Triggers in: cron, catch-up, inbox, file watcher, git hooks; the run queue."""
