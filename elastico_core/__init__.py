"""ElastiCo: elastic configuration and interference-aware co-location for shared GPU clusters."""

__version__ = "0.1.0"

import logging as _logging

# A library logs, the application decides where to: without this, Python's last-resort handler would
# print library warnings (e.g. "no interference model registered") ahead of the CLI's own output.
_logging.getLogger("elastico_core").addHandler(_logging.NullHandler())
