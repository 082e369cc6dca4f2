"""The Temporal engine (`[engine] kind = "temporal"`); see engine.py and service.py."""
