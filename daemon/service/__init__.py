"""The daemon's parts, each built once by `Daemon.start()`: intake, workers, watchers,
recovery, status and housekeeping, sharing one `Context`."""
