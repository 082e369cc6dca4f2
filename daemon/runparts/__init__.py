"""A run's parts below its lifecycle: what landing re-verifies with and records through."""
