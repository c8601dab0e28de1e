"""Turning a priced selection into GPUs: sticky placement, best-fit, repair, admission, fill, local search.

Aggregate feasibility (Eq. 3) does not imply a per-GPU packing exists (DESIGN.md). The stages here
realise ESP's selection on a ``Board`` and recover what the aggregate view loses:

1. running jobs stay on their GPUs when their new configuration fits there (migration is costly);
2. the rest go best-fit-decreasing (largest data-parallel degree, then memory, first);
3. a job that does not fit is *repaired*: its other options are tried in score order;
4. jobs ESP priced out are admitted into whatever capacity is left (Alg. 1, line 22);
5. *fill*: every placed job grows into the capacity left on its GPUs;
and, opt-in (``PlannerConfig.local_search_evals``), the bounded pair local search of ``pds/local_search.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from elastico_core.pds.board import EPS, Board, Demand, DemandColumns
from elastico_core.pds.options import EpochTable
from elastico_core.pds.shortfall import Refusal

Guard = Callable[[Board, int, int, tuple[int, ...]], bool]


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
    refusals: int = 0  # how many times the check turned a careful job away (``_place_in_turn`` counts)
    tau: Callable[[int, int], float] | None = None  # tau of a (job, option) cell, when IAC is asked
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
    if board.quota is not None and not board.quota.admits(j, d):  # its queue's quota: no search
        return False
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
        ctx.refusals += 1
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


def best_on(ctx: PackContext, board: Board, j: int, gpus: tuple[int, ...], key: np.ndarray) -> int:
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
    stopped: list[int] = []
    gangs: list[tuple[int, ...]] = []
    columns: DemandColumns | None = None
    sets = t.sets
    if ctx.current_gpus:
        js = np.fromiter(ctx.current_gpus, dtype=np.intp, count=len(ctx.current_gpus))
        stopped = js[choice[js] < 0].tolist()  # ESP stopped these (``PlannerConfig.preempt_outbid``): see 3b
        if ctx.forbidden:  # a running pair IAC kept apart does not stay together: one of it moves
            parted = _parted(ctx, js.tolist())
            if parted:
                movers += parted
                js = js[~np.isin(js, parted)]
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
        jobs, keep = js.tolist(), keep_k.tolist()
        gangs = list(ctx.current_gpus.values()) if len(jobs) == len(ctx.current_gpus) else [ctx.current_gpus[j] for j in jobs]
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
        alt = best_on(ctx, board, j, gpus, -ctx.score[j])
        if not (alt >= 0 and _allowed(ctx, board, j, alt, gpus) and board.try_place(j, alt, ctx.demand(j, alt), gpus).ok):
            movers.append(j)  # (``try_place``: its queue's quota may refuse)
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
    _place_in_turn(ctx, board, failed, unplaced)
    # 3b. running jobs ESP stopped make room for what found none
    if stopped and unplaced:
        _outbid(ctx, board, stopped, unplaced)
    # 4. admission of priced-out jobs into residual capacity (Alg. 1, line 22)
    left_out = [j for j in pending_order if choice[j] < 0 and not board.placed(j) and j not in unplaced]
    _place_in_turn(ctx, board, left_out, unplaced)
    return unplaced


def _outbid(ctx: PackContext, board: Board, stopped: list[int], unplaced: dict[int, Refusal]) -> None:
    """Running jobs ESP stopped (their rent exceeds their value by the outbid margin) leave their GPUs for
    the jobs packing could place nowhere else, which try again; each stopped job whose room nobody took
    goes back where it was, as it was: a checkpoint is paid only for room another job uses."""
    held = {j: board.where[j] for j in stopped if board.placed(j)}
    for j in held:
        board.remove(j)
    retry = list(unplaced)
    unplaced.clear()
    _place_in_turn(ctx, board, retry, unplaced)
    for j, (k, _d, gpus) in held.items():
        if _fits_on(ctx, board, j, k, gpus):
            board.place(j, k, ctx.demand(j, k), gpus)
        else:
            unplaced[j] = Refusal.NO_ROOM


def _parted(ctx: PackContext, running: list[int]) -> list[int]:
    """Running jobs that leave their GPUs because a partner there is one IAC keeps them apart from: of
    each such pair the one of less value at its current configuration (the one a split would move)."""
    t = ctx.table
    on: dict[int, set[int]] = {}
    for j in running:
        for g in ctx.current_gpus[j]:
            on.setdefault(g, set()).add(j)
    out: set[int] = set()
    for j in running:
        apart = ctx.forbidden.get(j)
        if not apart or j in out:
            continue
        for g in ctx.current_gpus[j]:
            for p in on[g] & apart:
                if p not in out:
                    out.add(min((j, p), key=lambda x: (float(t.value[x, t.current[x]]), -x)))
    return sorted(out)


def _place_in_turn(ctx: PackContext, board: Board, jobs: list[int], unplaced: dict[int, Refusal]) -> None:
    """Each job in turn at its first option (in score order) that some GPU takes; else into ``unplaced``.

    On a full cluster most of these jobs fit nowhere. Placing only takes capacity away, so a job none
    of whose options passes the board's necessary test (``Board.could_hold``) now fails it at its turn
    too: the test runs for all the jobs in one vectorised step first, and a job that passed it is asked
    again at its turn if the board changed since; a job that fails it is refused without a search, in
    the same order as before.
    """
    if not jobs:
        return
    least = _least_memory(ctx.table, jobs)
    alive = _holdable(board, least, 0)
    seen = board.version
    # an option like one already turned away on the board as it is now (same option set and option, same
    # jobs to avoid, a tolerance no higher) is turned away the same way without a second search
    known: dict[tuple[object, ...], tuple[int, float, bool]] = {}
    holds: dict[tuple[int, int, float], bool] = {}  # could_hold_one's answers on the board as it is (many jobs ask alike)
    held_at = board.version
    for i, j in enumerate(jobs):
        if alive[i] and board.version != seen:  # the board changed since the test: ask it again, for j alone
            if board.version != held_at:
                holds.clear()
                held_at = board.version
            alive[i] = any(_holds(board, holds, m, d, float(mem[i])) for m, d, mem in least if mem[i] < np.inf)
        if not alive[i] or not _place_first(ctx, board, j, _options_by_score(ctx, j, board=board), known):
            unplaced[j] = _refused(ctx, j)


def _holds(board: Board, memo: dict[tuple[int, int, float], bool], model: int, dp: int, mem: float) -> bool:
    key = (model, dp, mem)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = board.could_hold_one(model, mem, dp)
    return hit


def _place_first(
    ctx: PackContext, board: Board, j: int, options: list[int], known: dict[tuple[object, ...], tuple[int, float, bool]]
) -> bool:
    """Job j at the first of ``options`` some GPU takes (``_try_place``), skipping options ``known`` to fail.

    Whether an option is taken depends on the board, the option's demand, the jobs j avoids and, when
    IAC is asked, j's tolerance there, and a lower tolerance only refuses more (the search visits the
    same GPUs and IAC turns away at least the same partners). Jobs of one workload share their option
    sets, so on a full cluster most searches repeat one already made since the board last changed.
    """
    asks = ctx.tau is not None and (ctx.guard is not None or (ctx.admit is not None and j in ctx.careful))
    avoid = ctx.forbidden.get(j)
    like = (id(ctx.table.sets[j]), frozenset(avoid) if avoid else None, asks)
    quota = board.quota
    for k in options:
        if quota is not None and not quota.admits(j, ctx.demand(j, k)):
            continue  # its queue's quota, not the GPUs: never remembered as a refusal of the option
        key = (*like, k)
        tau = ctx.tau(j, k) if asks and ctx.tau is not None else 0.0
        hit = known.get(key)
        if hit is not None and hit[0] == board.version and tau <= hit[1]:
            if hit[2]:
                ctx.refused.add(j)
            continue
        before = ctx.refusals
        if _try_place(ctx, board, j, k):
            return True
        if hit is None or hit[0] != board.version or tau > hit[1]:
            known[key] = (board.version, tau, ctx.refusals != before)
    return False


Least = list[tuple[int, int, np.ndarray]]  # (GPU model, GPU count, each job's least memory per GPU there)


def _least_memory(t: EpochTable, jobs: list[int]) -> Least:
    """Per (GPU model, GPU count) among the jobs' valid options: each job's least memory per GPU there
    (inf where it has none). ``could_hold`` is monotone in memory, so these decide it for every option."""
    rows = np.asarray(jobs, dtype=np.intp)
    valid, model, dp, mem = t.valid[rows], t.model[rows], t.dp[rows], t.mem[rows]
    key = np.where(valid, model * 1024 + dp, -1)
    out: Least = []
    for k in np.unique(key[valid]).tolist():
        m, d = divmod(int(k), 1024)
        out.append((m, d, np.where(key == k, mem, np.inf).min(axis=1)))
    return out


def _holdable(board: Board, least: Least, start: int) -> np.ndarray:
    """Per job from ``start`` on: does some option of it pass ``Board.could_hold`` on the board as it is?"""
    if not least:
        return np.zeros(0, dtype=bool)
    out = np.zeros(len(least[0][2]) - start, dtype=bool)
    for m, d, mem in least:
        need = mem[start:]
        out |= board.could_hold_each(m, need, d) & (need < np.inf)
    return out


def _refused(ctx: PackContext, j: int) -> Refusal:
    return Refusal.INTERFERENCE if j in ctx.refused else Refusal.NO_ROOM


def _fits_on(ctx: PackContext, board: Board, j: int, k: int, gpus: tuple[int, ...]) -> bool:
    """Option k of job j fits exactly these GPUs (model, count, memory, SM, slots, node) and IAC allows it."""
    d = ctx.demand(j, k)
    return (
        d.dp == len(gpus)
        and (board.quota is None or board.quota.admits(j, d))
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
    occ, where = board.occ, board.where
    for position in range(board.max_per_gpu):
        batch = [j for j in growable if occ[where[j][2][0]].index(j) == position]
        changed += _grow_batch(ctx, board, batch) if ctx.guard is None else _grow(ctx, board, batch)
    return changed


def _rooms(board: Board, jobs: list[int]) -> tuple[np.ndarray, ...]:
    """Per placed job: its option, first GPU, GPU count, and the least free memory and SM over its GPUs
    (as the board's lists hold them), as arrays: fill asks this of every placed job, thousands per round."""
    where = board.where
    entries = [where[j] for j in jobs]
    n = len(entries)
    old_k = np.fromiter((e[0] for e in entries), dtype=np.intp, count=n)
    first = np.fromiter((e[2][0] for e in entries), dtype=np.intp, count=n)
    count = np.fromiter((len(e[2]) for e in entries), dtype=np.intp, count=n)
    free_mem, free_sm = np.asarray(board.free_mem, dtype=float), np.asarray(board.free_sm, dtype=float)
    room_mem, room_sm = free_mem[first], free_sm[first]
    for i in np.flatnonzero(count > 1).tolist():
        gs = list(entries[i][2])
        room_mem[i] = free_mem[gs].min()
        room_sm[i] = free_sm[gs].min()
    return old_k, first, count, room_mem, room_sm


def _grow_batch(ctx: PackContext, board: Board, jobs: list[int]) -> int:
    if not jobs:
        return 0
    t = ctx.table
    rows = np.array(jobs)
    old_k, first, count_i, room_mem, room_sm = _rooms(board, jobs)
    free_mem = room_mem + t.mem[rows, old_k]
    free_sm = room_sm + t.sm[rows, old_k]
    node = np.asarray(board.gpu_node, dtype=np.intp)[first]
    count = count_i.astype(float)
    free_cpu = np.asarray(board.node_free_cpu, dtype=float)[node] / count + t.cpu[rows, old_k]
    free_host = np.asarray(board.node_free_host, dtype=float)[node] / count + t.host[rows, old_k]
    model = np.asarray(board.gpu_model, dtype=np.intp)[first]
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
    old_k, first, count, room_mem, room_sm = _rooms(board, jobs)
    room_mem = room_mem + t.mem[rows, old_k]
    room_sm = room_sm + t.sm[rows, old_k]
    model = np.asarray(board.gpu_model, dtype=np.intp)[first]
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
            k_new = best_on(ctx, board, j, gpus, ctx.search[j])
            grows = k_new >= 0 and k_new != k_old and ctx.search[j, k_new] > ctx.search[j, k_old] + 1e-9
            if grows and _allowed(ctx, board, j, k_new, gpus) and tx.place(j, k_new, ctx.demand(j, k_new), gpus).ok:
                tx.commit()
                changed += 1
    return changed
