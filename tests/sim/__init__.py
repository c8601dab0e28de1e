"""Tests of the trace-driven simulator (elastico_core/sim)."""
