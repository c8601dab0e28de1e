"""Jobs that can never run on a cluster, found before they are accepted: refused at submit, not queued forever.

A job is refused when none of its configurations could run even on the empty cluster — its GPU memory,
SM share or gang size exceeds every GPU of the cluster, its host memory or CPU cores exceed every node
of its GPU model (``pds.nodefit``), or no configuration reaches its floor. The check is the planner's
own option compiler under the controller's rules, so what is refused here is exactly what the
controller would queue as ``no-feasible-config`` or ``floor-unreachable``, with the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.job import JobSpec
from elastico_core.model.plan import QueueCode, Queued
from elastico_core.pds.options import OptionCompiler
from elastico_core.pds.rules import PRODUCTION, ElasticoRules
from elastico_core.rst.store import ProfileStore

NEVER = (QueueCode.NO_FEASIBLE_CONFIG, QueueCode.FLOOR_UNREACHABLE)


def never_runs(specs: Sequence[JobSpec], cluster: Cluster, store: ProfileStore,
               rules: ElasticoRules = PRODUCTION) -> list[Queued]:
    """The jobs of ``specs`` that no configuration lets run on ``cluster``, each with the planner's reason."""
    compiler = OptionCompiler(rules.planning_cluster(cluster), store, rules.planner.sm_capacity)
    out = []
    for spec in specs:
        problem = compiler.options(spec).problem
        if problem is not None and problem.code in NEVER:
            out.append(problem)
    return out


def check_admissible(specs: Sequence[JobSpec], cluster: Cluster, store: ProfileStore, where: str,
                     rules: ElasticoRules = PRODUCTION) -> None:
    """Raise one ``SpecError`` naming the first job that can never run (and how many more there are)."""
    refused = never_runs(specs, cluster, store, rules)
    if not refused:
        return
    first = refused[0]
    n = len(refused) - 1
    more = f" (and {n} more job{'s' if n > 1 else ''} that can never run)" if n else ""
    raise SpecError(f"{first.reason} (cluster {cluster.name!r}){more}", where=f"{where}: job {first.job_id!r}")
