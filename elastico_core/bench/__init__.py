"""Benchmarks of the hot paths; each prints its figures (they are not timed unit tests)."""
