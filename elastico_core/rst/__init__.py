"""Resource Shape Transformation (§3.1): configuration spaces, estimators and the profile store."""
