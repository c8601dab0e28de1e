"""The cluster the controller plans against, mirrored into the GPU ledger (``elastico_gpus``).

GPUs that leave the cluster file are marked absent, never deleted: a job may still hold them until the
planner preempts it, and the ledger must keep accounting for that memory until it is released. A GPU
whose usable memory shrank below what is reserved keeps its old capacity until the jobs on it leave.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from elastico_core.model.cluster import Cluster
from elastico_core.specs.files import parse_cluster
from elastico_core.state.db import StateStore
from elastico_core.state.models import DEFAULT_CONTROLLER, Controller, Gpu


def cluster_hash(cluster: Cluster) -> str:
    """Identity of a cluster's contents (the dataclass repr is deterministic)."""
    base = (cluster.name, cluster.nodes, cluster.m_sys_mib, cluster.max_jobs_per_gpu)
    text = repr((*base, cluster.queues) if cluster.queues else base)  # unchanged for a cluster without queues
    return hashlib.sha256(text.encode()).hexdigest()


def sync_cluster(store: StateStore, cluster: Cluster, cluster_yaml: str | None = None, name: str = DEFAULT_CONTROLLER) -> int:
    """Make the ledger's GPU rows match ``cluster``; returns how many rows changed (0 when already in sync)."""
    digest = cluster_hash(cluster)

    def tx(conn: Connection) -> int:
        stored = conn.execute(sa.select(Controller.cluster_hash).where(Controller.name == name)).scalar_one_or_none()
        if stored == digest:
            return 0
        wanted: dict[str, dict[str, object]] = {}
        gpu_models = {g.id: g.model for g in cluster.gpus}
        for gpu in cluster.gpus:
            node = cluster.node(gpu.node)
            wanted[gpu.id] = {
                "id": gpu.id, "node": gpu.node, "idx": gpu.index, "model": gpu.model.name,
                "signature": node.signature.key, "memory_mib": float(gpu.model.memory_mib),
                "capacity_mib": cluster.usable_mem_mib(gpu.model), "max_jobs": cluster.max_jobs_per_gpu,
                "present": True,
            }
        existing = {
            r["id"]: r
            for r in conn.execute(store.for_update(sa.select(Gpu.__table__).order_by(Gpu.id))).mappings()
        }
        inserts, updates = [], []
        for gid, row in wanted.items():
            old = existing.get(gid)
            if old is None:
                inserts.append({**row, "used_mem_mib": 0.0, "jobs": 0})
                continue
            new = dict(row)
            new["capacity_mib"] = max(cluster.usable_mem_mib(gpu_models[gid]), float(old["used_mem_mib"]))
            new["max_jobs"] = max(cluster.max_jobs_per_gpu, int(old["jobs"]))
            if any(old[k] != v for k, v in new.items()):
                updates.append({**{f"v_{k}": v for k, v in new.items() if k != "id"}, "gid": gid})
        absent = [gid for gid, old in existing.items() if gid not in wanted and old["present"]]
        if inserts:
            conn.execute(sa.insert(Gpu), inserts)
        if updates:
            cols = [k for k in wanted[next(iter(wanted))] if k != "id"]
            conn.execute(
                sa.update(Gpu).where(Gpu.id == sa.bindparam("gid")).values({c: sa.bindparam(f"v_{c}") for c in cols}),
                updates,
            )
        if absent:
            conn.execute(sa.update(Gpu).where(Gpu.id.in_(absent)).values(present=False))
        values: dict[str, object] = {"cluster_hash": digest}
        if cluster_yaml is not None:
            values["cluster_yaml"] = cluster_yaml
        conn.execute(sa.update(Controller).where(Controller.name == name).values(**values))
        return len(inserts) + len(updates) + len(absent)

    return store.write(tx)


def stored_cluster(store: StateStore, name: str = DEFAULT_CONTROLLER) -> tuple[Cluster, str] | None:
    """The cluster document the controller last ran with (so ``controller run`` may omit ``--cluster``)."""
    text = store.read(
        lambda conn: conn.execute(sa.select(Controller.cluster_yaml).where(Controller.name == name)).scalar_one_or_none()
    )
    if not text:
        return None
    return parse_cluster(text, "stored cluster"), text
