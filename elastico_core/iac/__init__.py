"""Interference-Aware Co-location (§3.3): pairwise slowdown predictors and tolerance thresholds."""
