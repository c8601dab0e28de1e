"""The policies the simulator drives: Volcano-like, Lucid-like, greedy first-fit and ElastiCo."""
