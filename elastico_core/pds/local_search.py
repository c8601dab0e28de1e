"""The pair local search (opt-in): re-optimise co-located pairs, insert queued jobs, swap partners.

After packing and fill, a bounded local search re-optimises co-located pairs jointly, inserts queued
jobs next to a partner that can shrink, and repartitions the jobs of two GPUs when that raises total
value. It spends at most ``PlannerConfig.local_search_evals`` pair evaluations per round. The
production rules do not run it (``local_search_evals = 0``): on paper-mix at 64 GPUs it did not pay
for itself at any load of the rules sweep, and each extra reshape it makes is a checkpoint-resume or
an engine restart for a user's job (docs/simulator.md). The ``local-search`` variant of the sweep
(``pds.rules.VARIANTS``) turns it on.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from elastico_core.pds.board import EPS, Board
from elastico_core.pds.packing import PackContext, best_on

QUEUE_HEAD = 64  # local moves try to let in this many queued jobs (in queue order) per round


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
    k = best_on(ctx, board, a, (g,), ctx.search[a])
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
                placed = tx.place(a, ka, ctx.demand(a, ka), (g,)).ok and tx.place(b, kb, ctx.demand(b, kb), (g,)).ok
                if placed and _allowed_pair(ctx, board, a, ka, b, g):  # (a queue's quota may refuse)
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
            placed = tx.place(p, kp, ctx.demand(p, kp), (g,)).ok and tx.place(q, kq, ctx.demand(q, kq), (g,)).ok
            if placed and _allowed_pair(ctx, board, q, kq, p, g):  # (a queue's quota may refuse)
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
