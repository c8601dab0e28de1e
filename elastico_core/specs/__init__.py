"""File formats at the edge: cluster YAML, job YAML (with custom workloads), running-state JSON.

Structure is checked with pydantic (unknown keys refused); the domain values of ``elastico_core.model``
check meaning. Every failure becomes one ``SpecError`` naming the file, the job and the field.
"""

from elastico_core.specs.files import (
    load_cluster,
    load_jobs,
    load_running,
    parse_cluster,
    parse_jobs,
    parse_jobs_document,
    parse_running,
)

__all__ = ["load_cluster", "load_jobs", "load_running", "parse_cluster", "parse_jobs", "parse_jobs_document", "parse_running"]
