"""``elastico bench sim``: how fast the simulator replays a day of builtin:paper-mix, per policy.

Every policy runs as the comparisons run it (ElastiCo by the production rules, with the contention
predictor); ``load`` above 1 gives a contended day. Each policy's wall time is also given as a ratio to
Volcano-like's in the same run (the machine's speed moves between runs, the ratio much less)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from elastico_core.rst.store import ProfileStore
from elastico_core.sim.paper_mix import PaperMixConfig, paper_mix
from elastico_core.sim.policy import PolicyKind
from elastico_core.sim.runner import RunSpec, run_policies


def bench_sim(
    gpus: int, hours: float, kinds: Sequence[PolicyKind], seed: int = 0, *, store: ProfileStore, data_dir: Path | None = None,
    load: float = 1.0,
) -> dict[str, object]:
    trace = paper_mix(seed, PaperMixConfig(gpus=gpus, hours=hours, load=load), store=store, data_dir=data_dir)
    out: dict[str, object] = {"gpus": gpus, "hours": hours, "load": load, "seed": seed, "jobs": len(trace), "policies": {}}
    per: dict[str, object] = {}
    for kind in kinds:
        r = run_policies(trace, [kind], RunSpec(gpus, seed), store=store)[kind]
        lat = np.array(r.decide_ms) if r.decide_ms else np.zeros(1)
        per[kind.value] = {
            "wall_s": round(r.wall_s, 3),
            "events": r.events,
            "events_per_s": round(r.events / r.wall_s, 1) if r.wall_s > 0 else 0.0,
            "policy_calls": len(r.decide_ms),
            "policy_s": round(float(lat.sum()) / 1e3, 3),
            "sched_latency_ms_p50": round(float(np.percentile(lat, 50)), 3),
            "sched_latency_ms_p99": round(float(np.percentile(lat, 99)), 3),
            "simulated_h": round(r.end_s / 3600.0, 2),
            "jobs_finished": sum(1 for j in r.jobs if j.finished),
            "within_60s": r.wall_s <= 60.0,
        }
    if PolicyKind.VOLCANO.value in per:
        ref = float(per[PolicyKind.VOLCANO.value]["wall_s"])  # type: ignore[index]
        for fig in per.values():
            fig["wall_vs_volcano"] = round(float(fig["wall_s"]) / ref, 3) if ref > 0 else 0.0  # type: ignore[index]
    out["policies"] = per
    return out
