"""IAC as the planner asks it: pair slowdowns remembered across epochs, tolerances per option.

An epoch assesses every co-located pair, and from one epoch to the next almost all of them are the
same pairs at the same configurations. ``SlowdownPredictor`` promises a pure function of each row,
so a slowdown predicted once is reused until the predictor changes; only new pairs are built into a
feature batch (building the batch costs more than most predictors do).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from elastico_core.iac.batch import PairBatch, ProfileBatch, profile_batch
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.iac.thresholds import ThresholdConfig, adaptive_tau
from elastico_core.model.job import JobSpec
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.pds.options import EpochTable, OptionSet

Row = tuple[int, int, int, int]  # job a, its option, partner b, its option: asks S(a|b)


def pair_batch(rows: Sequence[Row], table: EpochTable, gpu_mem: Sequence[float]) -> PairBatch:
    """The predictor's input for ``rows`` (features of both sides, the shared GPU's memory)."""

    def side(items: list[tuple[int, int]]) -> ProfileBatch:
        return ProfileBatch(
            workload=np.array([table.sets[j].profiles[k].workload for j, k in items], dtype=object),
            knobs_key=np.array([table.sets[j].knobs[k].to_json() for j, k in items], dtype=object),
            values=np.array([table.sets[j].features[k] for j, k in items]).reshape(len(items), -1),
        )

    return PairBatch(
        side([(a, ka) for a, ka, _, _ in rows]), side([(b, kb) for _, _, b, kb in rows]), np.array(gpu_mem, dtype=float)
    )


class PairMemo:
    """Predicted S(a|b) per (option set, option, partner's set, its option, GPU memory).

    Keys use the option sets' ids (sets are shared by every job of one signature, so jobs of one
    workload share entries); each entry keeps its two sets, so a recycled id can never hit.
    """

    def __init__(self, predictor: SlowdownPredictor, limit: int = 200_000) -> None:
        self.predictor = predictor
        self.limit = limit
        self._memo: dict[tuple[int, int, int, int, float], tuple[OptionSet, OptionSet, float]] = {}
        # the same values asked by profile (the simulator's baselines hold profiles, not option sets):
        # keyed by the profiles' ids, since hashing Knobs is slow; each entry keeps its two profiles
        self._by_profile: dict[tuple[int, int, float], tuple[Profile, Profile, float]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._memo) + len(self._by_profile)

    def slowdown(self, wa: Workload, pa: Profile, wb: Workload, pb: Profile, gpu_mem: float) -> float:
        """S(a|b) for one pair of profiled configurations (``pa`` of ``wa`` beside ``pb`` of ``wb``)."""
        key = (id(pa), id(pb), gpu_mem)
        hit = self._by_profile.get(key)
        if hit is not None and hit[0] is pa and hit[1] is pb:
            self.hits += 1
            return hit[2]
        self.misses += 1
        batch = PairBatch(profile_batch([(wa, pa)]), profile_batch([(wb, pb)]), np.array([gpu_mem]))
        value = float(np.asarray(self.predictor.predict(batch), dtype=float)[0])
        if len(self._by_profile) >= self.limit:
            self._by_profile.clear()
        self._by_profile[key] = (pa, pb, value)
        return value

    def pair(self, table: EpochTable, a: int, ka: int, b: int, kb: int, gpu_mem: float) -> float:
        """S(a|b) for one row, as ``slowdowns`` answers it (the guard asks one partner at a time)."""
        sa, sb = table.sets[a], table.sets[b]
        hit = self._memo.get((id(sa), ka, id(sb), kb, gpu_mem))
        if hit is not None and hit[0] is sa and hit[1] is sb:
            self.hits += 1
            return hit[2]
        return float(self.slowdowns(table, [(a, ka, b, kb)], [gpu_mem])[0])

    def slowdowns(self, table: EpochTable, rows: Sequence[Row], gpu_mem: Sequence[float]) -> np.ndarray:
        sets = table.sets
        memo = self._memo
        out: list[float] = []
        miss: list[int] = []
        for i, (a, ka, b, kb) in enumerate(rows):
            sa, sb = sets[a], sets[b]
            hit = memo.get((id(sa), ka, id(sb), kb, gpu_mem[i]))
            if hit is not None and hit[0] is sa and hit[1] is sb:
                out.append(hit[2])
            else:
                miss.append(i)
                out.append(1.0)
        self.hits += len(rows) - len(miss)
        self.misses += len(miss)
        if miss:
            sub = [rows[i] for i in miss]
            mem = [gpu_mem[i] for i in miss]
            s = np.asarray(self.predictor.predict(pair_batch(sub, table, mem)), dtype=float)
            if s.shape != (len(sub),):
                raise ValueError(f"predictor {self.predictor.name!r} returned shape {s.shape} for {len(sub)} pairs")
            if len(memo) + len(miss) > self.limit:
                memo.clear()
            for i, (a, ka, b, kb), m, v in zip(miss, sub, mem, s.tolist(), strict=True):
                memo[(id(sets[a]), ka, id(sets[b]), kb, m)] = (sets[a], sets[b], v)
                out[i] = v
        return np.array(out, dtype=float)


class Tolerances:
    """tau_j(t) of Eq. 11 per (job, option) cell of one epoch, computed a job's row at a time when asked.

    An epoch asks for the cells of co-located jobs only (a few hundred of a table's thousands), so the
    whole matrix is never built on the planning path; a row, once computed, answers every later ask
    (the guard and the reasons ask the same jobs many times). Each cell is the same elementwise formula.
    """

    WHOLE = 1 << 16

    def __init__(self, table: EpochTable, specs: Sequence[JobSpec], utilization: float, cfg: ThresholdConfig) -> None:
        self.table = table
        self.utilization = utilization
        self.config = cfg
        self.floors = np.array([s.floor for s in specs], dtype=float)
        self._rows = np.full(table.throughput.shape, np.nan)
        self._known = np.zeros(len(self.floors), dtype=bool)

    def at(self, jobs: np.ndarray, options: np.ndarray) -> np.ndarray:
        """tau of the cells ``(jobs[i], options[i])``."""
        new = jobs[~self._known[jobs]]
        if len(new):
            new = np.unique(new)
            self._rows[new] = adaptive_tau(self.table.throughput[new], self.floors[new, None], self.utilization, self.config)
            self._known[new] = True
        return self._rows[jobs, options]

    def cell(self, job: int, option: int) -> float:
        """tau of one cell, as ``at`` answers it. On a table of at most ``WHOLE`` cells the first ask
        computes every row (the guard and the reasons ask cell by cell, most of the table's jobs)."""
        if not self._known[job]:
            rows = np.arange(len(self._known)) if self._rows.size <= self.WHOLE else np.array([job])
            self.at(rows, np.zeros(len(rows), dtype=np.intp))
        return float(self._rows[job, option])

    def of(self, cells: Sequence[tuple[int, int]]) -> np.ndarray:
        if not cells:
            return np.zeros(0)
        jobs, options = zip(*cells, strict=True)
        return self.at(np.array(jobs, dtype=np.intp), np.array(options, dtype=np.intp))

    @property
    def matrix(self) -> np.ndarray:
        """Every cell at once (J, K)."""
        return adaptive_tau(self.table.throughput, self.floors[:, None], self.utilization, self.config)
