"""Tests that kill mutants of scheduling that the other tests let live (bench/mutation.py)."""

from __future__ import annotations
