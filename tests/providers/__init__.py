"""Scripted servers of the agent CLIs' provider APIs, one module per wire format."""
