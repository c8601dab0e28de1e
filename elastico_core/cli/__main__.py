"""``python -m elastico_core.cli`` is ``elastico``."""

from elastico_core.cli import main

main()
