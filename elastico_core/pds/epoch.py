"""One epoch of Algorithm 1 as named steps over typed epoch data (``Planner._plan`` calls them in order).

``Epoch`` holds what the steps share: the epoch table, the market, the base score of Eq. 7, the
penalties Gamma, the pairs kept apart, and Q(t). The steps, by the line of Alg. 1 they implement:

* ``reserve`` (l. 1, Eq. 12) and ``price`` (l. 4, tâtonnement);
* ``Epoch.score`` (l. 5-7, Score_j(c; lambda*));
* ``bin_pack`` (l. 8: pack, fill, [the opt-in local search,] fill);
* ``assess`` (l. 9-16, IAC) and ``penalise`` (l. 13-14);
* ``repair`` (after M rounds: split what is still in violation);
* ``admit`` (l. 21-23: placements, the queue with its reasons, prices).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from elastico_core.esp.pricing import DualResult, Market, tatonnement
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import TP_KNOB
from elastico_core.model.plan import (
    Binding,
    Once,
    Penalty,
    Placement,
    Plan,
    Prices,
    QueueCode,
    Queued,
    RoundLog,
    Shortfall,
    Violation,
)
from elastico_core.model.planning import PlanningInput
from elastico_core.pds.actions import diff_actions
from elastico_core.pds.board import Board, Demand, Layout
from elastico_core.pds.caches import PlannerCaches
from elastico_core.pds.interference import PairMemo, Tolerances
from elastico_core.pds.local_search import local_search
from elastico_core.pds.options import EpochTable, OptionSet
from elastico_core.pds.packing import PackContext, fill, pack
from elastico_core.pds.shortfall import Refusal, Room, render, smallest_shortfall

if TYPE_CHECKING:  # the planner's config lives with the planner, which imports this module
    from elastico_core.pds.planner import PlannerConfig
    from elastico_core.pds.quotas import QuotaEpoch

Guard = Callable[[Board, int, int, tuple[int, ...]], bool]


class Clock:
    """Accumulates wall time per stage of an epoch (the breakdown of §5.7, Table 9)."""

    def __init__(self) -> None:
        self.t0 = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + (now - self.last)
        self.last = now

    def as_ms(self) -> dict[str, float]:
        out = {k: v * 1e3 for k, v in self.laps.items()}
        out["total"] = (time.perf_counter() - self.t0) * 1e3
        return out


@dataclass(frozen=True, slots=True)
class PairViolation:
    """A co-located pair (a < b) on GPU ``gpu`` where either side's slowdown exceeds its tau."""

    a: int
    b: int
    gpu: int
    slowdown_a: float
    slowdown_b: float
    tau_a: float
    tau_b: float


@dataclass(slots=True)
class Round:
    """One ESP<->IAC round: its board and what the plan needs of it if it is the best."""

    board: Board
    choice: np.ndarray
    prices: np.ndarray
    unplaced: dict[int, Refusal]
    slowdown: np.ndarray
    violations: list[PairViolation]
    objective: float
    log: RoundLog
    rents: np.ndarray  # (J, K) rent of every option at the round's prices
    score: np.ndarray  # (J, K) what ESP minimised: w - value + switch + Gamma + rent


@dataclass(slots=True, eq=False)
class Interference:
    """IAC as the epoch asks it: memoised pair predictions and the tolerances of Eq. 11."""

    memo: PairMemo
    tolerances: Tolerances
    gpu_mem: list[float]


@dataclass(slots=True, eq=False)
class Epoch:
    """The data one epoch's steps share; ``gamma``, ``forbidden``, ``careful`` and ``waiting`` change
    between rounds, everything else is fixed for the epoch."""

    inp: PlanningInput
    cfg: PlannerConfig
    table: EpochTable
    specs: tuple[JobSpec, ...]
    queued: list[Queued]  # jobs that cannot be planned at all
    current_gpus: dict[int, tuple[int, ...]]
    layout: Layout
    caches: PlannerCaches
    market: Market
    base: np.ndarray  # Eq. 7 without rent and Gamma: w_j - value + switch, (J, K)
    none_score: np.ndarray  # the score of not running: w_j, or inf for a running job
    prices: np.ndarray  # lambda, warm-started from the last epoch, updated every round
    reserve_unit: np.ndarray  # R_min of every job as a goods vector, (J, G)
    running_floor: np.ndarray  # what the running jobs need at their smallest, per good
    migration: np.ndarray  # extra score for moving a running job
    pending_order: list[int]  # pending jobs, in queue order
    iac: Interference | None  # None when the predictor says no pair interferes
    guard: Guard | None
    gamma: np.ndarray = field(init=False)  # Gamma of Eq. 7, (J, K)
    forbidden: dict[int, set[int]] = field(default_factory=dict)  # pairs kept apart
    waiting: set[int] = field(default_factory=set)  # Q(t) of Eq. 12
    careful: set[int] = field(default_factory=set)  # placed only where IAC admits them
    iterations: int = 0
    quota: QuotaEpoch | None = None  # the queues' quotas, when the cluster has queues (``pds/quotas.py``)

    def __post_init__(self) -> None:
        self.gamma = np.zeros_like(self.base)

    def score(self, prices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Alg. 1, l. 5-7: Score_j(c; lambda) of every option, and the rent part of it."""
        rents = self.market.rent(prices)
        return self.base + self.gamma + rents, rents


def reserve(
    capacity: np.ndarray, reserve_unit: np.ndarray, waiting: set[int], gamma: float, running_floor: np.ndarray
) -> np.ndarray:
    """Eq. 12: C_eff = C - gamma x sum over the waiting jobs of R_min, per good.

    Never below what the running jobs need at their smallest: they cannot be priced out, so a capacity
    under that would make prices climb every epoch without clearing.
    """
    cap = capacity - gamma * reserve_unit[sorted(waiting)].sum(axis=0) if waiting else capacity
    return np.maximum(np.maximum(cap, running_floor), 0.0)


def price(ep: Epoch) -> DualResult:
    """Alg. 1, l. 1 and 4: reserve for Q(t), then tâtonnement from the current prices."""
    cap = reserve(ep.market.capacity, ep.reserve_unit, ep.waiting, ep.cfg.reserve_gamma, ep.running_floor)
    dual = tatonnement(ep.market, cap, ep.base + ep.gamma, ep.table.value, ep.none_score, ep.prices, ep.cfg.tatonnement)
    ep.iterations += dual.iterations
    ep.prices = dual.prices
    return dual


def bin_pack(ep: Epoch, choice: np.ndarray, score: np.ndarray, clock: Clock) -> tuple[Board, dict[int, Refusal]]:
    """Alg. 1, l. 8: BINPACK the selection on a fresh board (pack, fill, [local search,] fill).

    Returns the board and the jobs it could not place, with why.
    """
    table, cfg = ep.table, ep.cfg
    ctx = PackContext(
        table=table,
        adjusted=table.value - table.switch - ep.gamma,
        score=score,
        current_gpus=ep.current_gpus,
        migration_cost=ep.migration,
        forbidden=ep.forbidden,
        cross_node=cfg.cross_node_gangs,
        eval_budget=cfg.local_search_evals,
        admit=ep.guard,
        tau=None if ep.iac is None else ep.iac.tolerances.cell,
        careful=ep.careful,
    )
    board = Board(ep.layout)
    if ep.quota is not None:
        board.quota = ep.quota.ledger()
    clock.lap("board")
    unplaced = pack(ctx, board, choice, ep.pending_order)
    clock.lap("pack")
    fill(ctx, board)
    # local moves must not pair jobs IAC would flag (a flag would penalise a configuration for a
    # pairing that only a tentative move made); the bulk stages rely on the round's check instead
    if ep.guard is not None:
        ctx.guard = ep.guard
        ctx.local = table.value - table.switch
        ctx.singles.clear()
        ctx.group_cache.clear()
    clock.lap("fill")
    if cfg.local_search_evals > 0:  # opt-in (pds/local_search.py)
        _, still = local_search(ctx, board, [j for j in ep.pending_order if j in unplaced])
        left = set(still)
        unplaced = {j: r for j, r in unplaced.items() if j in left}
        clock.lap("search")
    fill(ctx, board)
    clock.lap("fill")
    return board, unplaced


def assess(ep: Epoch, board: Board, gpus: Iterable[int] | None = None) -> tuple[np.ndarray, list[PairViolation]]:
    """IAC on every shared GPU (Alg. 1, l. 10-16): slowdown per job and the violating pairs.

    A job's slowdown on one GPU is 1 + the sum of (S - 1) over its partners there; across a gang,
    the worst GPU's. A pair violates when either side exceeds its tolerance tau. ``gpus``: those GPUs
    alone (in order), which must hold every GPU of each job on them (``reassess``); other jobs get 1.
    """
    table = ep.table
    n = table.valid.shape[0]
    slowdown = np.ones(n)
    iac = ep.iac
    if iac is None:
        return slowdown, []
    gpu_mem = iac.gpu_mem
    where = board.where
    rows: list[tuple[int, int, int, int]] = []
    gpu_of_row: list[int] = []
    mem: list[float] = []
    first: list[bool] = []  # the row that names the unordered pair (its first occurrence)
    occs = board.occ
    for g in range(len(occs)) if gpus is None else gpus:
        occ = occs[g]
        if len(occ) < 2:
            continue
        for i, a in enumerate(occ):
            ka = where[a][0]
            for i2, b in enumerate(occ):
                if i2 != i:
                    rows.append((a, ka, b, where[b][0]))
                    gpu_of_row.append(g)
                    mem.append(gpu_mem[g])
                    first.append(i < i2)
    if not rows:
        return slowdown, []
    s = iac.memo.slowdowns(table, rows, mem)
    s = np.where(np.isfinite(s), np.maximum(s, 1.0), 1.0)
    arr = np.array(rows, dtype=np.int64)
    ja, ka_, jb = arr[:, 0], arr[:, 1], arr[:, 2]
    g_arr = np.array(gpu_of_row, dtype=np.int64)
    cell, inverse = np.unique(ja * len(board.occ) + g_arr, return_inverse=True)
    per_gpu = 1.0 + np.bincount(inverse, weights=s - 1.0)
    np.maximum.at(slowdown, cell // len(board.occ), per_gpu)
    tau = np.full(n, np.inf)
    tau[ja] = iac.tolerances.at(ja, ka_)
    over = slowdown > tau + 1e-9
    named = np.flatnonzero(np.array(first) & (over[ja] | over[jb]))
    violations = []
    for r in named.tolist():
        x, y = min(rows[r][0], rows[r][2]), max(rows[r][0], rows[r][2])
        violations.append(
            PairViolation(x, y, gpu_of_row[r], float(slowdown[x]), float(slowdown[y]), float(tau[x]), float(tau[y]))
        )
    return slowdown, violations


def reassess(ep: Epoch, rnd: Round, touched: set[int]) -> list[PairViolation]:
    """IAC again where the board changed since ``rnd.slowdown`` was taken: the GPUs ``touched`` (left or
    entered) and every other GPU of the jobs on them. ``rnd.slowdown`` is updated for those jobs; the
    pairs returned are every violation on the board, provided each pair flagged before had a job move
    (a job elsewhere shares no GPU with a changed one, so its slowdown and pairs are as they were).

    A split at 8,192 GPUs moves a few dozen jobs; assessing the whole board after each sweep cost
    three quarters of the split."""
    board = rnd.board
    where, occ = board.where, board.occ
    jobs = {p for g in touched for p in occ[g]}
    gpus = set(touched)
    for p in jobs:
        gpus.update(where[p][2])
    slowdown, violations = assess(ep, board, sorted(gpus))
    if jobs:
        at = np.fromiter(jobs, dtype=np.int64, count=len(jobs))
        rnd.slowdown = rnd.slowdown.copy()
        rnd.slowdown[at] = slowdown[at]
    return violations


def make_guard(table: EpochTable, iac: Interference) -> Guard:
    """Would job j (option k) on ``gpus`` keep itself and every partner there within tau?"""
    memo, gpu_mem, tolerances = iac.memo, iac.gpu_mem, iac.tolerances

    def allowed(board: Board, j: int, k: int, gpus: tuple[int, ...]) -> bool:
        # one pair at a time, in scalars: a full cluster asks this thousands of times per epoch
        tau_j = None
        for g in gpus:
            for p in board.occ[g]:
                kp = board.where[p][0]
                if tau_j is None:
                    tau_j = tolerances.cell(j, k)
                if not memo.pair(table, j, k, p, kp, gpu_mem[g]) <= tau_j + 1e-9:  # NaN refuses
                    return False
                if not memo.pair(table, p, kp, j, k, gpu_mem[g]) <= tolerances.cell(p, kp) + 1e-9:
                    return False
        return True

    return allowed


def objective(board: Board, table: EpochTable, slowdown: np.ndarray) -> float:
    """sum_j w_j T_j(c_j) / (T_j(c_max) S_hat_j) over the placed jobs."""
    js, ks = board.option_arrays()
    return float((table.value[js, ks] / slowdown[js]).sum())


def penalise(
    violations: list[PairViolation],
    board: Board,
    table: EpochTable,
    alpha: float,
    gamma: np.ndarray,
    forbidden: dict[int, set[int]],
    careful: set[int],
) -> tuple[list[Penalty], list[tuple[str, str]]]:
    """Alg. 1, l. 12-15: each job above its tolerance gets Gamma += alpha w_j (S_hat - tau) on its
    configuration (``gamma``, in place); the pair is kept apart from now on, and its pending jobs are
    packed only where IAC admits them (``careful``)."""
    ids, sets, weights = table.job_ids, table.sets, table.weight
    penalties: list[Penalty] = []
    separated: list[tuple[str, str]] = []
    for v in violations:
        a, b = v.a, v.b
        for j, s, tau in ((a, v.slowdown_a, v.tau_a), (b, v.slowdown_b, v.tau_b)):
            if s > tau:
                k = board.where[j][0]
                amount = alpha * float(weights[j]) * (s - tau)
                gamma[j, k] += amount
                penalties.append(Penalty(ids[j], sets[j].knobs[k], amount))
        forbidden.setdefault(a, set()).add(b)
        forbidden.setdefault(b, set()).add(a)
        separated.append((ids[a], ids[b]))
        careful.update(x for x in (a, b) if not table.running[x])
    return penalties, separated


def conclude(
    ep: Epoch, m: int, dual: DualResult, board: Board, unplaced: dict[int, Refusal], score: np.ndarray, rents: np.ndarray,
    slowdown: np.ndarray, violations: list[PairViolation],
) -> Round:
    """Alg. 1, l. 13-14 and the round's record: penalise what IAC flagged, log prices and pairs."""
    value = objective(board, ep.table, slowdown)
    penalties, separated = penalise(violations, board, ep.table, ep.cfg.penalty_alpha, ep.gamma, ep.forbidden, ep.careful)
    ids = ep.table.job_ids
    log = RoundLog(
        round=m,
        iterations=dual.iterations,
        prices=Prices.of(dict(zip(ep.market.goods, ep.prices, strict=True))),
        objective=value,
        placed=len(board.where),
        violations=tuple(
            Violation(board.gpu_ids[v.gpu], ids[v.a], ids[v.b], v.slowdown_a, v.slowdown_b, v.tau_a, v.tau_b)
            for v in violations
        ),
        penalties=tuple(penalties),
        separated=tuple(separated),
    )
    return Round(board, dual.choice, ep.prices.copy(), unplaced, slowdown, violations, value, log, rents, score)


def repair(ep: Epoch, rounds: list[Round]) -> tuple[Round, list[str]]:
    """The best violation-free round; if every round left violations, the last one split."""
    clean = [r for r in rounds if not r.violations]
    if clean:
        return max(clean, key=lambda r: r.objective), []
    best = rounds[-1]
    note = f"{len(best.violations)} co-located pairs still above tolerance after {len(rounds)} round{'s' if len(rounds) > 1 else ''}: split"
    split_violations(ep, best, ep.base + ep.gamma + ep.market.rent(best.prices))
    # a split board changed after its objective was taken
    best.objective = objective(best.board, ep.table, best.slowdown)
    return best, [note]


def split_violations(ep: Epoch, rnd: Round, score: np.ndarray) -> None:
    """Move (or queue) one job of every pair still above tolerance; never leaves a violation."""
    board, table, forbidden = rnd.board, ep.table, ep.forbidden
    assert ep.iac is not None  # only a predictor that flags pairs leaves violations
    guard = make_guard(table, ep.iac)
    # one assessment per sweep over all violating pairs (not per pair): the assessment predicts every
    # co-located pair, and re-running it after each move made a saturated 512-GPU epoch take seconds;
    # the first sweep splits the round's own pairs, each later one re-assesses only where jobs moved
    violations = rnd.violations
    for _ in range(8):
        if not violations:
            break
        moved: set[int] = set()
        touched: set[int] = set()
        for v in violations:
            a, b = v.a, v.b
            if a in moved or b in moved:
                continue  # this pair changed already; the next assessment sees what is left
            forbidden.setdefault(a, set()).add(b)
            forbidden.setdefault(b, set()).add(a)
            victims = sorted((a, b), key=lambda j: (bool(table.running[j]), float(table.value[j, board.where[j][0]])))
            victim = victims[0]
            moved.add(victim)
            touched.update(board.remove(victim)[2])
            s = np.where(table.valid[victim], score[victim], np.inf)
            avoid = set(forbidden.get(victim, ()))
            for k in np.argsort(s)[:16]:
                if not np.isfinite(s[k]):
                    break
                d = option_demand(table, victim, int(k))
                # a GPU whose partner the move would slow beyond tolerance is skipped here, not
                # found by the next sweep's assessment (which would cost a sweep per such move)
                for _try in range(4):
                    gpus = board.find_gang(d, avoid, ep.cfg.cross_node_gangs)
                    if gpus is None or guard(board, victim, int(k), gpus):
                        break
                    avoid.update(p for g in gpus for p in board.occ[g])
                    gpus = None
                if gpus is not None and board.try_place(victim, int(k), d, gpus).ok:  # (its quota may refuse)
                    touched.update(gpus)
                    break
            if not board.placed(victim):
                rnd.unplaced[victim] = Refusal.INTERFERENCE
        violations = reassess(ep, rnd, touched)
    rnd.violations = violations
    while rnd.violations:  # pathological predictor: drop co-location entirely for the offenders
        gone: set[int] = set()
        touched = set()
        for v in rnd.violations:
            a, b = v.a, v.b
            if a in gone or b in gone:
                continue
            victim = a if not table.running[a] else b
            touched.update(board.remove(victim)[2])
            gone.add(victim)
            rnd.unplaced[victim] = Refusal.UNSAFE
        rnd.violations = reassess(ep, rnd, touched)


def admit(ep: Epoch, best: Round, rounds: list[Round], notes: list[str]) -> Plan:
    """Alg. 1, l. 21-23: the best round's placements, every other job queued with its reason, prices.

    The reasons are derived when the plan's ``queued`` is first read (the controller reads them every
    epoch; the simulator never does); they read only this epoch's data, which nothing changes later."""
    table, inp = ep.table, ep.inp
    placements = tuple(_placements(ep, best))
    placed = {p.job_id for p in placements}
    left = [j for j, jid in enumerate(table.job_ids) if jid not in placed] if len(placed) < len(table.job_ids) else []
    problems = list(ep.queued)
    ids = tuple([q.job_id for q in problems] + [table.job_ids[j] for j in left])

    def explain() -> tuple[Queued, ...]:
        why = _Why(Room.of(best.board))
        flagged = _flagged(rounds)
        nearest = ep.caches.nearest
        if len(nearest) > 2 * len(table.job_ids) + 1024:  # option sets no job holds any more
            nearest.clear()
            ep.caches.nearest_interned.clear()
        return tuple(problems + [_queued(ep, j, best, why, flagged.get(j)) for j in left])

    queue = Once(explain)
    return Plan(
        placements=placements,
        queued_ids=ids,
        derive_queue=queue,
        derive_actions=lambda: diff_actions(inp, placements, queue()),
        prices=Prices.of(dict(zip(ep.market.goods, best.prices, strict=True))),
        rounds=tuple(r.log for r in rounds),
        objective=best.objective,
        iterations=ep.iterations,
        notes=tuple(notes) + ep.caches.store.notes(),
    )


def _placements(ep: Epoch, rnd: Round) -> list[Placement]:
    board, table, specs = rnd.board, ep.table, ep.specs
    cache = ep.caches.placements
    out: list[Placement] = []
    ids, where, occ, sets = table.job_ids, board.where, board.occ, table.sets
    slowdown = rnd.slowdown.tolist()
    append = out.append
    for j in sorted(where, key=ids.__getitem__):
        k, _d, gpus = where[j]
        jid = ids[j]
        if len(gpus) == 1:
            on = occ[gpus[0]]
            n_on = len(on)
            if n_on == 1:
                partners: tuple[str, ...] = ()
            elif n_on == 2:
                partners = (ids[on[1] if on[0] == j else on[0]],)
            else:
                partners = tuple(sorted([ids[p] for p in on if p != j]))
        else:
            partners = tuple(sorted({ids[p] for g in gpus for p in occ[g] if p != j}))
        # a job kept where it was, beside the same partners, gets last epoch's Placement back
        hit = cache.get(jid)
        if hit is not None:
            opts, hk, hgpus, held = hit
            if (
                opts is sets[j] and hk == k and hgpus == gpus and held.partners == partners
                and held.predicted_slowdown == slowdown[j] and held.floor == specs[j].floor
            ):
                append(held)
                continue
        opts = sets[j]
        prof = opts.profiles[k]
        placement = Placement(
            job_id=jid,
            knobs=opts.knobs[k],
            gpus=tuple(board.gpu_ids[g] for g in gpus),
            resources=prof.resources,
            throughput=float(opts.throughput[k]),
            predicted_slowdown=float(rnd.slowdown[j]),
            floor=specs[j].floor,
            partners=partners,
            source=prof.source.value,
        )
        append(placement)
        cache[jid] = (opts, k, gpus, placement)
    if len(cache) > 4 * len(out) + 1024:
        keep = {p.job_id for p in out}
        for jid in [x for x in cache if x not in keep]:
            del cache[jid]
    return out


@dataclass(slots=True, eq=False)
class _Why:
    """What the queue's reasons share in one epoch: the room left, each option set's nearest demands,
    the best option of every job at the round's prices, the reasons rendered (a full cluster explains
    thousands of jobs with a few dozen distinct reasons)."""

    room: Room
    shortfalls: dict[int, tuple[Shortfall | None, Shortfall | None]] = field(default_factory=dict)  # by nearest demands: raw, with holders
    cheapest: np.ndarray | None = None
    texts: dict[tuple[QueueCode, Shortfall, str], str] = field(default_factory=dict)
    holders: dict[tuple[bool, str], tuple[str, ...]] = field(default_factory=dict)  # (node-wide, where) -> jobs

    def render(self, code: QueueCode, short: Shortfall, unit: str) -> str:
        key = (code, short, unit)
        text = self.texts.get(key)
        if text is None:
            text = self.texts[key] = render(code, short, unit)
        return text


def _flagged(rounds: list[Round]) -> dict[int, PairViolation]:
    """Per job, the pairing IAC flagged it in this epoch (the last round's flag wins): the figures of the
    plan's "pairs kept apart" table, which an interference reason must repeat, not recompute."""
    out: dict[int, PairViolation] = {}
    for rnd in rounds:
        for v in rnd.violations:
            out[v.a] = out[v.b] = v
    return out


def _queued(ep: Epoch, j: int, rnd: Round, why: _Why, flag: PairViolation | None = None) -> Queued:
    """A job left out of the best round: its code and its typed shortfall, the reason rendered from both.

    IAC binds when packing turned the job away for a partner (or the split did), or IAC flagged its
    pairing this epoch, and some GPU has room for it beside partners: the flagged pairing's own figures
    when it was flagged, else the best pairing still above tolerance; otherwise the capacity that binds
    at its nearest configuration (with the jobs holding it), and the price when every resource has room.
    """
    table = ep.table
    jid = table.job_ids[j]
    refusal = rnd.unplaced.get(j, Refusal.NO_ROOM)
    if table.running[j] and rnd.choice[j] < 0 and refusal is Refusal.NO_ROOM:  # ESP stopped it, and its room was taken
        outbid = _price_shortfall(j, int(table.current[j]), rnd, table)  # (``PlannerConfig.preempt_outbid``)
        return Queued(jid, QueueCode.OUTBID, why.render(QueueCode.OUTBID, outbid, ep.specs[j].workload.unit), outbid)
    short: Shortfall | None = None
    if refusal is not Refusal.NO_ROOM or j in ep.forbidden:
        short = _flag_shortfall(ep, j, flag, rnd.board) if flag is not None else None
        short = short or _interference_shortfall(ep, j, rnd.board, why.room)
    if short is not None and not table.running[j]:
        code = QueueCode.INTERFERENCE
    else:
        held: Shortfall | None = None
        if short is None:  # the capacity at its nearest configurations: one answer per option set and epoch
            nearest = _nearest_demands(ep.caches.nearest, ep.caches.nearest_interned, table, j)
            hit = why.shortfalls.get(id(nearest))
            if hit is None:
                found = smallest_shortfall(why.room, list(nearest))
                hit = why.shortfalls[id(nearest)] = (found, None if found is None else _with_holders(found, rnd.board, table, why.holders))
            short, held = hit
        if table.running[j]:
            code = QueueCode.PREEMPTED
        elif rnd.choice[j] < 0:
            code = QueueCode.PRICED_OUT
        else:
            code = QueueCode.NO_CAPACITY
        if short is None:  # every resource has room for it somewhere: its value lost to the rent
            if why.cheapest is None:
                why.cheapest = np.argmin(np.where(table.valid, rnd.score, np.inf), axis=1)
            short = _price_shortfall(j, int(why.cheapest[j]), rnd, table)
        else:
            short = held if held is not None else _with_holders(short, rnd.board, table, why.holders)
    return Queued(jid, code, why.render(code, short, ep.specs[j].workload.unit), short)


def _flag_shortfall(ep: Epoch, j: int, v: PairViolation, board: Board) -> Shortfall | None:
    """The flagged pairing's worse side: ``need`` its tolerance, ``free`` its predicted slowdown (None when
    neither side is above its tolerance, which a flag never leaves)."""
    sides = ((v.slowdown_a, v.tau_a), (v.slowdown_b, v.tau_b))
    slow, tau = max(sides, key=lambda st: st[0] - st[1])
    if slow <= tau:
        return None
    partner = v.b if v.a == j else v.a
    return Shortfall(Binding.INTERFERENCE, float(tau), float(slow), board.gpu_ids[v.gpu], (ep.table.job_ids[partner],))


def _with_holders(s: Shortfall, board: Board, table: EpochTable, seen: dict[tuple[bool, str], tuple[str, ...]]) -> Shortfall:
    """``s`` naming the jobs that hold its resource where it is short: the GPU's jobs, or the node's
    (``seen``: the epoch's answers by place, since a full cluster's queue names the same few places)."""
    if not s.where:
        return s
    node_wide = s.resource in (Binding.CPU, Binding.HOST_MEMORY)
    key = (node_wide, s.where)
    names = seen.get(key)
    if names is None:
        ids = table.job_ids
        if node_wide:
            node = next((i for i, n in enumerate(board.cluster.nodes) if n.name == s.where), None)
            on = [] if node is None else sorted(
                {p for g, occ in enumerate(board.occ) if board.gpu_node[g] == node for p in occ})
        else:
            g = board.gpu_index.get(s.where)
            on = sorted(board.occ[g]) if g is not None else []
        names = seen[key] = tuple(ids[p] for p in on)
    return replace(s, holders=names) if names else s


def _interference_shortfall(ep: Epoch, j: int, board: Board, room: Room) -> Shortfall | None:
    """The best pairing IAC allows job j at its smallest configuration: the side furthest above its
    tolerance there (``need`` the tolerance, ``free`` the predicted slowdown), or None if no GPU with
    a partner has room for it."""
    iac, table = ep.iac, ep.table
    if iac is None:
        return None
    k = int(np.argmin(np.where(table.valid[j], table.mem[j], np.inf)))
    d = option_demand(table, j, k)
    fits = (room.model == d.model) & (room.free[Binding.GPU_SLOT] >= 1)
    for r, need in ((Binding.GPU_MEMORY, d.mem), (Binding.SM, d.sm), (Binding.CPU, d.cpu), (Binding.HOST_MEMORY, d.host)):
        fits &= room.free[r] >= need - 1e-6
    shared = [g for g in np.flatnonzero(fits).tolist() if board.occ[g]][:64]
    if not shared:
        return None
    # every candidate GPU's pairs asked in one batch (a full cluster has hundreds of jobs to explain)
    rows: list[tuple[int, int, int, int]] = []
    mem: list[float] = []
    cells: list[tuple[int, int]] = [(j, k)]
    spans: list[tuple[int, int, int, int]] = []  # GPU, its first row, its partner count, its first cell
    for g in shared:
        partners = [(p, board.where[p][0]) for p in board.occ[g]]
        n = len(partners)
        spans.append((g, len(rows), n, len(cells)))
        rows += [(j, k, p, kp) for p, kp in partners] + [(p, kp, j, k) for p, kp in partners]
        mem += [iac.gpu_mem[g]] * (2 * n)
        cells += partners
    s_all = np.maximum(iac.memo.slowdowns(table, rows, mem), 1.0).tolist()
    tau_all = iac.tolerances.of(cells).tolist()
    best: tuple[float, float, float, int] | None = None  # excess, tau, slowdown, GPU
    for g, r0, n, c0 in spans:
        sides = [1.0 + sum(x - 1.0 for x in s_all[r0 : r0 + n]), *s_all[r0 + n : r0 + 2 * n]]
        taus = [tau_all[0], *tau_all[c0 : c0 + n]]
        gaps = [a - b for a, b in zip(sides, taus, strict=True)]
        worst = gaps.index(max(gaps))
        if best is None or gaps[worst] < best[0]:
            best = (gaps[worst], taus[worst], sides[worst], g)
    assert best is not None
    if best[0] <= 0:  # some pairing is within tolerance: interference does not keep it out, capacity does
        return None
    names = tuple(table.job_ids[p] for p in sorted(board.occ[best[3]]))
    return Shortfall(Binding.INTERFERENCE, best[1], best[2], board.gpu_ids[best[3]], names)


def _price_shortfall(j: int, k: int, rnd: Round, table: EpochTable) -> Shortfall:
    """Room exists, but at the round's prices its best configuration ``k`` costs more rent than it is worth."""
    worth = float(table.weight[j] - (rnd.score[j, k] - rnd.rents[j, k]))  # value - switch - Gamma of Eq. 7
    return Shortfall(Binding.PRICE, float(rnd.rents[j, k]), worth, None)


def _nearest_demands(cache: dict[int, tuple[OptionSet, tuple[Demand, ...]]], interned: dict[tuple[Demand, ...], tuple[Demand, ...]],
                     table: EpochTable, j: int) -> tuple[Demand, ...]:
    """Job j's demands at its ``_nearest_options``: a function of its option set alone, kept across epochs
    (a full cluster explains thousands of waiting jobs every epoch, of a few hundred option sets)."""
    opts = table.sets[j]
    hit = cache.get(id(opts))
    if hit is not None and hit[0] is opts:
        return hit[1]
    demands = tuple(option_demand(table, j, k) for k in _nearest_options(table, j))
    demands = interned.setdefault(demands, demands)  # option sets with equal demands share one tuple (and its answer)
    cache[id(opts)] = (opts, demands)
    return demands


def _nearest_options(table: EpochTable, j: int) -> list[int]:
    """The configurations a shortfall is measured at: the least of each resource (GPU memory first)."""
    out: list[int] = []
    for col in (table.mem, table.host, table.cpu, table.sm, table.dp):
        k = int(np.argmin(np.where(table.valid[j], col[j], np.inf)))
        if k not in out:
            out.append(k)
    return out


def option_demand(table: EpochTable, j: int, k: int) -> Demand:
    """What option k of job j asks of each GPU it runs on (the board's unit)."""
    return Demand(
        float(table.mem[j, k]), float(table.sm[j, k]), float(table.cpu[j, k]), float(table.host[j, k]),
        int(table.dp[j, k]), int(table.model[j, k]), int(table.dp[j, k]) > 1 and TP_KNOB in table.sets[j].knobs[k],
    )
