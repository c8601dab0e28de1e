"""What the planner remembers between epochs, behind one invalidation rule.

None of it changes a decision: every entry is a pure function of what it was derived from, kept so
that a steady epoch rebuilds only what changed (docs/planner.md lists what each saves).

**The rule**, checked once by ``PlannerCaches.begin`` at the start of every epoch:

* derived from the **cluster** (option compiler, job entries and their table rows, board layout,
  market totals, GPU memories, placements, waiting jobs' nearest demands): dropped when the cluster
  changes (by value);
* derived from the **config** (all of the above, and the switching-cost weights): dropped when the
  planner's config object is replaced;
* derived from the **predictor** (predicted pair slowdowns): dropped when it is replaced;
* the **last input and its plan**: dropped with any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elastico_core.esp.pricing import ClusterTotals
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs
from elastico_core.model.plan import Placement, Plan, Queued
from elastico_core.model.planning import PlanningInput
from elastico_core.model.state import Assignment
from elastico_core.pds.board import Demand, Layout
from elastico_core.pds.interference import PairMemo
from elastico_core.pds.options import OptionCompiler, OptionSet, RowStore
from elastico_core.rst.store import ProfileStore


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One job as the planner last prepared it, reused while its spec and assignment stay the same objects."""

    spec: JobSpec
    assignment: Assignment | None
    options: OptionSet
    current: int  # option index of the running configuration, -1 if pending
    gpus: tuple[int, ...]  # board indexes of the GPUs it runs on
    switch: np.ndarray | None  # Eq. 7's switching cost per option (running jobs)
    problem: Queued | None  # why it cannot be planned at all
    slot: int  # where its rows sit in the RowStore, -1 before they are written
    size: float = 1.0  # its weight's size factor (``pds.job_size.SizeWeights``): the row holds spec.weight x size


class PlannerCaches:
    """Every cache of the planner; ``begin`` applies the module's invalidation rule."""

    def __init__(self, store: ProfileStore) -> None:
        self.store = store
        self._cluster: Cluster | None = None
        self._predictor: SlowdownPredictor | None = None
        self._config: object | None = None
        self.rows = RowStore()  # the cached jobs' table rows, at the slot each entry names
        self.jobs: dict[str, JobEntry] = {}
        self.placements: dict[str, tuple[OptionSet, int, tuple[int, ...], Placement]] = {}
        # the costliest-knob weight per option, by (option set, running knobs): a set belongs to one
        # knob space, so the knobs' change kinds are the same for every job sharing it
        self.worst: dict[tuple[int, Knobs], tuple[OptionSet, np.ndarray]] = {}
        # a waiting job's demands at its nearest configurations, by option set (what its queue reason measures)
        self.nearest: dict[int, tuple[OptionSet, tuple[Demand, ...]]] = {}
        self.nearest_interned: dict[tuple[Demand, ...], tuple[Demand, ...]] = {}  # one tuple per distinct value
        self.last: tuple[PlanningInput, Plan] | None = None
        self.compiler: OptionCompiler
        self.layout: Layout
        self.totals: ClusterTotals
        self.gpu_mem: list[float]
        self.pairs: PairMemo

    def begin(self, cluster: Cluster, predictor: SlowdownPredictor, config: object, sm_capacity: float) -> None:
        """Drop whatever the epoch's cluster, predictor or config invalidates (the module's rule)."""
        new_config = config is not self._config
        if new_config:
            self._config = config
            self.worst.clear()
        if new_config or (cluster is not self._cluster and cluster != self._cluster):
            self._cluster = cluster
            self.compiler = OptionCompiler(cluster, self.store, sm_capacity)
            self.layout = Layout.of(cluster, sm_capacity)
            self.totals = ClusterTotals.of(cluster)
            self.gpu_mem = [float(g.model.memory_mib) for g in cluster.gpus]
            self.jobs.clear()
            self.rows.clear()
            self.placements.clear()
            self.nearest.clear()
            self.nearest_interned.clear()
            self.last = None
        self.pairs_for(predictor)

    def pairs_for(self, predictor: SlowdownPredictor) -> PairMemo:
        """The predicted pair slowdowns, dropped (with the last plan) when the predictor is replaced."""
        if predictor is not self._predictor:
            self._predictor = predictor
            self.pairs = PairMemo(predictor)
            self.last = None
        return self.pairs
