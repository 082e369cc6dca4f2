"""Handing off to a person: escalations, notifications, progress notes, the report."""
