"""The shared-cluster study: Philly's virtual clusters as queues, every policy with and without them.

``queue_study`` imports a window of the Philly trace (each job in its virtual cluster's queue), sets the
queues' nominal quotas by ``sim.queues.philly_queues`` (proportional to each virtual cluster's GPU-hours
over the whole trace, equal weights, one cohort), and simulates each policy twice on the same cluster:
with the queues and without them. Per policy it reports the average JCT, the guarantee-violation time
and Jain's index of the queues' normalised shares (``sim.queues.queue_metrics``), the GPU busy fraction
against the same policy without queues, and what taking quota back cost: preemptions (a reclaim's
checkpoint-and-requeue), reshapes (switches), checkpoint-resumes and the GPU-hours spent changing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from elastico_core.rst.store import ProfileStore
from elastico_core.sim.metrics import summarize
from elastico_core.sim.philly import DEFAULT_START_H, import_philly
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.queues import demand_over_time, hours_by_queue, philly_queues, queue_metrics
from elastico_core.sim.registry import LABELS, default_registry
from elastico_core.sim.result import SimResult
from elastico_core.sim.runner import cluster_for
from elastico_core.sim.simulator import SimConfig, simulate
from elastico_core.sim.truth import ContentionPredictor, TruthKind, make_truth

Progress = Callable[[str], Callable[[float], None] | None]


@dataclass(frozen=True, slots=True)
class QueueStudy:
    philly: Path
    gpus: int = 32
    hours: float = 24.0
    start_h: float = DEFAULT_START_H
    sample: float = 0.1
    seed: int = 0
    reclaim_epochs: int = 3
    policies: tuple[PolicyKind, ...] = (PolicyKind.VOLCANO, PolicyKind.LUCID, PolicyKind.GREEDY, PolicyKind.ELASTICO)


def queue_study(spec: QueueStudy, store: ProfileStore, progress: Progress | None = None
                ) -> tuple[dict[str, object], dict[tuple[PolicyKind, bool], SimResult]]:
    """Run the study (module doc); returns its document and every simulation (policy, with queues)."""
    everything = import_philly(spec.philly, seed=spec.seed, hours=1e9, start_h=0.0)
    trace = import_philly(spec.philly, seed=spec.seed, hours=spec.hours, start_h=spec.start_h, sample=spec.sample)
    plain = cluster_for(spec.gpus)
    model = plain.gpu_models()[0]
    usable_gib = plain.usable_mem_mib(model) / 1024.0
    queues = philly_queues(hours_by_queue(everything), spec.gpus, model.name, usable_gib, reclaim_epochs=spec.reclaim_epochs)
    shared = replace(plain, queues=queues)
    ctx = PolicyContext(store, ContentionPredictor(), spec.seed)
    config = SimConfig()
    results: dict[tuple[PolicyKind, bool], SimResult] = {}
    for kind in spec.policies:
        for with_queues, cluster in ((True, shared), (False, plain)):
            tag = f"{kind.value}{' +queues' if with_queues else ''}"
            results[(kind, with_queues)] = simulate(
                trace, default_registry().get(kind)(ctx), cluster, spec.seed, store=store,
                truth=make_truth(TruthKind.CONTENTION, spec.seed), config=config, progress=progress(tag) if progress else None,
            )
    grid, level = demand_over_time(trace)
    inside = grid < trace.span_s
    over = float(np.mean(level[inside] > spec.gpus)) if inside.any() else 0.0
    active = set(hours_by_queue(trace))
    doc: dict[str, object] = {
        "run": {
            "philly": spec.philly.name, "gpus": spec.gpus, "hours": spec.hours, "start_h": spec.start_h, "sample": spec.sample,
            "seed": spec.seed, "jobs": len(trace), "reclaim_epochs": spec.reclaim_epochs, "epoch_s": config.epoch_s,
            "deadline_s": (spec.reclaim_epochs + 1) * config.epoch_s,
            "demand_above_capacity_fraction": round(over, 4), "demand_peak_gpus": float(level.max()) if len(level) else 0.0,
            "queues": {q.name: {"nominal_gpus": q.nominal_of(model.name).gpus, "active_in_window": q.name in active}
                       for q in queues.queues},
        },
        "policies": {},
    }
    table: dict[str, object] = {}
    for kind in spec.policies:
        r, r0 = results[(kind, True)], results[(kind, False)]
        m, m0 = summarize(r), summarize(r0)
        assert r.queues is not None
        qm = queue_metrics(r.queues, 0.0, r.window_s)
        table[kind.value] = {
            "label": LABELS.get(kind, kind.value),
            "avg_jct_h": _r(m.avg_jct_s / 3600.0), "avg_jct_h_without_queues": _r(m0.avg_jct_s / 3600.0),
            "guarantee_violation_gpu_h": _r(qm.violation_gpu_h), "jain_index": _r(qm.jain),
            "gpu_busy": _r(m.gpu_busy), "gpu_busy_without_queues": _r(m0.gpu_busy),
            "gpu_busy_points_vs_without": _r(100.0 * (m.gpu_busy - m0.gpu_busy)),
            "reclaims": {"preemptions": m.preemptions, "preemptions_without_queues": m0.preemptions,
                         "reshapes": m.switches, "reshapes_without_queues": m0.switches, "migrations": m.migrations,
                         "checkpoint_resumes": sum(j.checkpoint_resumes for j in r.jobs),
                         "checkpoint_resumes_without_queues": sum(j.checkpoint_resumes for j in r0.jobs),
                         "changing_gpu_h": _r(m.changing_gpu_h), "changing_gpu_h_without_queues": _r(m0.changing_gpu_h)},
            "jobs_finished": m.jobs_finished, "jobs": m.jobs_total,
            "queues": qm.as_json()["queues"],
        }
    doc["policies"] = table
    return doc, results


def _r(x: float) -> float | None:
    return round(float(x), 4) if math.isfinite(x) else None


def study_markdown(doc: dict[str, object]) -> str:
    """The study as the Markdown table docs/queues.md shows."""
    run = doc["run"]
    assert isinstance(run, dict)
    lines = [
        f"Philly window {run['start_h']:g} h + {run['hours']:g} h, sample {run['sample']:g} ({run['jobs']} jobs), "
        f"{run['gpus']} GPUs, {len(run['queues'])} queues, reclaim within {run['reclaim_epochs']} epochs; demand above "
        f"capacity {100 * float(run['demand_above_capacity_fraction']):.0f} % of the window (peak {run['demand_peak_gpus']:g} GPUs).",
        "",
        "| policy | avg JCT (h), queues / none | guarantee violation (GPU-h) | Jain's index | GPU busy, queues / none (points) "
        "| preemptions | reshapes | checkpoint-resumes | GPU-h changing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    pols = doc["policies"]
    assert isinstance(pols, dict)
    for p in pols.values():
        rc = p["reclaims"]
        lines.append(
            f"| {p['label']} | {p['avg_jct_h']:.2f} / {p['avg_jct_h_without_queues']:.2f} | {p['guarantee_violation_gpu_h']:.2f} "
            f"| {p['jain_index']:.3f} | {100 * p['gpu_busy']:.1f} % / {100 * p['gpu_busy_without_queues']:.1f} % "
            f"({p['gpu_busy_points_vs_without']:+.1f}) | {rc['preemptions']} ({rc['preemptions_without_queues']}) "
            f"| {rc['reshapes']} ({rc['reshapes_without_queues']}) | {rc['checkpoint_resumes']} ({rc['checkpoint_resumes_without_queues']}) "
            f"| {rc['changing_gpu_h']:.2f} ({rc['changing_gpu_h_without_queues']:.2f}) |"
        )
    lines.append("")
    lines.append("In brackets: the same policy without queues.")
    return "\n".join(lines)


def plot_queues(results: dict[tuple[PolicyKind, bool], SimResult], kinds: Sequence[PolicyKind], path: Path) -> Path:
    """Each queue's held GPUs over the window (stacked), one panel per policy, the cluster's GPUs dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(kinds), 1, figsize=(8, 2.4 * len(kinds)), sharex=True, squeeze=False)
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        r = results[(kind, True)]
        tr = r.queues
        assert tr is not None
        edges = np.arange(0.0, max(r.window_s, 600.0) + 600.0, 600.0)
        idx = np.clip(np.searchsorted(tr.t, edges[:-1], side="right") - 1, 0, None)
        held = tr.held[idx] if len(tr.t) else np.zeros((len(edges) - 1, len(tr.names)))
        used = held.sum(axis=0) > 0
        ax.stackplot(edges[:-1] / 3600.0, held[:, used].T, labels=[n for n, u in zip(tr.names, used, strict=True) if u], alpha=0.85)
        ax.axhline(r.gpus, ls="--", color="k", lw=0.8)
        ax.set_ylabel("GPUs held")
        ax.set_title(LABELS.get(kind, kind.value), fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6, ncol=4, loc="upper right")
    axes[-1, 0].set_xlabel("hours")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
