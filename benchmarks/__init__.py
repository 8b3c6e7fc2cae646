"""Benchmarks and tuning scripts (not part of the installed package)."""
