"""Scripted servers of the agent CLIs' provider APIs, one module per wire format, for the live adapter tests."""
