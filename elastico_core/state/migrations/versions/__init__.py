"""Revisions, oldest first. Alembic skips this file."""
