"""The quotas in a user's words: why a job waits for its queue, in Kueue's precision, and every queue's
figures as ``elastico queues list`` shows them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from elastico_core.model.plan import Binding, QueueCode, Queued, QueueStatus, Shortfall
from elastico_core.model.queues import GIB, QueueSet
from elastico_core.pds.quotas import TOL, Entitlement, QuotaEpoch, QuotaLayout


def quota_reason(lay: QuotaLayout, q: int, model: int, need: tuple[float, float], held: np.ndarray, limit: np.ndarray,
                 ent: Entitlement) -> tuple[str, Shortfall]:
    """Why a job of queue ``q`` does not fit its queue's quota on ``model``, in Kueue's precision: what it
    needs, what is free of the nominal quota, and which limit binds (no cohort, the borrowing limit, or
    what the cohort lends it now)."""
    spec = lay.queues.queues[q]
    m = lay.models[model]
    short = [need[r] - (limit[q, model, r] - held[q, model, r]) for r in (0, 1)]
    r = 0 if short[0] >= short[1] else 1
    scale = 1.0 if r == 0 else lay.usable[model] / GIB
    what = "GPUs" if r == 0 else "GiB of GPU memory"
    nominal = lay.nominal[q, model, r]
    free_nominal = max(0.0, nominal - held[q, model, r])
    room = max(0.0, limit[q, model, r] - held[q, model, r])
    head = f"queue {spec.name}: needs {need[r] * scale:.1f} {what} of {m}, has {free_nominal * scale:.1f} free of nominal {nominal * scale:g}"
    borrow_limit = lay.borrow[q, model, r]
    if spec.cohort is None:
        tail = "; it has no cohort to borrow from"
    elif held[q, model, r] + need[r] > nominal + borrow_limit + TOL:
        tail = f"; borrowing limit {borrow_limit * scale:g} reached"
    elif ent.lent[q, model, r] > TOL and held[q, model, r] + need[r] <= nominal + TOL:
        tail = f"; {ent.lent[q, model, r] * scale:.1f} of its quota is lent while it had no work for it"
    elif ent.borrowed[q, model, r] <= TOL:
        tail = f"; cohort {spec.cohort} has no unused quota to lend it now"
    else:
        above = max(0.0, room - free_nominal)
        tail = (f" and {above * scale:.1f} of the {ent.borrowed[q, model, r] * scale:.1f} it may borrow now; cohort "
                f"{spec.cohort} lends no more (the rest of its quota is in use or kept by lending limits)")
    binding = Binding.QUOTA if r == 0 else Binding.QUOTA_MEMORY
    return head + tail, Shortfall(binding, float(need[r] * scale), float(room * scale), f"queue {spec.name}")


def model_reasons(lay: QuotaLayout, q: int, blocked: Sequence[tuple[int, tuple[float, float]]], held: np.ndarray,
                  limit: np.ndarray, ent: Entitlement) -> tuple[str, Shortfall]:
    """``quota_reason`` on every GPU model the job could run on (as Kueue names each flavor it tried), the
    model where it needs least first; the shortfall is that model's."""
    texts, first = [], None
    for model, need in blocked:
        text, short = quota_reason(lay, q, model, need, held, limit, ent)
        texts.append(text if first is None else text.split(": ", 1)[1])
        first = first or short
    assert first is not None
    return "; and ".join(texts), first


def unknown_reason(name: str, queues: QueueSet) -> tuple[str, Shortfall]:
    text = f"queue {name!r} is not a queue of this cluster (queues: {', '.join(queues.names)})"
    return text, Shortfall(Binding.QUOTA, 0.0, 0.0, f"queue {name}")


def statuses(qe: QuotaEpoch, held: np.ndarray, pending: np.ndarray, prices: Mapping[str, float]) -> tuple[QueueStatus, ...]:
    """Every queue as ``queues list`` shows it (GPUs summed over models; memory in GiB)."""
    lay, ent = qe.lay, qe.ent
    gib = lay.usable / GIB
    nominal = lay.nominal
    cols = {
        "nominal_gpus": nominal[..., 0].sum(axis=1), "nominal_gib": (nominal[..., 1] * gib).sum(axis=1),
        "used_gpus": held[..., 0].sum(axis=1), "used_gib": (held[..., 1] * gib).sum(axis=1),
        "borrowed_gpus": np.maximum(held - nominal, 0.0)[..., 0].sum(axis=1), "lent_gpus": _lent(lay, held)[..., 0].sum(axis=1),
        "demand_gpus": ent.demand[..., 0].sum(axis=1), "fair_share_gpus": ent.cap[..., 0].sum(axis=1),
        "borrowing_limit_gpus": lay.borrow[..., 0].sum(axis=1), "lending_limit_gpus": lay.lend[..., 0].sum(axis=1),
    }
    rows = {k: v.tolist() for k, v in cols.items()}
    names = lay.goods()
    price = np.array([prices.get(g, 0.0) for g in names]).reshape(lay.n_queues, -1).sum(axis=1).tolist()
    return tuple(
        QueueStatus(name=q.name, cohort=q.cohort, weight=q.weight, pending=int(pending[i]), price=price[i],
                    **{k: v[i] for k, v in rows.items()})
        for i, q in enumerate(lay.queues.queues)
    )


def _lent(lay: QuotaLayout, held: np.ndarray) -> np.ndarray:
    """Of each queue's nominal quota, how much others hold now: the cohort's use beyond nominal quotas,
    drawn from its lenders' unused quota in proportion (the unnamed capacity first)."""
    lent = np.zeros_like(held)
    over = np.maximum(held - lay.nominal, 0.0)
    idle = np.minimum(lay.lend, np.maximum(lay.nominal - held, 0.0))
    for c in np.unique(lay.cohort[lay.cohort >= 0]).tolist():
        members = lay.cohort == c
        used = over[members].sum(axis=0)
        pool = idle[members].sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(pool > TOL, np.minimum(1.0, used / np.where(pool > TOL, pool, 1.0)), 0.0)
        lent[members] = idle[members] * share[None]
    return lent


def relabel(queued: Sequence[Queued], reasons: Mapping[str, tuple[QueueCode, str, Shortfall | None]]) -> tuple[Queued, ...]:
    """The plan's queue with the quota's codes and reasons where the quota is why a job waits."""
    out = []
    for q in queued:
        hit = reasons.get(q.job_id)
        out.append(q if hit is None else Queued(q.job_id, hit[0], hit[1], hit[2]))
    return tuple(out)
