"""The Planner: one epoch of Algorithm 1 (reservation, ESP<->IAC rounds, bin-packing, admission).

Decisions on the paper's open points, made here:

* **Eq. 12's queue.** Q(t) is the set of pending jobs left waiting: in round 1 the jobs the caller
  says waited last epoch (``PlanningInput.waiting``), in round m > 1 the jobs round m-1 could not
  place. Reserving gamma x R_min for them raises prices, so running jobs shrink ahead of admissions.
* **Which jobs ESP sees.** Running and pending jobs together (Case 2: four simultaneous arrivals
  must be able to start together); running jobs can be reshaped but not priced out.
* **Penalties.** A violating pair adds alpha x w_j x (S_hat - tau_j) to Gamma_j(c_j) of each job
  above its threshold, and the pair is kept apart in later rounds' packing. After M rounds, any pair
  still in violation is split (one job moves or waits), so every placed job meets tau and its floor.
* **What BINPACK asks IAC.** Round 1 packs by capacity alone, as Alg. 1 does, except for the jobs that
  waited last epoch. A pending job IAC flagged in a round, and every job that waited, is packed from
  then on only where IAC admits it beside every partner (looking past the partners it would harm, then
  to empty GPUs). Kept apart from its first partner only, a flagged job went beside the next one it
  harmed: each round found a new violation, and the first 8 hours of a 512-GPU day spent 43 % of
  their planning time in such epochs (three rounds and a split). Running jobs are not checked up
  front: their pairs were admitted, and a pair that turns bad (a new tau, a shrink) is what the
  rounds' penalties steer.
* **Objective.** sum_j w_j T_j(c_j) / (T_j(c_max) S_hat_j) over placed jobs; the best round is kept.
"""

from __future__ import annotations

import gc
import operator
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from elastico_core.esp.pricing import ClusterTotals, Market, TatonnementConfig, tatonnement
from elastico_core.iac.predictor import NoInterference, SlowdownPredictor
from elastico_core.iac.thresholds import ThresholdConfig
from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import TP_KNOB, Knobs
from elastico_core.model.plan import (
    Binding,
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
from elastico_core.model.state import Assignment
from elastico_core.pds.actions import diff_actions
from elastico_core.pds.board import Board, Demand, Layout
from elastico_core.pds.interference import PairMemo, Tolerances
from elastico_core.pds.options import EpochTable, OptionCompiler, OptionSet, RowStore
from elastico_core.pds.packing import PackContext, fill, local_search, pack
from elastico_core.pds.shortfall import Refusal, Room, render, smallest_shortfall
from elastico_core.rst.store import ProfileStore


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Knobs of the planner itself (every field is documented in the README's configuration table)."""

    max_rounds: int = field(default=3, metadata={"help": "M of Alg. 1: ESP<->IAC rounds per epoch"})
    reserve_gamma: float = field(default=0.5, metadata={"help": "gamma of Eq. 12 (0 ignores the queue)"})
    switch_cost: float = field(default=0.04, metadata={"help": "gamma_0 of Eq. 7 for a checkpoint-resume, x w_j"})
    switch_weights: tuple[float, float, float] = field(
        default=(0.0, 0.4, 1.0), metadata={"help": "relative cost of flag toggle, engine restart, checkpoint-resume"}
    )
    migration_cost: float = field(default=0.08, metadata={"help": "extra score for moving a running job, x w_j"})
    penalty_alpha: float = field(default=1.0, metadata={"help": "alpha of Eq. 7's interference penalty"})
    sm_capacity: float = field(default=1.0, metadata={"help": "sum of SM shares allowed on one GPU"})
    local_search_evals: int = field(default=4000, metadata={"help": "pair evaluations the local search may spend"})
    cross_node_gangs: bool = field(default=True, metadata={"help": "data-parallel jobs may span nodes"})
    tatonnement: TatonnementConfig = field(default_factory=TatonnementConfig)
    thresholds: ThresholdConfig = field(default_factory=ThresholdConfig)


# per job: its spec, its running Assignment, options, current option, GPU indexes, switching costs,
# why it cannot be planned, and the slot of its rows in the RowStore (all reused while spec and
# assignment stay the same objects)
_JobEntry = tuple[JobSpec, Assignment | None, OptionSet, int, tuple[int, ...], np.ndarray | None, Queued | None, int]
_BY_ID = operator.attrgetter("id")


def _queue_order(j: JobSpec) -> tuple[float, float, str]:
    return (-j.priority, j.submit_time_s, j.id)


class _Clock:
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
class Prepared:
    table: EpochTable
    specs: tuple[JobSpec, ...]
    queued: tuple[Queued, ...]
    current_gpus: dict[int, tuple[int, ...]]


@dataclass
class _Round:
    board: Board
    choice: np.ndarray
    prices: np.ndarray
    unplaced: dict[int, Refusal]
    slowdown: np.ndarray
    violations: list[tuple[int, int, int, float, float, float, float]]
    objective: float
    log: RoundLog
    rents: np.ndarray  # (J, K) rent of every option at the round's prices
    score: np.ndarray  # (J, K) what ESP minimised: w - value + switch + Gamma + rent


class Planner:
    """Algorithm 1 over one cluster snapshot. Keeps only caches between calls (options, switch costs)."""

    def __init__(
        self,
        store: ProfileStore,
        predictor: SlowdownPredictor | None = None,
        config: PlannerConfig | None = None,
    ) -> None:
        self.store = store
        self.predictor: SlowdownPredictor = predictor or NoInterference()
        self.config = config or PlannerConfig()
        self._compiler: OptionCompiler | None = None
        self._job_cache: dict[str, _JobEntry] = {}
        self._rows = RowStore()  # the cached jobs' table rows, at the slot each entry names
        self.last_timing_ms: dict[str, float] = {}
        self._board_layout: Layout | None = None
        self._placement_cache: dict[str, tuple[OptionSet, int, tuple[int, ...], Placement]] = {}
        self._pairs: PairMemo | None = None
        self._tau: Tolerances | None = None
        self._last: tuple[PlanningInput, Plan, SlowdownPredictor, PlannerConfig] | None = None
        self._gpu_mem_of: tuple[Cluster, list[float]] | None = None
        # the costliest-knob weight per option, by (option set, running knobs): a set belongs to one
        # knob space, so the knobs' change kinds are the same for every job sharing it
        self._worst: dict[tuple[int, Knobs], tuple[OptionSet, np.ndarray]] = {}
        self._totals_of: ClusterTotals | None = None

    def _totals(self, cluster: Cluster) -> ClusterTotals:
        hit = self._totals_of
        if hit is None or (hit.cluster is not cluster and hit.cluster != cluster):
            hit = self._totals_of = ClusterTotals.of(cluster)
        return hit

    def _layout(self, cluster: Cluster) -> Layout:
        if self._board_layout is None or self._board_layout.cluster != cluster:
            self._board_layout = Layout.of(cluster, self.config.sm_capacity)
        return self._board_layout

    def compiler(self, cluster: Cluster) -> OptionCompiler:
        if self._compiler is None or self._compiler.cluster != cluster:
            self._compiler = OptionCompiler(cluster, self.store, self.config.sm_capacity)
            self._job_cache.clear()
            self._rows.clear()
        return self._compiler

    # ------------------------------------------------------------------------------------------
    def plan(self, inp: PlanningInput) -> Plan:
        """One epoch of Algorithm 1. ``last_timing_ms`` afterwards breaks its latency down by stage.

        An input equal to the previous call's gets the previous plan back (stage ``unchanged``).

        The cyclic garbage collector is paused for the epoch: the planner builds no reference cycles
        (reference counting frees everything it drops), and a full collection over a large planner
        heap would otherwise land in the middle of an epoch at random (tens of ms at 4,096 GPUs).
        """
        t0 = time.perf_counter()
        last = self._last
        if last is not None and last[2] is self.predictor and last[3] is self.config and last[0] == inp:
            # the same input as the last epoch: Algorithm 1 is deterministic, so this is its answer
            # (a controller at a fixed point, asked again every ΔT, pays only this comparison)
            self.last_timing_ms = {"unchanged": (time.perf_counter() - t0) * 1e3, "total": (time.perf_counter() - t0) * 1e3}
            return last[1]
        collecting = gc.isenabled()
        gc.disable()
        try:
            plan = self._plan(inp)
        finally:
            if collecting:
                gc.enable()
        self._last = (inp, plan, self.predictor, self.config)
        return plan

    def _plan(self, inp: PlanningInput) -> Plan:
        clock = _Clock()
        cfg = self.config
        cluster = inp.cluster
        prep = self.prepare(inp)
        clock.lap("prepare")
        table, specs, ids = prep.table, prep.specs, prep.table.job_ids
        queued, current_gpus = list(prep.queued), prep.current_gpus
        n_jobs = len(ids)
        if n_jobs == 0:
            return Plan((), tuple(queued), partial(diff_actions, inp, (), tuple(queued)), inp.prices or Prices(), (), 0.0)

        totals = self._totals(cluster)
        gpus_per_model, usable = totals.gpus_per_model, totals.usable
        market = Market.of(totals=totals, options=table, sm_capacity=cfg.sm_capacity)
        weights = table.weight
        base = weights[:, None] - table.value + table.switch
        none_score = np.where(table.running, np.inf, weights)
        prices = self._initial_prices(market, inp.prices)
        reserve_unit = self._min_usage(market, table)
        running_floor = reserve_unit[table.running].sum(axis=0) if table.running.any() else np.zeros(len(market.goods))
        utilization = inp.utilization if inp.utilization is not None else self._pressure(table, usable, gpus_per_model)
        migration = np.where(table.running, cfg.migration_cost * weights, 0.0)
        gamma = np.zeros_like(base)
        forbidden: dict[int, set[int]] = {}
        pending_order = np.flatnonzero(~table.running).tolist()
        waiting = {j for j in pending_order if ids[j] in inp.waiting} if inp.waiting else set()
        careful = set(waiting)  # placed only where IAC admits them (see the module's notes)
        clock.lap("market")

        guard = None if isinstance(self.predictor, NoInterference) else self._guard(table, specs, utilization, cluster)
        rounds: list[_Round] = []
        total_iters = 0
        for m in range(1, cfg.max_rounds + 1):
            cap = reserve(market.capacity, reserve_unit, waiting, cfg.reserve_gamma, running_floor)
            dual = tatonnement(market, cap, base + gamma, table.value, none_score, prices, cfg.tatonnement)
            clock.lap("esp")
            total_iters += dual.iterations
            prices = dual.prices
            rents = market.rent(prices)
            score = base + gamma + rents
            clock.lap("scores")
            ctx = PackContext(
                table=table,
                adjusted=table.value - table.switch - gamma,
                score=score,
                current_gpus=current_gpus,
                migration_cost=migration,
                forbidden=forbidden,
                cross_node=cfg.cross_node_gangs,
                eval_budget=cfg.local_search_evals,
                admit=guard,
                careful=careful,
            )
            board = Board(self._layout(cluster))
            clock.lap("board")
            unplaced = pack(ctx, board, dual.choice, pending_order)
            clock.lap("pack")
            fill(ctx, board)
            # local moves must not pair jobs IAC would flag (a flag would penalise a configuration for a
            # pairing that only a tentative move made); the bulk stages rely on the round's check instead
            if guard is not None:
                ctx.guard = guard
                ctx.local = table.value - table.switch
                ctx.singles.clear()
                ctx.group_cache.clear()
            clock.lap("fill")
            _, still = local_search(ctx, board, [j for j in pending_order if j in unplaced])
            clock.lap("search")
            unplaced = {j: r for j, r in unplaced.items() if j in still}
            fill(ctx, board)
            clock.lap("fill")
            slowdown, violations = self._assess(board, table, specs, utilization, cluster)
            clock.lap("iac")
            objective = self._objective(board, table, slowdown)
            penalties, separated = penalise(violations, board, table, cfg.penalty_alpha, gamma, forbidden, careful)
            log = RoundLog(
                round=m,
                iterations=dual.iterations,
                prices=Prices.of(dict(zip(market.goods, prices, strict=True))),
                objective=objective,
                placed=len(board.where),
                violations=tuple(
                    Violation(board.gpu_ids[g], ids[a], ids[b], sa, sb, ta, tb) for a, b, g, sa, sb, ta, tb in violations
                ),
                penalties=tuple(penalties),
                separated=tuple(separated),
            )
            rounds.append(_Round(board, dual.choice, prices.copy(), unplaced, slowdown, violations, objective, log, rents, score))
            if not violations:
                break
            waiting = set(unplaced)
            clock.lap("rounds")

        clean = [r for r in rounds if not r.violations]
        best = max(clean, key=lambda r: r.objective) if clean else rounds[-1]
        notes: list[str] = []
        if not clean:
            notes.append(f"{len(best.violations)} co-located pairs still above tolerance after {cfg.max_rounds} rounds: split")
            self._split_violations(best, table, specs, utilization, cluster, forbidden, base + gamma + market.rent(best.prices))
        best.board.check()
        clock.lap("repair")

        placements = self._placements(best, table, specs, cluster)
        placed = {p.job_id for p in placements}
        if len(placed) < len(ids):
            room = Room.of(best.board)
            for j, jid in enumerate(ids):
                if jid not in placed:
                    queued.append(self._queued(j, best, table, specs, utilization, cluster, forbidden, room))
        prices_out = Prices.of(dict(zip(market.goods, best.prices, strict=True)))
        plan_queued = tuple(queued)
        plan_placements = tuple(placements)
        clock.lap("actions")
        self.last_timing_ms = clock.as_ms()
        return Plan(
            placements=plan_placements,
            queued=plan_queued,
            derive_actions=partial(diff_actions, inp, plan_placements, plan_queued),
            prices=prices_out,
            rounds=tuple(r.log for r in rounds),
            # a clean round's board is as it was assessed; a split one changed after its objective
            objective=best.objective if clean else self._objective(best.board, table, best.slowdown),
            iterations=total_iters,
            notes=tuple(notes) + tuple(f"profile store: {p}" for p in self.store.problems),
        )


    def prepare(self, inp: PlanningInput) -> Prepared:
        """Compile every job's options into the epoch table (shared with the MILP reference)."""
        cluster = inp.cluster
        compiler = self.compiler(cluster)
        layout = self._layout(cluster)
        model_ix = layout.model_index
        gpu_ix = layout.gpu_index
        queued: list[Queued] = []
        running = inp.running
        running_order = sorted([j for j in inp.jobs if j.id in running], key=_BY_ID)
        pending = sorted([j for j in inp.jobs if j.id not in running], key=_queue_order)
        cache, rows = self._job_cache, self._rows
        entries: list[_JobEntry] = []
        stale: list[int] = []  # positions in entries whose rows must be (re)written
        for job in (*running_order, *pending):
            jid = job.id
            a = running.get(jid)
            entry = cache.get(jid)
            changed = entry is None or entry[0] is not job or (entry[1] is not a and entry[1] != a)
            if changed:
                known = entry[2] if entry is not None and entry[0] is job else None
                opts, cur, gidx, sw, problem = self._prepare_job(job, a, compiler, cluster, gpu_ix, model_ix, known)
                entry = cache[jid] = (job, a, opts, cur, gidx, sw, problem, entry[7] if entry else -1)
            assert entry is not None
            if entry[6] is not None:  # never in the table: its rows are not (re)written
                queued.append(entry[6])
                continue
            if changed:
                stale.append(len(entries))
            entries.append(entry)
        if stale:  # new or changed jobs: their rows written in one pass per column
            todo = [entries[i] for i in stale]
            for i, e, slot in zip(stale, todo, rows.put_many([(e[7], e[2], e[0].weight, e[3], e[5]) for e in todo]), strict=True):
                entries[i] = cache[e[0].id] = (*e[:7], slot)
        if len(cache) > 2 * len(inp.jobs) + 1024:  # forget jobs that left the planner's view
            in_view = {j.id for j in inp.jobs}
            for jid in [x for x in cache if x not in in_view]:
                slot = cache.pop(jid)[7]
                if slot >= 0:
                    rows.release(slot)
        specs = [e[0] for e in entries]
        current_gpus = {j: e[4] for j, e in enumerate(entries) if e[1] is not None}
        slots = np.array([e[7] for e in entries], dtype=np.intp)
        table = rows.table(slots, [s.id for s in specs], [e[2] for e in entries])
        return Prepared(table, tuple(specs), tuple(queued), current_gpus)

    def _prepare_job(
        self,
        job: JobSpec,
        a: Assignment | None,
        compiler: OptionCompiler,
        cluster: Cluster,
        gpu_ix: Mapping[str, int],
        model_ix: Mapping[str, int],
        known: OptionSet | None = None,
    ) -> tuple[OptionSet, int, tuple[int, ...], np.ndarray | None, Queued | None]:
        """A job's options, current option and GPUs, switching costs, or why it cannot be planned.

        ``known`` is the job's option set from an earlier epoch: reused when it holds the running config.
        """
        if known is not None and known.problem is None and (a is None or a.knobs in known.knobs):
            opts = known
        else:
            opts = compiler.options(job, a.knobs if a else None)
        if a is not None:
            gidx = tuple(gpu_ix[g] for g in a.gpus if g in gpu_ix)
            model = cluster.gpus[gidx[0]].model.name if gidx else None
            cur = opts.index_of(a.knobs, model_ix[model]) if model else -1
            if cur < 0 or len(gidx) != len(a.gpus):
                gone = Shortfall(Binding.GPU_SLOT, float(len(a.gpus)), float(len(gidx)))
                return opts, -1, (), None, Queued(job.id, QueueCode.PREEMPTED, render(QueueCode.PREEMPTED, gone), gone)
            if opts.problem is None:
                return opts, cur, gidx, self._switch_costs(job, opts, a.knobs), None
        if opts.problem is not None:
            return opts, -1, (), None, replace(opts.problem, job_id=job.id)  # option sets are shared by jobs
        return opts, -1, (), None, None

    # ---- pieces -------------------------------------------------------------------------------
    def _switch_costs(self, job: JobSpec, opts: OptionSet, knobs: Knobs) -> np.ndarray:
        """gamma_0 x (weight of the costliest knob that changes) for every option (Eq. 7)."""
        hit = self._worst.get((id(opts), knobs))
        if hit is not None and hit[0] is opts:
            worst = hit[1]
        else:
            w = self.config.switch_weights
            kinds = {s.name: s.change for s in job.knob_space}
            weights = np.array([w[kinds[n].value] if n in kinds else w[-1] for n in opts.knob_names])
            if not len(weights):
                return np.zeros(len(opts))
            worst = (opts.changed_knobs(knobs) * weights[None, :]).max(axis=1)
            if len(self._worst) >= 65536:
                self._worst.clear()
            self._worst[(id(opts), knobs)] = (opts, worst)
        return self.config.switch_cost * worst * job.weight

    @staticmethod
    def _initial_prices(market: Market, prices: Prices | None) -> np.ndarray:
        if prices is None:
            return np.zeros(len(market.goods))
        return np.array([max(0.0, prices.get(g)) for g in market.goods])

    @staticmethod
    def _min_usage(market: Market, table: EpochTable) -> np.ndarray:
        """Each job's smallest footprint R_min (its least-memory option) as a goods vector."""
        n_jobs = table.valid.shape[0]
        usage = market.usage
        mem = np.where(table.valid, usage[1], np.inf)
        k = np.argmin(mem, axis=1)
        rows = np.arange(n_jobs)
        out = np.zeros((n_jobs, len(market.goods)))
        mi = market.model[rows, k]
        out[rows, 3 * mi] = usage[0, rows, k]
        out[rows, 3 * mi + 1] = usage[1, rows, k]
        out[rows, 3 * mi + 2] = usage[2, rows, k]
        out[:, 3 * market.n_models] = usage[3, rows, k]
        out[:, 3 * market.n_models + 1] = usage[4, rows, k]
        return out

    @staticmethod
    def _pressure(table: EpochTable, usable: np.ndarray, gpus_per_model: np.ndarray) -> float:
        """U(t) for Eq. 11: memory every job would hold at its best configuration over what exists."""
        best = np.argmax(np.where(table.valid, table.value, -np.inf), axis=1)
        rows = np.arange(len(best))
        need = float((table.mem[rows, best] * table.dp[rows, best]).sum())
        return need / float((usable * gpus_per_model).sum())

    def _memo(self) -> PairMemo:
        if self._pairs is None or self._pairs.predictor is not self.predictor:
            self._pairs = PairMemo(self.predictor)
        return self._pairs

    def _gpu_mem(self, cluster: Cluster) -> list[float]:
        if self._gpu_mem_of is None or (self._gpu_mem_of[0] is not cluster and self._gpu_mem_of[0] != cluster):
            self._gpu_mem_of = (cluster, [float(g.model.memory_mib) for g in cluster.gpus])
        return self._gpu_mem_of[1]

    def _tolerances(self, table: EpochTable, specs: tuple[JobSpec, ...], utilization: float) -> Tolerances:
        hit = self._tau
        if hit is None or hit.table is not table or hit.utilization != utilization:
            hit = self._tau = Tolerances(table, specs, utilization, self.config.thresholds)
        return hit

    def _assess(
        self, board: Board, table: EpochTable, specs: tuple[JobSpec, ...], utilization: float, cluster: Cluster
    ) -> tuple[np.ndarray, list[tuple[int, int, int, float, float, float, float]]]:
        """IAC on every shared GPU (Alg. 1, l. 10-16): slowdown per job and the violating pairs.

        A job's slowdown on one GPU is 1 + the sum of (S - 1) over its partners there; across a gang,
        the worst GPU's. A pair violates when either side exceeds its tolerance tau.
        """
        n = table.valid.shape[0]
        slowdown = np.ones(n)
        if isinstance(self.predictor, NoInterference):
            return slowdown, []
        gpu_mem = self._gpu_mem(cluster)
        where = board.where
        rows: list[tuple[int, int, int, int]] = []
        gpu_of_row: list[int] = []
        mem: list[float] = []
        first: list[bool] = []  # the row that names the unordered pair (its first occurrence)
        for g, occ in enumerate(board.occ):
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
        s = self._memo().slowdowns(table, rows, mem)
        s = np.where(np.isfinite(s), np.maximum(s, 1.0), 1.0)
        arr = np.array(rows, dtype=np.int64)
        ja, ka_, jb = arr[:, 0], arr[:, 1], arr[:, 2]
        g_arr = np.array(gpu_of_row, dtype=np.int64)
        cell, inverse = np.unique(ja * len(board.occ) + g_arr, return_inverse=True)
        per_gpu = 1.0 + np.bincount(inverse, weights=s - 1.0)
        np.maximum.at(slowdown, cell // len(board.occ), per_gpu)
        tau = np.full(n, np.inf)
        tau[ja] = self._tolerances(table, specs, utilization).at(ja, ka_)
        over = slowdown > tau + 1e-9
        named = np.flatnonzero(np.array(first) & (over[ja] | over[jb]))
        violations = []
        for r in named.tolist():
            x, y = min(rows[r][0], rows[r][2]), max(rows[r][0], rows[r][2])
            violations.append((x, y, gpu_of_row[r], float(slowdown[x]), float(slowdown[y]), float(tau[x]), float(tau[y])))
        return slowdown, violations

    def _guard(
        self, table: EpochTable, specs: tuple[JobSpec, ...], utilization: float, cluster: Cluster
    ) -> Callable[[Board, int, int, tuple[int, ...]], bool]:
        """Would job j (option k) on ``gpus`` keep itself and every partner there within tau?"""
        memo = self._memo()
        gpu_mem = self._gpu_mem(cluster)
        tolerances = self._tolerances(table, specs, utilization)

        def allowed(board: Board, j: int, k: int, gpus: tuple[int, ...]) -> bool:
            rows: list[tuple[int, int, int, int]] = []
            mem: list[float] = []
            for g in gpus:
                for p in board.occ[g]:
                    kp = board.where[p][0]
                    rows += [(j, k, p, kp), (p, kp, j, k)]
                    mem += [gpu_mem[g]] * 2
            if not rows:
                return True
            s = memo.slowdowns(table, rows, mem)
            return bool(np.all(s <= tolerances.of([(a, ka) for a, ka, _, _ in rows]) + 1e-9))

        return allowed

    @staticmethod
    def _objective(board: Board, table: EpochTable, slowdown: np.ndarray) -> float:
        js, ks = board.option_arrays()
        return float((table.value[js, ks] / slowdown[js]).sum())

    def _split_violations(
        self,
        rnd: _Round,
        table: EpochTable,
        specs: tuple[JobSpec, ...],
        utilization: float,
        cluster: Cluster,
        forbidden: dict[int, set[int]],
        score: np.ndarray,
    ) -> None:
        """Move (or queue) one job of every pair still above tolerance; never leaves a violation."""
        board = rnd.board
        guard = self._guard(table, specs, utilization, cluster)
        # one assessment per sweep over all violating pairs (not per pair): the assessment predicts every
        # co-located pair, and re-running it after each move made a saturated 512-GPU epoch take seconds
        for _ in range(8):
            _, violations = self._assess(board, table, specs, utilization, cluster)
            if not violations:
                break
            moved: set[int] = set()
            for a, b, _g, *_ in violations:
                if a in moved or b in moved:
                    continue  # this pair changed already; the next assessment sees what is left
                forbidden.setdefault(a, set()).add(b)
                forbidden.setdefault(b, set()).add(a)
                victims = sorted((a, b), key=lambda j: (bool(table.running[j]), float(table.value[j, board.where[j][0]])))
                victim = victims[0]
                moved.add(victim)
                board.remove(victim)
                s = np.where(table.valid[victim], score[victim], np.inf)
                avoid = set(forbidden.get(victim, ()))
                for k in np.argsort(s)[:16]:
                    if not np.isfinite(s[k]):
                        break
                    d = _demand(table, victim, int(k))
                    # a GPU whose partner the move would slow beyond tolerance is skipped here, not
                    # found by the next sweep's assessment (which would cost a sweep per such move)
                    for _try in range(4):
                        gpus = board.find_gang(d, avoid, self.config.cross_node_gangs)
                        if gpus is None or guard(board, victim, int(k), gpus):
                            break
                        avoid.update(p for g in gpus for p in board.occ[g])
                        gpus = None
                    if gpus is not None:
                        board.place(victim, int(k), d, gpus)
                        break
                if not board.placed(victim):
                    rnd.unplaced[victim] = Refusal.INTERFERENCE
        rnd.slowdown, rnd.violations = self._assess(board, table, specs, utilization, cluster)
        while rnd.violations:  # pathological predictor: drop co-location entirely for the offenders
            gone: set[int] = set()
            for a, b, *_ in rnd.violations:
                if a in gone or b in gone:
                    continue
                victim = a if not table.running[a] else b
                board.remove(victim)
                gone.add(victim)
                rnd.unplaced[victim] = Refusal.UNSAFE
            rnd.slowdown, rnd.violations = self._assess(board, table, specs, utilization, cluster)

    def _placements(self, rnd: _Round, table: EpochTable, specs: tuple[JobSpec, ...], cluster: Cluster) -> list[Placement]:
        board = rnd.board
        cache = self._placement_cache
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

    def _queued(
        self,
        j: int,
        rnd: _Round,
        table: EpochTable,
        specs: tuple[JobSpec, ...],
        utilization: float,
        cluster: Cluster,
        forbidden: dict[int, set[int]],
        room: Room,
    ) -> Queued:
        """A job left out of the best round: its code and its typed shortfall, the reason rendered from both.

        IAC binds when packing turned the job away for a partner (or the split did), or IAC flagged its
        pairing this epoch, and some GPU has room for it beside partners; otherwise the capacity that
        binds at its nearest configuration, and the price when every resource has room.
        """
        jid = table.job_ids[j]
        refusal = rnd.unplaced.get(j, Refusal.NO_ROOM)
        short: Shortfall | None = None
        if refusal is not Refusal.NO_ROOM or j in forbidden:
            short = self._interference_shortfall(j, rnd.board, table, specs, utilization, cluster, room)
        if short is not None and not table.running[j]:
            code = QueueCode.INTERFERENCE
        else:
            short = short or smallest_shortfall(room, [_demand(table, j, k) for k in _nearest_options(table, j)])
            if table.running[j]:
                code = QueueCode.PREEMPTED
            elif rnd.choice[j] < 0:
                code = QueueCode.PRICED_OUT
            else:
                code = QueueCode.NO_CAPACITY
            if short is None:  # every resource has room for it somewhere: its value lost to the rent
                short = self._price_shortfall(j, rnd, table)
        return Queued(jid, code, render(code, short, specs[j].workload.unit), short)

    def _interference_shortfall(
        self, j: int, board: Board, table: EpochTable, specs: tuple[JobSpec, ...], utilization: float, cluster: Cluster, room: Room
    ) -> Shortfall | None:
        """The best pairing IAC allows job j at its smallest configuration: the side furthest above its
        tolerance there (``need`` the tolerance, ``free`` the predicted slowdown), or None if no GPU with
        a partner has room for it."""
        if isinstance(self.predictor, NoInterference):
            return None
        k = int(np.argmin(np.where(table.valid[j], table.mem[j], np.inf)))
        d = _demand(table, j, k)
        fits = (room.model == d.model) & (room.free[Binding.GPU_SLOT] >= 1)
        for r, need in ((Binding.GPU_MEMORY, d.mem), (Binding.SM, d.sm), (Binding.CPU, d.cpu), (Binding.HOST_MEMORY, d.host)):
            fits &= room.free[r] >= need - 1e-6
        shared = [g for g in np.flatnonzero(fits).tolist() if board.occ[g]][:64]
        if not shared:
            return None
        memo, tolerances, gpu_mem = self._memo(), self._tolerances(table, specs, utilization), self._gpu_mem(cluster)
        best: tuple[float, float, float, int] | None = None  # excess, tau, slowdown, GPU
        for g in shared:
            partners = [(p, board.where[p][0]) for p in board.occ[g]]
            rows = [(j, k, p, kp) for p, kp in partners] + [(p, kp, j, k) for p, kp in partners]
            s = np.maximum(memo.slowdowns(table, rows, [gpu_mem[g]] * len(rows)), 1.0)
            n = len(partners)
            sides = np.concatenate([[1.0 + float((s[:n] - 1.0).sum())], s[n:]])
            taus = tolerances.of([(j, k), *partners])
            worst = int(np.argmax(sides - taus))
            excess = float(sides[worst] - taus[worst])
            if best is None or excess < best[0]:
                best = (excess, float(taus[worst]), float(sides[worst]), g)
        assert best is not None
        return Shortfall(Binding.INTERFERENCE, best[1], best[2], board.gpu_ids[best[3]])

    @staticmethod
    def _price_shortfall(j: int, rnd: _Round, table: EpochTable) -> Shortfall:
        """Room exists, but at the round's prices its best configuration costs more rent than it is worth."""
        score = np.where(table.valid[j], rnd.score[j], np.inf)
        k = int(np.argmin(score))
        worth = float(table.weight[j] - (score[k] - rnd.rents[j, k]))  # value - switch - Gamma of Eq. 7
        return Shortfall(Binding.PRICE, float(rnd.rents[j, k]), worth, None)


def reserve(
    capacity: np.ndarray, reserve_unit: np.ndarray, waiting: set[int], gamma: float, running_floor: np.ndarray
) -> np.ndarray:
    """Eq. 12: C_eff = C - gamma x sum over the waiting jobs of R_min, per good.

    Never below what the running jobs need at their smallest: they cannot be priced out, so a capacity
    under that would make prices climb every epoch without clearing.
    """
    cap = capacity - gamma * reserve_unit[sorted(waiting)].sum(axis=0) if waiting else capacity
    return np.maximum(np.maximum(cap, running_floor), 0.0)


def penalise(
    violations: list[tuple[int, int, int, float, float, float, float]],
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
    for a, b, _g, sa, sb, ta, tb in violations:
        for j, s, tau in ((a, sa, ta), (b, sb, tb)):
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


def _nearest_options(table: EpochTable, j: int) -> list[int]:
    """The configurations a shortfall is measured at: the least of each resource (GPU memory first)."""
    out: list[int] = []
    for col in (table.mem, table.host, table.cpu, table.sm, table.dp):
        k = int(np.argmin(np.where(table.valid[j], col[j], np.inf)))
        if k not in out:
            out.append(k)
    return out


def _demand(table: EpochTable, j: int, k: int) -> Demand:
    return Demand(
        float(table.mem[j, k]), float(table.sm[j, k]), float(table.cpu[j, k]), float(table.host[j, k]),
        int(table.dp[j, k]), int(table.model[j, k]), int(table.dp[j, k]) > 1 and TP_KNOB in table.sets[j].knobs[k],
    )
