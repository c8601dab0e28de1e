"""Cached profile lookups for one simulated cluster (the simulator and every policy read the same rows)."""

from __future__ import annotations

from dataclasses import dataclass, field

from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import GpuModel
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.rst.store import ProfileStore


@dataclass
class ProfileBook:
    """``ProfileStore.lookup`` memoised per (workload, knobs) on the cluster's one GPU model.

    The simulator models homogeneous clusters (one GPU model), as the paper's testbed and Table 8 do.
    """

    store: ProfileStore
    gpu: GpuModel
    _cache: dict[tuple[str, Knobs], Profile | None] = field(default_factory=dict, repr=False)

    @classmethod
    def for_cluster(cls, store: ProfileStore, cluster: Cluster) -> ProfileBook:
        models = cluster.gpu_models()
        if len(models) != 1:
            raise SpecError(
                f"the simulator models one GPU model per cluster, got {[m.name for m in models]}", where=f"cluster {cluster.name!r}"
            )
        return cls(store, models[0])

    def profile(self, workload: Workload, knobs: Knobs) -> Profile | None:
        key = (workload.name, knobs)
        if key not in self._cache:
            self._cache[key] = self.store.lookup(workload, knobs, self.gpu)
        return self._cache[key]
