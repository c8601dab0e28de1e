"""The one error type that user-facing validation raises."""

from __future__ import annotations


class ElasticoError(Exception):
    """Base of every error ElastiCo raises on purpose. ``exit_code``: the CLI's, 2 for a mistake in the input,
    1 for a failure that is not the input's fault."""

    exit_code = 2


class SpecError(ElasticoError, ValueError):
    """A job, cluster, workload or data file failed validation.

    ``where`` names the offending object (file, job id, row) and ``field`` the attribute,
    so the CLI can print one line such as ``jobs.yaml: job 'bert-1': floor: must be >= 0``.
    """

    def __init__(self, message: str, *, where: str | None = None, field: str | None = None) -> None:
        self.message = message
        self.where = where
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = [p for p in (self.where, self.field) if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message

    def located(self, where: str) -> SpecError:
        """The same error with an outer location prepended (file name around a job id)."""
        inner = f"{where}: {self.where}" if self.where else where
        return SpecError(self.message, where=inner, field=self.field)
