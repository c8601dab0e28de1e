"""ElastiCo: elastic configuration and interference-aware co-location for shared GPU clusters."""

__version__ = "0.1.0"
