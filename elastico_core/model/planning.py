"""What one planning epoch reads (STYLE G4): the input both drivers of the Planner build."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec
from elastico_core.model.plan import Prices
from elastico_core.model.state import Assignment


@dataclass(frozen=True, slots=True)
class PlanningInput:
    """Everything one epoch reads (G4): the cluster, all known jobs, what runs where, last prices."""

    cluster: Cluster
    jobs: tuple[JobSpec, ...]
    running: Mapping[str, Assignment] = field(default_factory=lambda: MappingProxyType({}))
    prices: Prices | None = None
    waiting: frozenset[str] = frozenset()
    utilization: float | None = None  # U(t) of Eq. 11; default: demand pressure of all jobs
    # with queues: pending jobs owed quota their queue lent, and for how many epochs so far (the last
    # plan's ``owed``); at ``cluster.queues.reclaim_epochs - 1`` the lent quota is taken back
    owed: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
