"""Agent adapters (one module per agent, a registry by name) and the supervisor."""
