"""The trace-driven simulator: engine, traces, ground truth, policies (baselines), metrics, reports."""
