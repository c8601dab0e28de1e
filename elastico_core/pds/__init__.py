"""Phase-Aware Disaggregated Scheduling (§3.4): the planner, packing, actions and launch budgets."""
