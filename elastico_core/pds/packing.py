"""Turning a priced selection into GPUs: sticky placement, best-fit, repair, admission, fill, local search.

Aggregate feasibility (Eq. 3) does not imply a per-GPU packing exists (DESIGN.md). The stages here
realise ESP's selection on a ``Board`` and recover what the aggregate view loses:

1. running jobs stay on their GPUs when their new configuration fits there (migration is costly);
2. the rest go best-fit-decreasing (largest data-parallel degree, then memory, first);
3. a job that does not fit is *repaired*: its other options are tried in score order;
4. jobs ESP priced out are admitted into whatever capacity is left (Alg. 1, line 22);
5. *fill*: every placed job grows into the capacity left on its GPUs;
6. a bounded local search re-optimises co-located pairs jointly, inserts queued jobs next to a
   partner that can shrink, and swaps partners between GPUs when that raises total value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from elastico_core.pds.board import EPS, Board, Demand, DemandColumns
from elastico_core.pds.options import EpochTable
from elastico_core.pds.shortfall import Refusal

Guard = Callable[[Board, int, int, tuple[int, ...]], bool]
QUEUE_HEAD = 64  # local moves try to let in this many queued jobs (in queue order) per round


@dataclass
class PackContext:
    """Everything the packing stages read: the epoch table and the round's scores and penalties."""

    table: EpochTable
    adjusted: np.ndarray  # value - switch - Gamma, (J, K): what repair and growth maximise
    score: np.ndarray  # Eq. 7 score at the round's prices, (J, K): the order repairs try options in
    current_gpus: dict[int, tuple[int, ...]]  # running jobs' GPUs (board indexes)
    migration_cost: np.ndarray  # (J,) charged when a running job changes GPUs
    forbidden: dict[int, set[int]] = field(default_factory=dict)  # pairs IAC separated
    cross_node: bool = True
    eval_budget: int = 4000
    guard: Guard | None = None  # IAC admission check for a tentative placement; True = allowed
    # jobs placed by stages 2-4 only where ``admit`` (the same IAC check) allows: those IAC flagged in
    # an earlier round of the epoch, or that waited last epoch (see Planner); without a guard of their own
    admit: Guard | None = None
    careful: set[int] = field(default_factory=set)
    refused: set[int] = field(default_factory=set)  # careful jobs the check turned away at least once
    # what local moves maximise: with a guard that checks each tentative pair against tau, the
    # penalties Gamma (learned from other pairings) would only double-count; default: ``adjusted``
    local: np.ndarray | None = None
    group_cache: dict[tuple[object, ...], tuple[float, tuple[int, ...]] | None] = field(default_factory=dict)
    singles: dict[tuple[int, int], tuple[np.ndarray, ...]] = field(default_factory=dict)  # (job, model) -> arrays

    def single_options(self, j: int, model: int) -> tuple[np.ndarray, ...]:
        """Job j's single-GPU options on ``model``: (index, mem, sm, cpu, host, adjusted), memoised."""
        key = (j, model)
        hit = self.singles.get(key)
        if hit is None:
            t = self.table
            idx = np.flatnonzero(t.valid[j] & (t.model[j] == model) & (t.dp[j] == 1))
            hit = (idx, t.mem[j, idx], t.sm[j, idx], t.cpu[j, idx], t.host[j, idx], self.search[j, idx])
            self.singles[key] = hit
        return hit
    evaluations: float = 0.0  # group evaluations (a cache hit counts a quarter)

    def demand(self, j: int, k: int) -> Demand:
        return self.table.sets[j].demands[k]

    def move_cost(self, j: int, gpus: tuple[int, ...]) -> float:
        """Migration cost if running job j would run on ``gpus`` instead of its current GPUs."""
        cur = self.current_gpus.get(j)
        if cur is None or sorted(cur) == sorted(gpus):
            return 0.0
        return float(self.migration_cost[j])

    @property
    def search(self) -> np.ndarray:
        return self.adjusted if self.local is None else self.local

    def gain(self, j: int, k: int, gpus: tuple[int, ...]) -> float:
        """Value (for local moves) of running option k on ``gpus``."""
        return float(self.search[j, k]) - self.move_cost(j, gpus)

    def avoid(self, j: int) -> set[int]:
        return self.forbidden.get(j, set())


def _allowed(ctx: PackContext, board: Board, j: int, k: int, gpus: tuple[int, ...]) -> bool:
    return ctx.guard is None or ctx.guard(board, j, k, gpus)


def _try_place(ctx: PackContext, board: Board, j: int, k: int, spread: bool = False) -> bool:
    d = ctx.demand(j, k)
    gpus = board.find_empty_gang(d) if spread else None
    if gpus is None:
        gpus = board.find_gang(d, ctx.avoid(j), ctx.cross_node)
    if gpus is not None and ctx.guard is None and ctx.admit is not None and j in ctx.careful:
        gpus = _admitted(ctx, board, j, k, d, gpus)
    if gpus is None or not _allowed(ctx, board, j, k, gpus):
        return False
    board.place(j, k, d, gpus)
    return True


def _admitted(ctx: PackContext, board: Board, j: int, k: int, d: Demand, gpus: tuple[int, ...]) -> tuple[int, ...] | None:
    """GPUs for a careful job that IAC admits: past the partners it would pair badly with, else empty ones.

    Without this, a job IAC flagged is packed beside the next partner it harms, and each such pairing
    costs a whole ESP<->IAC round to find (then a split at the end of the epoch).
    """
    assert ctx.admit is not None
    avoid: set[int] | None = None
    for _ in range(4):
        if ctx.admit(board, j, k, gpus):
            return gpus
        ctx.refused.add(j)
        if avoid is None:
            avoid = set(ctx.avoid(j))
        avoid.update(p for g in gpus for p in board.occ[g])
        found = board.find_gang(d, avoid, ctx.cross_node)
        if found is None:
            break
        gpus = found
    return board.find_empty_gang(d)  # no partner there: nothing for IAC to flag


def _options_by_score(ctx: PackContext, j: int, limit: int = 24, board: Board | None = None) -> list[int]:
    """Job j's options in score order; with a board, only those some GPU could still hold."""
    t = ctx.table
    valid = t.valid[j]
    if board is not None:
        idx = np.flatnonzero(valid)
        valid = np.zeros_like(valid)
        valid[idx] = board.could_hold(t.model[j, idx], t.mem[j, idx], t.dp[j, idx])
    s = np.where(valid, ctx.score[j], np.inf)
    order = np.argsort(s, kind="stable")
    return order[np.isfinite(s[order])][:limit].tolist()


def _best_on(ctx: PackContext, board: Board, j: int, gpus: tuple[int, ...], key: np.ndarray) -> int:
    """The option of job j that fits ``gpus`` (j itself not on them) maximising ``key``; -1 if none."""
    t = ctx.table
    free_mem = min(board.free_mem[g] for g in gpus)
    free_sm = min(board.free_sm[g] for g in gpus)
    if any(len(board.occ[g]) >= board.max_per_gpu for g in gpus):
        return -1
    per_node: dict[int, int] = {}
    for g in gpus:
        per_node[board.gpu_node[g]] = per_node.get(board.gpu_node[g], 0) + 1
    model = board.gpu_model[gpus[0]]
    ok = (
        t.valid[j]
        & (t.model[j] == model)
        & (t.dp[j] == len(gpus))
        & (t.mem[j] <= free_mem + EPS)
        & (t.sm[j] <= free_sm + EPS)
    )
    for n, c in per_node.items():
        ok &= (t.cpu[j] * c <= board.node_free_cpu[n] + EPS) & (t.host[j] * c <= board.node_free_host[n] + EPS)
    if not ok.any():
        return -1
    return int(np.argmax(np.where(ok, key, -np.inf)))


def pack(ctx: PackContext, board: Board, choice: np.ndarray, pending_order: Sequence[int]) -> dict[int, Refusal]:
    """Stages 1-4. Returns job -> why, for every candidate job left unplaced."""
    t = ctx.table
    unplaced: dict[int, Refusal] = {}
    movers: list[int] = []
    # 1. running jobs, sticky. Each takes ESP's pick only where that shrinks it (ESP making room for
    #    arrivals); otherwise it keeps its running configuration, and growth is left to the fill and
    #    local-search stages, which weigh it against the switching cost. Since the running state was a
    #    valid plan, these all fit on their current GPUs together.
    jobs: list[int] = []
    keep: list[int] = []
    gangs: list[tuple[int, ...]] = []
    columns: DemandColumns | None = None
    sets = t.sets
    if ctx.current_gpus:
        js = np.fromiter(ctx.current_gpus, dtype=np.intp, count=len(ctx.current_gpus))
        cur_k = t.current[js]
        pick = np.where(choice[js] >= 0, choice[js], cur_k)
        shrinks = (
            (t.dp[js, pick] == t.dp[js, cur_k])
            & (t.model[js, pick] == t.model[js, cur_k])
            & (t.mem[js, pick] <= t.mem[js, cur_k])
            & (t.sm[js, pick] <= t.sm[js, cur_k])
            & (t.cpu[js, pick] <= t.cpu[js, cur_k])
            & (t.host[js, pick] <= t.host[js, cur_k])
        )
        keep_k = np.where(shrinks, pick, cur_k)
        jobs, keep, gangs = js.tolist(), keep_k.tolist(), list(ctx.current_gpus.values())
        columns = DemandColumns(
            t.mem[js, keep_k], t.sm[js, keep_k], t.cpu[js, keep_k], t.host[js, keep_k],
            t.dp[js, keep_k].astype(np.intp), t.model[js, keep_k].astype(np.intp),
        )
    # at once, unless a guard must see each job or the running state over-commits something: one by one
    at_once = ctx.guard is None and board.place_columns(
        jobs, keep, [sets[j].demands[k] for j, k in zip(jobs, keep, strict=True)], gangs, columns
    ).ok
    rest: list[int] = [] if at_once else jobs
    for j in rest:
        gpus = ctx.current_gpus[j]
        cur = int(t.current[j])
        k = int(choice[j]) if choice[j] >= 0 else cur
        placed = False
        for option in dict.fromkeys((k, cur)):
            if option >= 0 and _fits_on(ctx, board, j, option, gpus):
                board.place(j, option, ctx.demand(j, option), gpus)
                placed = True
                break
        if placed:
            continue
        alt = _best_on(ctx, board, j, gpus, -ctx.score[j])
        if alt >= 0 and _allowed(ctx, board, j, alt, gpus):
            board.place(j, alt, ctx.demand(j, alt), gpus)
        else:
            movers.append(j)
    # 2. selected pending jobs and movers, best-fit decreasing
    todo = [j for j in pending_order if choice[j] >= 0] + movers
    keyed = []
    for j in todo:
        k = int(choice[j]) if choice[j] >= 0 else int(np.argmin(np.where(t.valid[j], ctx.score[j], np.inf)))
        keyed.append((-int(t.dp[j, k]), -float(t.mem[j, k]), j, k))
    keyed.sort()
    failed: list[int] = []
    # While empty GPUs outnumber what is left to place, jobs spread out (co-location only where
    # capacity is short: sharing costs interference and leaves no room to grow).
    left = sum(-neg_dp for neg_dp, _, _, _ in keyed)
    for neg_dp, _, j, k in keyed:
        if not _try_place(ctx, board, j, k, spread=board.empty_count(int(ctx.table.model[j, k])) >= left):
            failed.append(j)
        left += neg_dp
    # 3. repair: the failed job's other options, cheapest score first
    for j in failed:
        if not any(_try_place(ctx, board, j, k) for k in _options_by_score(ctx, j, board=board)):
            unplaced[j] = _refused(ctx, j)
    # 4. admission of priced-out jobs into residual capacity (Alg. 1, line 22)
    for j in pending_order:
        if choice[j] >= 0 or board.placed(j) or j in unplaced:
            continue
        if not any(_try_place(ctx, board, j, k) for k in _options_by_score(ctx, j, board=board)):
            unplaced[j] = _refused(ctx, j)
    return unplaced


def _refused(ctx: PackContext, j: int) -> Refusal:
    return Refusal.INTERFERENCE if j in ctx.refused else Refusal.NO_ROOM


def _fits_on(ctx: PackContext, board: Board, j: int, k: int, gpus: tuple[int, ...]) -> bool:
    """Option k of job j fits exactly these GPUs (model, count, memory, SM, slots, node) and IAC allows it."""
    d = ctx.demand(j, k)
    return (
        d.dp == len(gpus)
        and all(board.gpu_model[g] == d.model and board.fits_gpu(g, d) for g in gpus)
        and _node_ok(board, d, gpus)
        and _allowed(ctx, board, j, k, gpus)
    )


def _node_ok(board: Board, d: Demand, gpus: Sequence[int]) -> bool:
    per_node: dict[int, int] = {}
    for g in gpus:
        per_node[board.gpu_node[g]] = per_node.get(board.gpu_node[g], 0) + 1
    return all(board.fits_node(n, d, c) for n, c in per_node.items())


def fill(ctx: PackContext, board: Board) -> int:
    """Stage 5: grow each placed job into the room left on its GPUs. Returns how many changed.

    With a guard (a real predictor), growth is checked against tau per pair and valued without the
    round's penalties, like the local moves; without one, penalties steer it.

    Jobs already at their most valuable option are skipped; jobs that never share a GPU (same
    position on their GPUs) grow together in one vectorised step.
    """
    t = ctx.table
    values = ctx.search
    top = np.max(np.where(t.valid, values, -np.inf), axis=1)
    js, ks = board.option_arrays()
    growable = js[values[js, ks] < top[js] - 1e-9].tolist()
    if not growable:
        return 0
    changed = 0
    for position in range(board.max_per_gpu):
        batch = [j for j in growable if board.occ[board.where[j][2][0]].index(j) == position]
        changed += _grow_batch(ctx, board, batch) if ctx.guard is None else _grow(ctx, board, batch)
    return changed


def _grow_batch(ctx: PackContext, board: Board, jobs: list[int]) -> int:
    if not jobs:
        return 0
    t = ctx.table
    rows = np.array(jobs)
    old_k = np.array([board.where[j][0] for j in jobs])
    gsets = [board.where[j][2] for j in jobs]
    free_mem = np.array([min(board.free_mem[g] for g in gs) for gs in gsets]) + t.mem[rows, old_k]
    free_sm = np.array([min(board.free_sm[g] for g in gs) for gs in gsets]) + t.sm[rows, old_k]
    nodes = [board.gpu_node[gs[0]] for gs in gsets]
    count = np.array([len(gs) for gs in gsets], dtype=float)
    free_cpu = np.array([board.node_free_cpu[n] for n in nodes]) / count + t.cpu[rows, old_k]
    free_host = np.array([board.node_free_host[n] for n in nodes]) / count + t.host[rows, old_k]
    model = np.array([board.gpu_model[gs[0]] for gs in gsets])
    ok = (
        t.valid[rows]
        & (t.model[rows] == model[:, None])
        & (t.dp[rows] == count[:, None])
        & (t.mem[rows] <= free_mem[:, None] + EPS)
        & (t.sm[rows] <= free_sm[:, None] + EPS)
        & (t.cpu[rows] <= free_cpu[:, None] + EPS)
        & (t.host[rows] <= free_host[:, None] + EPS)
    )
    key = np.where(ok, ctx.search[rows], -np.inf)
    new_k = np.argmax(key, axis=1)
    better = key[np.arange(len(rows)), new_k] > ctx.search[rows, old_k] + 1e-9
    changed = 0
    for i in np.flatnonzero(better):
        j, k = int(rows[i]), int(new_k[i])
        with board.tentative() as tx:
            gpus = tx.remove(j)[2]
            if tx.place(j, k, ctx.demand(j, k), gpus).ok:  # exact checks; gangs may straddle nodes
                tx.commit()
                changed += 1
    return changed


def _could_grow(ctx: PackContext, board: Board, jobs: list[int]) -> np.ndarray:
    """Per job: does a more valuable option fit its GPUs' memory and SM as they are now?

    A necessary condition for ``_best_on`` finding growth (node CPU and host are ignored), and it
    stays necessary while the batch is grown, since growing only takes capacity away.
    """
    t = ctx.table
    rows = np.array(jobs)
    where = board.where
    old_k = np.array([where[j][0] for j in jobs])
    gsets = [where[j][2] for j in jobs]
    room_mem = np.array([min(board.free_mem[g] for g in gs) for gs in gsets]) + t.mem[rows, old_k]
    room_sm = np.array([min(board.free_sm[g] for g in gs) for gs in gsets]) + t.sm[rows, old_k]
    model = np.array([board.gpu_model[gs[0]] for gs in gsets])
    count = np.array([len(gs) for gs in gsets])
    ok = (
        t.valid[rows]
        & (t.model[rows] == model[:, None])
        & (t.dp[rows] == count[:, None])
        & (t.mem[rows] <= room_mem[:, None] + 2 * EPS)
        & (t.sm[rows] <= room_sm[:, None] + 2 * EPS)
    )
    best = np.max(np.where(ok, ctx.search[rows], -np.inf), axis=1)
    return best > ctx.search[rows, old_k] + 1e-9


def _grow(ctx: PackContext, board: Board, jobs: list[int]) -> int:
    changed = 0
    hopeful = _could_grow(ctx, board, jobs) if jobs else np.zeros(0, dtype=bool)
    for j, hope in zip(jobs, hopeful.tolist(), strict=True):
        if not hope:  # stays as it is (moved to the back of the board's order, as below)
            board.to_back(j)
            continue
        k_old, _, gpus = board.where[j]
        with board.tentative() as tx:  # left uncommitted, j goes back as it was
            tx.remove(j)
            k_new = _best_on(ctx, board, j, gpus, ctx.search[j])
            grows = k_new >= 0 and k_new != k_old and ctx.search[j, k_new] > ctx.search[j, k_old] + 1e-9
            if grows and _allowed(ctx, board, j, k_new, gpus) and tx.place(j, k_new, ctx.demand(j, k_new), gpus).ok:
                tx.commit()
                changed += 1
    return changed


# ---- local search over pairs ---------------------------------------------------------------------


def best_pair(
    ctx: PackContext, board: Board, a: int, b: int, g: int
) -> tuple[float, int, int] | None:
    """Jointly best single-GPU options for jobs a and b sharing GPU g (both removed from the board)."""
    if len(board.occ[g]) + 2 > board.max_per_gpu:
        return None
    model = board.gpu_model[g]
    n = board.gpu_node[g]
    ia, ma, sa, ca, ha, va = ctx.single_options(a, model)
    ib, mb, sb, cb, hb, vb = ctx.single_options(b, model)
    if not len(ia) or not len(ib):
        return None
    ok = (
        (ma[:, None] + mb[None, :] <= board.free_mem[g] + EPS)
        & (sa[:, None] + sb[None, :] <= board.free_sm[g] + EPS)
        & (ca[:, None] + cb[None, :] <= board.node_free_cpu[n] + EPS)
        & (ha[:, None] + hb[None, :] <= board.node_free_host[n] + EPS)
    )
    total = np.where(ok, va[:, None] + vb[None, :], -np.inf)
    flat = int(np.argmax(total))
    r, c = divmod(flat, len(ib))
    best = float(total[r, c])
    if best == -np.inf:
        return None
    moves = ctx.move_cost(a, (g,)) + ctx.move_cost(b, (g,))
    return best - moves, int(ia[r]), int(ib[c])


def best_single(ctx: PackContext, board: Board, a: int, g: int) -> tuple[float, int] | None:
    k = _best_on(ctx, board, a, (g,), ctx.search[a])
    if k < 0:
        return None
    return ctx.gain(a, k, (g,)), k


def _pairs(board: Board) -> list[int]:
    return [g for g, occ in enumerate(board.occ) if len(occ) == 2 and all(board.where[j][1].dp == 1 for j in occ)]


def _value_on(ctx: PackContext, board: Board, g: int) -> float:
    return sum(ctx.gain(j, board.where[j][0], board.where[j][2]) for j in board.occ[g])


def local_search(ctx: PackContext, board: Board, queued: Sequence[int]) -> tuple[int, list[int]]:
    """Stage 6 for single-GPU jobs on two-job GPUs. Returns (moves made, jobs still queued)."""
    if board.max_per_gpu < 2 or ctx.eval_budget <= 0:  # no evaluations allowed: nothing can move
        return 0, list(queued)
    budget = float(ctx.eval_budget)
    moves = 0
    still = list(queued)

    def forbidden(a: int, b: int) -> bool:
        return b in ctx.forbidden.get(a, ())

    def reopt(g: int) -> bool:
        nonlocal budget
        a, b = board.occ[g]
        before = _value_on(ctx, board, g)
        with board.tentative() as tx:
            tx.remove(a)
            tx.remove(b)
            budget -= 1
            res = best_pair(ctx, board, a, b, g)
            if res is not None and res[0] > before + 1e-9:
                _, ka, kb = res
                tx.place(a, ka, ctx.demand(a, ka), (g,))
                tx.place(b, kb, ctx.demand(b, kb), (g,))
                if _allowed_pair(ctx, board, a, ka, b, g):
                    tx.commit()
                    return True
        return False

    # (a) joint re-optimisation of every pair that changed this epoch (a pair of running jobs on their
    #     GPUs in their running configurations was optimised when it formed)
    for g in _pairs(board):
        if budget <= 0:
            break
        if all(_settled(ctx, board, j, g) for j in board.occ[g]):
            continue
        if _split(ctx, board, g):
            moves += 1
        else:
            moves += reopt(g)

    # (b) insert queued single-GPU jobs beside a partner that can shrink
    singles = [g for g, occ in enumerate(board.occ) if len(occ) == 1 and board.where[occ[0]][1].dp == 1]
    for q in list(still):
        if budget <= 0:
            break
        if not (ctx.table.valid[q] & (ctx.table.dp[q] == 1)).any():
            continue
        best: tuple[float, int, int, int, int] | None = None
        cands = sorted(singles, key=lambda g: -board.free_mem[g])[:64]
        for g in cands:
            if len(board.occ[g]) != 1:
                continue
            p = board.occ[g][0]
            if forbidden(q, p):
                continue
            kp, _, gp = board.where[p]
            before = ctx.gain(p, kp, gp)
            budget -= 1
            with board.tentative() as tx:  # a dry run: p goes back as it was
                tx.remove(p)
                res = best_pair(ctx, board, q, p, g)
            if res is not None and res[0] - before > (best[0] if best else 1e-9):
                best = (res[0] - before, g, p, res[1], res[2])
        if best is None:
            continue
        _, g, p, kq, kp = best
        with board.tentative() as tx:
            tx.remove(p)
            tx.place(p, kp, ctx.demand(p, kp), (g,))
            tx.place(q, kq, ctx.demand(q, kq), (g,))
            if _allowed_pair(ctx, board, q, kq, p, g):
                tx.commit()
                still.remove(q)
                moves += 1
                singles.remove(g)

    # (c) repartition the jobs of two GPUs (plus at most one queued job) over those two GPUs
    improved = bool(still) or any(len(o) >= 2 for o in board.occ)
    while improved and budget > 0:
        improved = False
        for g1, g2, extra in _candidate_moves(board, still, ctx):
            if budget <= 0:
                break
            if extra is not None and extra not in still:
                continue
            gain, spent, ejected = _repartition(ctx, board, g1, g2, extra)
            budget -= spent
            if gain > 1e-9:
                moves += 1
                improved = True
                if extra is not None:
                    still.remove(extra)
                if ejected is not None:
                    still.append(ejected)
        if not improved and still and budget > 0:
            gained, spent = _eject_and_insert(ctx, board, still, budget)
            budget -= spent
            if gained:
                moves += 1
                improved = True
    return moves, still


def _eject_and_insert(ctx: PackContext, board: Board, still: list[int], budget: float) -> tuple[bool, float]:
    """Two-step move: send a placed pending job x back to the queue, then insert a queued job q by
    repartitioning x's GPU with another one. Applied only when the total value rises."""
    spent = 0.0
    placed_pending = [j for j, (_, d, _) in board.where.items() if d.dp == 1 and j not in ctx.current_gpus]
    placed_pending.sort(key=lambda j: ctx.gain(j, board.where[j][0], board.where[j][2]))
    queued = [q for q in still[:QUEUE_HEAD] if (ctx.table.valid[q] & (ctx.table.dp[q] == 1)).any()]
    for x in placed_pending[:24]:
        kx, _, gx = board.where[x]
        loss = ctx.gain(x, kx, gx)
        h = gx[0]
        with board.tentative() as tx:  # x goes back unless a move below is applied
            tx.remove(x)
            refill, used = _refill(ctx, board, h, queued, loss)
            spent += used
            if refill is not None and _apply_on(ctx, board, h, refill):
                tx.commit()
                for j, _ in refill:
                    if j in still:
                        still.remove(j)
                still.append(x)
                return True, spent
            others = [g for g, occ in enumerate(board.occ) if g != h and occ and _single_gpu_jobs(board, g)]
            others.sort(key=lambda g: -board.free_mem[g])
            for q in queued:
                for g in others[:16]:
                    if len(board.occ[h]) + len(board.occ[g]) > 3:
                        continue
                    before = _value_on(ctx, board, h) + _value_on(ctx, board, g)
                    move, used = _best_repartition(ctx, board, h, g, q, before + loss)
                    spent += used
                    if move is not None and move[2] is None and _apply_move(ctx, board, h, g, move):
                        tx.commit()
                        still.remove(q)
                        still.append(x)
                        return True, spent
                if spent >= budget:
                    break
        if spent >= budget:
            break
    return False, spent


def _split(ctx: PackContext, board: Board, g: int) -> bool:
    """Move one job of a shared GPU to an empty GPU of the same node pool when both gain."""
    a, b = board.occ[g]
    before = _value_on(ctx, board, g)
    best: tuple[float, int, int, int, int] | None = None
    for stay, go in ((a, b), (b, a)):
        d_go = board.where[go][1]
        h = board.find_empty(d_go, 1)
        if h is None:
            return False
        with board.tentative() as tx:  # a dry run: both go back as they were
            tx.remove(a)
            tx.remove(b)
            r_stay = best_single(ctx, board, stay, g)
            r_go = best_single(ctx, board, go, h)
        if r_stay and r_go and r_stay[0] + r_go[0] > before + 1e-9 and (best is None or r_stay[0] + r_go[0] > best[0]):
            best = (r_stay[0] + r_go[0], stay, r_stay[1], go, r_go[1])
    if best is None:
        return False
    _, stay, ks, go, kg = best
    h = board.find_empty(board.where[go][1], 1)
    with board.tentative() as tx:
        tx.remove(a)
        tx.remove(b)
        if h is not None and tx.place(stay, ks, ctx.demand(stay, ks), (g,)).ok and tx.place(go, kg, ctx.demand(go, kg), (h,)).ok:
            tx.commit()
            return True
    return False


def _refill(
    ctx: PackContext, board: Board, h: int, queued: list[int], loss: float
) -> tuple[list[tuple[int, int]] | None, float]:
    """After ejecting a job from GPU h: the best group for h — its remaining occupant beside a queued
    job, or one or two queued jobs on an empty h — if it is worth more than ``loss`` plus what h
    holds now. Dry run; returns ([(job, option)], evaluations)."""
    before_evals = ctx.evaluations
    occupant = board.occ[h][0] if board.occ[h] else None
    if occupant is not None and board.where[occupant][1].dp != 1:
        return None, 0.0
    keep_value = ctx.gain(occupant, board.where[occupant][0], (h,)) if occupant is not None else 0.0
    with board.tentative() as tx:  # a dry run: the occupant goes back as it was
        if occupant is not None:
            tx.remove(occupant)
        return _best_refill(ctx, board, h, queued, occupant, keep_value + loss, before_evals)


def _best_refill(
    ctx: PackContext, board: Board, h: int, queued: list[int], occupant: int | None, floor_value: float, before_evals: float
) -> tuple[list[tuple[int, int]] | None, float]:
    """``_refill``'s search, on a board without h's occupant."""
    groups: list[tuple[int, ...]] = []
    if occupant is not None:
        groups = [tuple(sorted((occupant, q))) for q in queued]
    else:
        head = queued[:12]
        groups = [(q,) for q in head] + [tuple(sorted(pair)) for i, a in enumerate(head) for pair in ((a, b) for b in head[i + 1 :])]
    best: tuple[float, list[tuple[int, int]]] | None = None
    for group in groups:
        if _has_forbidden(ctx, group):
            continue
        got = _group_value(ctx, board, group, h)
        if got is not None and got[0] > floor_value + 1e-9 and (best is None or got[0] > best[0]):
            best = (got[0], list(zip(group, got[1], strict=True)))
    return (best[1] if best else None), ctx.evaluations - before_evals


def _apply_on(ctx: PackContext, board: Board, h: int, group: list[tuple[int, int]]) -> bool:
    """Replace what GPU h holds by ``group`` if it fits and IAC allows; else leave h unchanged."""
    with board.tentative() as tx:
        for j in list(board.occ[h]):
            tx.remove(j)
        if all(tx.place(j, k, ctx.demand(j, k), (h,)).ok for j, k in group) and all(
            _allowed_pair(ctx, board, j, k, o, h) for j, k in group for o in board.occ[h] if o != j
        ):
            tx.commit()
            return True
    return False


def _settled(ctx: PackContext, board: Board, j: int, g: int) -> bool:
    """Job j runs where and how it ran last epoch."""
    return ctx.current_gpus.get(j) == (g,) and board.where[j][0] == int(ctx.table.current[j])


def _single_gpu_jobs(board: Board, g: int) -> bool:
    return all(board.where[j][1].dp == 1 for j in board.occ[g])


def _candidate_moves(board: Board, queued: Sequence[int], ctx: PackContext) -> list[tuple[int, int, int | None]]:
    """GPU pairs worth repartitioning: at least three jobs between them, or room for a queued one."""
    used = [g for g, occ in enumerate(board.occ) if occ and _single_gpu_jobs(board, g)]
    doubles = [g for g in used if len(board.occ[g]) == 2]
    singles = [g for g in used if len(board.occ[g]) == 1]
    # At scale the GPU pairs are too many to list: keep each GPU's nearest neighbours by free memory
    # (where a re-pairing can gain) and stop at the evaluation budget's worth of moves.
    limit = max(64, int(ctx.eval_budget))
    near = max(4, min(len(doubles), limit // max(1, len(doubles) + len(singles))))
    doubles.sort(key=lambda g: board.free_mem[g])
    singles.sort(key=lambda g: -board.free_mem[g])
    out: list[tuple[int, int, int | None]] = []
    no_empty = all(board.empty_count(m) == 0 for m in range(board.n_models))
    for i, g1 in enumerate(doubles):
        for g2 in doubles[i + 1 : i + 1 + near]:
            out.append((g1, g2, None))
        if no_empty:  # with empty GPUs around, splitting a pair (stage 6a) beats re-pairing it
            for g2 in singles[:near]:
                out.append((g1, g2, None))
        if len(out) >= limit:
            return out
    qs = [q for q in queued[:QUEUE_HEAD] if (ctx.table.valid[q] & (ctx.table.dp[q] == 1)).any()]
    for q in qs:
        for g1 in doubles[:near]:
            for g2 in singles[:near]:
                out.append((g1, g2, q))
        for i, g1 in enumerate(singles[:near]):
            for g2 in singles[i + 1 : near]:
                out.append((g1, g2, q))
        if len(out) >= 2 * limit:
            break
    return out


@lru_cache(maxsize=8)
def _partition_masks(n: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    out = []
    for mask in range(1 << n):
        a = tuple(i for i in range(n) if mask >> i & 1)
        b = tuple(i for i in range(n) if not mask >> i & 1)
        if len(a) <= 2 and len(b) <= 2:
            out.append((a, b))
    return tuple(out)


def _partitions(items: list[int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Ways to split up to four jobs over two GPUs, at most two per GPU."""
    return [(tuple(items[i] for i in a), tuple(items[i] for i in b)) for a, b in _partition_masks(len(items))]


def _group_value(ctx: PackContext, board: Board, group: tuple[int, ...], g: int) -> tuple[float, tuple[int, ...]] | None:
    """Best value of ``group`` alone on GPU g, memoised on what the answer depends on."""
    if not group:
        return 0.0, ()
    n = board.gpu_node[g]
    moving = any(j in ctx.current_gpus for j in group)
    t = ctx.table
    # node CPU / host memory enter the key only when they could bind (else GPUs on any node are alike)
    cpu_need = sum(float(t.cpu[j].max()) for j in group)
    host_need = sum(float(t.host[j].max()) for j in group)
    cpu = board.node_free_cpu[n] if board.node_free_cpu[n] < cpu_need else -1.0
    host = board.node_free_host[n] if board.node_free_host[n] < host_need else -1.0
    key = (group, g if moving else board.gpu_model[g], board.free_mem[g], board.free_sm[g], len(board.occ[g]), cpu, host)
    if key in ctx.group_cache:
        ctx.evaluations += 0.25  # a hit is cheap, not free: it keeps loops over hits bounded too
        return ctx.group_cache[key]
    ctx.evaluations += 1
    value = _group_value_uncached(ctx, board, group, g)
    ctx.group_cache[key] = value
    return value


def _group_value_uncached(ctx: PackContext, board: Board, group: tuple[int, ...], g: int) -> tuple[float, tuple[int, ...]] | None:
    if len(group) == 1:
        res1 = best_single(ctx, board, group[0], g)
        return None if res1 is None else (res1[0], (res1[1],))
    res2 = best_pair(ctx, board, group[0], group[1], g)
    return None if res2 is None else (res2[0], (res2[1], res2[2]))


Move = tuple[float, list[tuple[int, int, int]], int | None]  # (total value, [(job, option, gpu)], left out)


def _best_repartition(
    ctx: PackContext, board: Board, g1: int, g2: int, extra: int | None, floor_value: float
) -> tuple[Move | None, float]:
    """Dry run: the best split of g1's and g2's jobs (plus ``extra``) over g1 and g2 worth more than
    ``floor_value``. With a queued ``extra``, one pending (never running) job may be left out in its
    place. The board is unchanged on return. Returns (move or None, evaluations spent)."""
    jobs = list(board.occ[g1]) + list(board.occ[g2])
    with board.tentative() as tx:  # a dry run: every job goes back as it was
        for j in jobs:
            tx.remove(j)
        return _best_split(ctx, board, g1, g2, jobs, extra, floor_value)


def _best_split(
    ctx: PackContext, board: Board, g1: int, g2: int, jobs: list[int], extra: int | None, floor_value: float
) -> tuple[Move | None, float]:
    """``_best_repartition``'s search, on a board without the two GPUs' jobs."""
    items = jobs + ([extra] if extra is not None else [])
    outs: list[int | None] = [None]
    if extra is not None:
        outs += [j for j in jobs if j not in ctx.current_gpus]
    best: Move | None = None
    before_evals = ctx.evaluations
    for out in outs:
        chosen = [j for j in items if j != out]
        for a, b in _partitions(chosen):
            if _has_forbidden(ctx, a) or _has_forbidden(ctx, b):
                continue
            for ga, gb in ((g1, g2), (g2, g1)) if a and b else ((g1, g2),):
                va = _group_value(ctx, board, tuple(sorted(a)), ga)
                vb = _group_value(ctx, board, tuple(sorted(b)), gb)
                if va is None or vb is None:
                    continue
                total = va[0] + vb[0]
                if total > floor_value + 1e-9 and (best is None or total > best[0] + 1e-12):
                    best = (
                        total,
                        [(j, k, ga) for j, k in zip(sorted(a), va[1], strict=True)]
                        + [(j, k, gb) for j, k in zip(sorted(b), vb[1], strict=True)],
                        out,
                    )
    return best, ctx.evaluations - before_evals


def _apply_move(ctx: PackContext, board: Board, g1: int, g2: int, move: Move) -> bool:
    """Apply a repartition found by ``_best_repartition``; False (board unchanged) if it cannot hold."""
    jobs = list(board.occ[g1]) + list(board.occ[g2])
    with board.tentative() as tx:
        for j in jobs:
            tx.remove(j)
        # a refusal here is node CPU or host memory (both GPUs on one node)
        if not all(tx.place(j, k, ctx.demand(j, k), (g,)).ok for j, k, g in move[1]):
            return False
        refused = [(j, o) for j, k, g in move[1] for o in board.occ[g] if o != j and not _allowed_pair(ctx, board, j, k, o, g)]
        if not refused:
            tx.commit()
            return True
        for a, b in refused:  # IAC refused these pairs: kept apart for the rest of the epoch, like flagged ones
            ctx.forbidden.setdefault(a, set()).add(b)
            ctx.forbidden.setdefault(b, set()).add(a)
    return False


def _repartition(ctx: PackContext, board: Board, g1: int, g2: int, extra: int | None) -> tuple[float, float, int | None]:
    """Apply the best repartition of g1 and g2 (plus ``extra``) if it raises their total value."""
    before = _value_on(ctx, board, g1) + _value_on(ctx, board, g2)
    total = 0.0
    for _ in range(3):  # a move IAC refuses forbids its pairs; the next best split may hold
        move, spent = _best_repartition(ctx, board, g1, g2, extra, before)
        total += spent
        if move is None:
            break
        n_forbidden = sum(map(len, ctx.forbidden.values()))
        if _apply_move(ctx, board, g1, g2, move):
            return move[0] - before, total, move[2]
        if sum(map(len, ctx.forbidden.values())) == n_forbidden:
            break  # refused for node capacity, not by IAC: nothing new to rule out
    return 0.0, total, None


def _has_forbidden(ctx: PackContext, group: tuple[int, ...]) -> bool:
    return len(group) == 2 and group[1] in ctx.forbidden.get(group[0], ())


def _allowed_pair(ctx: PackContext, board: Board, a: int, ka: int, b: int, g: int) -> bool:
    """Both already placed on g: re-check the pair with the guard (a as the newcomer)."""
    if ctx.guard is None:
        return True
    with board.tentative() as tx:  # the guard asks about a newcomer: a is taken off and put back
        tx.remove(a)
        return ctx.guard(board, a, ka, (g,))
