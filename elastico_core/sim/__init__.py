"""The trace-driven simulator: engine, traces, ground truth, policies (baselines), metrics, reports."""

BUILTIN = "builtin:paper-mix"  # the built-in 24-hour mix (sim/paper_mix.py)
PHILLY = "philly:"  # prefix of a Philly philly.csv given as a trace (sim/philly.py)
