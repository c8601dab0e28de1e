"""Elastic Shadow Pricing (§3.2): per-job best responses to per-resource prices, and tâtonnement."""
