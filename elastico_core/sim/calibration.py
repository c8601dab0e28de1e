"""Fit the contention model's constants to Table 6 (how ``ContentionParams`` was obtained).

Run ``fit_contention(book)`` to reproduce the shipped constants; ``table6_error(book, params)``
gives the mean absolute decay error the docs quote. Uses scipy (a dependency of the project).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elastico_core.iac.table6 import TABLE6
from elastico_core.model.profile import Profile
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.sim.profiles import ProfileBook
from elastico_core.sim.truth import ContentionParams, contention, demand_of

CHANGES = {"": {}, "pc": {"prefix_caching": True}, "ck": {"checkpointing": True}}


@dataclass(frozen=True, slots=True)
class Table6Fit:
    params: ContentionParams
    mae_decay: float  # mean |decay_model - decay_paper| over both sides of all rows
    rows: tuple[tuple[str, float, float, float, float], ...]  # label, paper a, paper b, model a, model b


def _profile(book: ProfileBook, workload: str, change: str) -> Profile:
    w = PAPER_WORKLOADS[workload]
    knobs = w.defaults.with_(**CHANGES[change])
    p = book.profile(w, knobs)
    assert p is not None, (workload, change)
    return p


def _arrays(book: ProfileBook) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    a_rows, b_rows, y = [], [], []
    for wa, ca, wb, cb, da, db in TABLE6:
        pa, pb = demand_of(_profile(book, wa, ca)), demand_of(_profile(book, wb, cb))
        a_rows += [pa, pb]
        b_rows += [pb, pa]
        y += [da, db]
    return np.array(a_rows), np.array(b_rows), np.array(y), float(book.gpu.memory_mib)


def table6_error(book: ProfileBook, params: ContentionParams = ContentionParams()) -> Table6Fit:
    a, b, y, mem = _arrays(book)
    s = contention(a[:, 0], a[:, 1], a[:, 2], b[:, 0], b[:, 1], b[:, 2], mem, params)
    model = 1.0 / s
    rows = tuple(
        (f"{wa}{'/' + ca if ca else ''} + {wb}{'/' + cb if cb else ''}", da, db, float(model[2 * i]), float(model[2 * i + 1]))
        for i, (wa, ca, wb, cb, da, db) in enumerate(TABLE6)
    )
    return Table6Fit(params, float(np.mean(np.abs(model - y))), rows)


def fit_contention(book: ProfileBook, mps_overhead: float = 0.03) -> Table6Fit:
    """Least squares on log-slowdown over (a_sm, a_bw, theta, gamma), with the MPS overhead fixed."""
    from scipy.optimize import least_squares

    a, b, y, mem = _arrays(book)

    def resid(x: np.ndarray) -> np.ndarray:
        p = ContentionParams(mps_overhead, float(x[0]), float(x[1]), float(x[2]), float(x[3]), alpha_mem=0.0)
        s = contention(a[:, 0], a[:, 1], a[:, 2], b[:, 0], b[:, 1], b[:, 2], mem, p)
        return np.log(s) - np.log(1.0 / y)

    res = least_squares(resid, [0.8, 0.5, 0.6, 1.0], bounds=([0, 0, 0.2, 0.5], [5, 5, 1.2, 3]))
    x = res.x
    return table6_error(book, ContentionParams(mps_overhead, float(x[0]), float(x[1]), float(x[2]), float(x[3])))
