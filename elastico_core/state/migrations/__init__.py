"""Alembic environment and revisions of the planner state (package data; run via ``elastico_core.state.migrate``)."""
