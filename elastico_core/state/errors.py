"""Errors of the state layer: each one line, each an ``ElasticoError`` so the CLI exits 2 without a traceback."""

from __future__ import annotations

from elastico_core.model.errors import ElasticoError


class StateError(ElasticoError):
    """The planner state refused an operation (base of the errors below)."""


class UnknownJob(StateError, KeyError):
    """No job has this id (or this external identity)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id!r} in the planner state")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class StateConflict(StateError):
    """The operation does not apply to the job as it is now: a stale token, a finished job, a taken id.

    Callers should re-read the job (``JobService.get``) and act on what it says now.
    """


class SchemaMismatch(StateError):
    """The database was created by another ElastiCo version; run ``elastico state upgrade``."""


class LeaseLost(StateError):
    """Another controller holds the controller lease (or took it over while this one was planning)."""


class StateUnavailable(StateError):
    """The state database cannot be written or reached (read-only file or replica, refused connection).

    Raised in place of the driver's error so that every caller gets one line (with the URL redacted)
    and a long-running controller can back off and retry instead of logging a traceback each epoch.
    """

    exit_code = 1  # not the input's fault
