"""The Planner: one epoch of Algorithm 1 (reservation, ESP<->IAC rounds, bin-packing, admission).

Decisions on the paper's open points, made here:

* **Eq. 12's queue.** Q(t) is the set of pending jobs left waiting: in round 1 the jobs the caller
  says waited last epoch (``PlanningInput.waiting``), in round m > 1 the jobs round m-1 could not
  place. Reserving gamma x R_min for them raises prices, so running jobs shrink ahead of admissions.
* **Which jobs ESP sees.** Running and pending jobs together (Case 2: four simultaneous arrivals
  must be able to start together); running jobs can be reshaped but not priced out.
* **Penalties.** A violating pair adds alpha x w_j x (S_hat - tau_j) to Gamma_j(c_j) of each job
  above its threshold, and the pair is kept apart in later rounds' packing. After M rounds, any pair
  still in violation is split (one job moves or waits), so every placed job meets tau and its floor;
  with ``split_share`` (opt-in, variant ``split-few``) so are the pairs of a round that flagged at most
  that share of its placed jobs, instead of re-pricing and re-packing the whole cluster for a handful.
* **What BINPACK asks IAC.** Round 1 packs by capacity alone, as Alg. 1 does, except for the jobs that
  waited last epoch. A pending job IAC flagged in a round, and every job that waited, is packed from
  then on only where IAC admits it beside every partner (looking past the partners it would harm, then
  to empty GPUs). Kept apart from its first partner only, a flagged job went beside the next one it
  harmed: each round found a new violation, and the first 8 hours of a 512-GPU day spent 43 % of
  their planning time in such epochs (three rounds and a split). ``PlannerConfig.careful_packing``
  packs every pending job this way from round 1 (the sweep's ``careful-packing`` variant). Running
  jobs are not checked up front: their pairs were admitted, and a pair that turns bad (a new tau, a
  shrink) is what the rounds' penalties steer; a running pair IAC has kept apart is split by the
  packer itself, the less valuable job moving (left together, every round flagged it again until the
  final split).
* **Objective.** sum_j w_j T_j(c_j) / (T_j(c_max) S_hat_j) over placed jobs; the best round is kept.
"""

from __future__ import annotations

import gc
import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple, cast

import numpy as np

from elastico_core.esp.pricing import Market, TatonnementConfig
from elastico_core.iac.predictor import NoInterference, SlowdownPredictor
from elastico_core.iac.thresholds import ThresholdConfig
from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs
from elastico_core.model.plan import Binding, Plan, Prices, QueueCode, Queued, Shortfall
from elastico_core.model.planning import PlanningInput
from elastico_core.model.state import Assignment
from elastico_core.pds import quota_plan, quotas
from elastico_core.pds.actions import diff_actions
from elastico_core.pds.caches import JobEntry, PlannerCaches
from elastico_core.pds.epoch import (
    Clock,
    Epoch,
    Interference,
    PairViolation,
    Round,
    admit,
    assess,
    bin_pack,
    conclude,
    make_guard,
    price,
    repair,
)
from elastico_core.pds.interference import PairMemo, Tolerances
from elastico_core.pds.job_size import SizeWeights
from elastico_core.pds.options import EpochTable, OptionCompiler, OptionSet
from elastico_core.pds.shortfall import render
from elastico_core.rst.store import ProfileStore


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Knobs of the planner itself (every field is documented in the README's configuration table).

    The defaults are the production settings (``pds.rules.PRODUCTION`` holds one of these as it is):
    a ``Planner()`` built without a config plans as the controller does. Variants are named in
    ``pds.rules.VARIANTS`` and chosen by evidence (docs/simulator.md).
    """

    max_rounds: int = field(default=3, metadata={"help": "M of Alg. 1: ESP<->IAC rounds per epoch"})
    split_share: float | None = field(default=None, metadata={
        "help": "another ESP<->IAC round only when the pairs IAC flagged involve more than this share of the placed jobs; "
                "fewer are split where they stand, as after the last round (None: up to max_rounds rounds; variant split-few: 0.01)"})
    reserve_gamma: float = field(default=0.5, metadata={"help": "gamma of Eq. 12 (0 ignores the queue)"})
    switch_cost: float = field(default=0.04, metadata={"help": "gamma_0 of Eq. 7 for a checkpoint-resume, x w_j"})
    switch_weights: tuple[float, float, float] = field(
        default=(0.0, 0.4, 1.0), metadata={"help": "relative cost of flag toggle, engine restart, checkpoint-resume"}
    )
    migration_cost: float = field(default=0.08, metadata={"help": "extra score for moving a running job, x w_j"})
    penalty_alpha: float = field(default=1.0, metadata={"help": "alpha of Eq. 7's interference penalty"})
    sm_capacity: float = field(default=1.0, metadata={"help": "sum of SM shares allowed on one GPU"})
    local_search_evals: int = field(default=0, metadata={"help": "pair evaluations the opt-in local search may spend (0: off)"})
    cross_node_gangs: bool = field(default=True, metadata={"help": "data-parallel jobs may span nodes"})
    careful_packing: bool = field(
        default=False, metadata={"help": "pack every pending job only where IAC admits it from round 1 (else only those that waited)"}
    )
    sizing: SizeWeights = field(
        default_factory=SizeWeights, metadata={"help": "w_j scaled by the job's expected run time: shorter jobs first (pds/job_size.py)"}
    )
    preempt_outbid: float | None = field(default=0.3, metadata={
        "help": "a running job may be checkpointed for waiting jobs of its priority or higher when its configuration's "
                "rent exceeds its value by this times w_j (None: a running job is never stopped for a waiting one)"})
    tatonnement: TatonnementConfig = field(default_factory=TatonnementConfig)
    thresholds: ThresholdConfig = field(default_factory=ThresholdConfig)


_BY_ID = operator.attrgetter("id")


def set_aside(job_id: str, exc: BaseException) -> Queued:
    """The queue entry of a job whose planning raised: not its fault (its spec was validated), so it waits
    with a retriable reason instead of failing, and the other jobs are planned as if it were absent."""
    what = f"{type(exc).__name__}: {exc}"[:300]
    return Queued(job_id, QueueCode.SET_ASIDE, f"set aside: planning it raised {what}; retried every epoch")


def _queue_order(j: JobSpec) -> tuple[float, float, str]:
    return (-j.priority, j.submit_time_s, j.id)


def _by_size(entries: list[JobEntry]) -> list[JobEntry]:
    """The waiting jobs (after the running ones) ordered by priority, then size factor, then as they came
    (arrival order, as ``_queue_order`` sorted them): the queue order packing and the plan's queue follow."""
    first = next((i for i, e in enumerate(entries) if e.assignment is None), len(entries))
    waiting = entries[first:]
    if len(waiting) < 2 or all(e.size == waiting[0].size for e in waiting):
        return entries
    return entries[:first] + sorted(waiting, key=_size_order)


def _size_order(e: JobEntry) -> tuple[int, float]:
    return (-e.spec.priority, -e.size)


class _Fresh(NamedTuple):
    """A new or changed job's parts while its table rows are written (its ``JobEntry`` needs the slot)."""

    at: int  # its place in the epoch's entries
    spec: JobSpec
    assignment: Assignment | None
    options: OptionSet
    current: int
    gpus: tuple[int, ...]
    switch: np.ndarray | None
    slot: int  # its slot before this epoch, -1 if it has none
    size: float  # its weight's size factor (``SizeWeights``)


@dataclass(frozen=True, slots=True)
class Prepared:
    table: EpochTable
    specs: tuple[JobSpec, ...]
    queued: tuple[Queued, ...]
    current_gpus: dict[int, tuple[int, ...]]


class Planner:
    """Algorithm 1 over one cluster snapshot. Keeps only caches between calls (``pds/caches.py``)."""

    def __init__(
        self,
        store: ProfileStore,
        predictor: SlowdownPredictor | None = None,
        config: PlannerConfig | None = None,
    ) -> None:
        self.store = store
        self.predictor: SlowdownPredictor = predictor or NoInterference()
        self.config = config or PlannerConfig()
        self.caches = PlannerCaches(store)
        self.last_timing_ms: dict[str, float] = {}
        self._quota_layout: quotas.QuotaLayout | None = None  # the cluster's queues as arrays, kept per layout
        self._set_aside = False  # the last epoch set a job aside (known without deriving the queue's reasons)

    def compiler(self, cluster: Cluster) -> OptionCompiler:
        self._begin(cluster)
        return self.caches.compiler

    def _begin(self, cluster: Cluster) -> None:
        self.caches.begin(cluster, self.predictor, self.config, self.config.sm_capacity)

    def _memo(self) -> PairMemo:
        return self.caches.pairs_for(self.predictor)

    # ------------------------------------------------------------------------------------------
    def plan(self, inp: PlanningInput) -> Plan:
        """One epoch of Algorithm 1. ``last_timing_ms`` afterwards breaks its latency down by stage.

        An input equal to the previous call's gets the previous plan back (stage ``unchanged``).

        The cyclic garbage collector is paused for the epoch: the planner builds no reference cycles
        (reference counting frees everything it drops), and a full collection over a large planner
        heap would otherwise land in the middle of an epoch at random (tens of ms at 4,096 GPUs).
        """
        t0 = time.perf_counter()
        self._begin(inp.cluster)
        last = self.caches.last
        if last is not None and last[0] == inp:
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
        if not self._set_aside:  # a set-aside job is retried, not replayed
            self.caches.last = (inp, plan)
        return plan

    def _plan(self, inp: PlanningInput) -> Plan:
        """Algorithm 1, line by line (the steps live in ``pds/epoch.py``)."""
        clock = Clock()
        self._set_aside = False
        prep = self.prepare(inp)  # every job's options (RST), as one (J, K) table
        quota = None
        if inp.cluster.queues:  # teams' quotas: goods of the market, limits of every board (pds/quotas.py)
            quota, prep = quota_plan.begin(inp, prep, self.caches.layout, self.prepare, self._quota_layout)
            self._quota_layout = quota.lay
        clock.lap("prepare")
        if not prep.table.job_ids:
            queued = prep.queued
            return Plan((), tuple(q.job_id for q in queued), lambda: queued, partial(diff_actions, inp, (), queued),
                        inp.prices or Prices(), (), 0.0)
        ep = self._epoch(inp, prep, quota)  # the market, Eq. 7's base score, Gamma = 0 (l. 2), Q(t)
        clock.lap("market")
        rounds: list[Round] = []
        for m in range(1, self.config.max_rounds + 1):  # l. 3
            dual = price(ep)  # l. 1 and 4: C_eff of Eq. 12, tâtonnement
            clock.lap("esp")
            score, rents = ep.score(dual.prices)  # l. 5-7: Score_j(c; lambda*)
            clock.lap("scores")
            board, unplaced = bin_pack(ep, dual.choice, score, clock)  # l. 8
            slowdown, violations = assess(ep, board)  # l. 9-16: IAC on every shared GPU
            clock.lap("iac")
            rounds.append(conclude(ep, m, dual, board, unplaced, score, rents, slowdown, violations))  # l. 13-14
            if not violations:  # l. 17-19
                break
            if self._few(violations, len(board.where)):  # a full re-pricing and re-packing for a handful of pairs: split them
                break
            ep.waiting = set(unplaced)  # Q(t) of the next round: what this one could not place
            clock.lap("rounds")
        best, notes = repair(ep, rounds)  # the best clean round, or the last one split
        best.board.check()
        clock.lap("repair")
        plan = admit(ep, best, rounds, notes)  # l. 21-23: placements, queue, prices
        if quota is not None:
            plan = quota_plan.finish(quota, best.board, plan, inp)  # why jobs wait for quota, who is owed
        clock.lap("actions")
        self.last_timing_ms = clock.as_ms()
        return plan

    def _few(self, violations: list[PairViolation], placed: int) -> bool:
        """Too few flagged pairs to pay for another round (``PlannerConfig.split_share``, opt-in).

        A round re-prices and re-packs the whole cluster; at 20,000 jobs on 8,192 GPUs the first round flags a
        few dozen of 15,000 placed jobs, and later rounds moved the objective by under 0.1 % at three times the
        cost. The split (``epoch.repair``) moves or queues one job of each pair where it stands; the jobs it
        queues wait, and a 512-GPU day then reshapes and preempts about 30 % more (docs/planner.md)."""
        share = self.config.split_share
        return share is not None and len({j for v in violations for j in (v.a, v.b)}) <= share * placed

    def _epoch(self, inp: PlanningInput, prep: Prepared, quota: quotas.QuotaEpoch | None = None) -> Epoch:
        """The epoch's fixed data: market, base score of Eq. 7, reservation units, IAC's view."""
        cfg, caches, table = self.config, self.caches, prep.table
        totals = caches.totals
        market = Market.of(totals=totals, demands=table, sm_capacity=cfg.sm_capacity,
                           extra=None if quota is None else quota.goods())
        weights = table.weight
        reserve_unit = self._min_usage(market, table)
        pending_order = np.flatnonzero(~table.running).tolist()
        ids = table.job_ids
        waiting = {j for j in pending_order if ids[j] in inp.waiting} if inp.waiting else set()
        iac = None
        if not isinstance(self.predictor, NoInterference):
            utilization = inp.utilization if inp.utilization is not None else self._pressure(table, totals.usable, totals.gpus_per_model)
            iac = Interference(caches.pairs, Tolerances(table, prep.specs, utilization, cfg.thresholds), caches.gpu_mem)
        return Epoch(
            inp=inp,
            cfg=cfg,
            table=table,
            specs=prep.specs,
            queued=list(prep.queued),
            current_gpus=prep.current_gpus,
            layout=caches.layout,
            caches=caches,
            market=market,
            base=weights[:, None] - table.value + table.switch,
            none_score=self._none_score(prep, table, quota is not None),
            prices=self._initial_prices(market, inp.prices),
            reserve_unit=reserve_unit,
            running_floor=reserve_unit[table.running].sum(axis=0) if table.running.any() else np.zeros(len(market.goods)),
            migration=np.where(table.running, cfg.migration_cost * weights, 0.0),
            pending_order=pending_order,
            iac=iac,
            guard=None if iac is None else make_guard(table, iac),
            waiting=waiting,
            careful=set(pending_order if cfg.careful_packing else waiting),  # placed only where IAC admits them
            quota=quota,
        )

    def _none_score(self, prep: Prepared, table: EpochTable, queues: bool) -> np.ndarray:
        """The score of not running (Eq. 7): w_j for a waiting job; for a running one inf, or, under
        ``preempt_outbid`` P, (1 + P) w_j where some waiting job has its priority or a higher one: ESP stops
        it only when the rent of its configuration exceeds its value by more than P w_j."""
        weights = table.weight
        out = np.where(table.running, np.inf, weights)
        outbid = self.config.preempt_outbid
        if outbid is None or queues or not table.running.any() or table.running.all():  # queues: only reclaim preempts
            return out
        prio = np.array([s.priority for s in prep.specs], dtype=float)
        top = prio[~table.running].max()
        stoppable = table.running & (prio <= top)
        return np.where(stoppable, (1.0 + outbid) * weights, out)

    def prepare(self, inp: PlanningInput) -> Prepared:
        """Compile every job's options into the epoch table (shared with the MILP reference)."""
        cluster = inp.cluster
        self._begin(cluster)
        compiler, layout = self.caches.compiler, self.caches.layout
        model_ix = layout.model_index
        gpu_ix = layout.gpu_index
        queued: list[Queued] = []
        running = inp.running
        running_order = sorted([j for j in inp.jobs if j.id in running], key=_BY_ID)
        pending = sorted([j for j in inp.jobs if j.id not in running], key=_queue_order)
        cache, rows = self.caches.jobs, self.caches.rows
        # a changed job's entry is built once its rows are written (its slot is part of it): until then
        # its place in ``entries`` holds None and its parts wait in ``fresh``
        entries: list[JobEntry | None] = []
        fresh: list[_Fresh] = []
        for job in (*running_order, *pending):
            jid = job.id
            a = running.get(jid)
            entry = cache.get(jid)
            if entry is None or entry.spec is not job or (entry.assignment is not a and entry.assignment != a):
                known = entry.options if entry is not None and entry.spec is job else None
                try:
                    opts, cur, gidx, sw, problem = self._prepare_job(job, a, compiler, cluster, gpu_ix, model_ix, known)
                    size = self.config.sizing.factor(job.work, opts.best_throughput)
                except Exception as exc:  # one job's data must never stop the epoch: set it aside, retry next epoch
                    queued.append(set_aside(jid, exc))  # not cached: the next epoch tries it afresh
                    self._set_aside = True
                    continue
                slot = entry.slot if entry else -1
                if problem is not None:  # never in the table: its rows are not (re)written
                    cache[jid] = JobEntry(job, a, opts, cur, gidx, sw, problem, slot, size)
                    queued.append(problem)
                    continue
                fresh.append(_Fresh(len(entries), job, a, opts, cur, gidx, sw, slot, size))
                entries.append(None)
                continue
            if entry.problem is not None:
                queued.append(entry.problem)
                continue
            entries.append(entry)
        if fresh:  # new or changed jobs: their rows written in one pass per column
            written = rows.put_many([(f.slot, f.options, f.spec.weight * f.size, f.current, f.switch) for f in fresh])
            for f, slot in zip(fresh, written, strict=True):
                entries[f.at] = cache[f.spec.id] = JobEntry(f.spec, f.assignment, f.options, f.current, f.gpus, f.switch, None, slot,
                                                            f.size)
        prepared = _by_size(cast(list[JobEntry], entries))  # every None replaced above
        if len(cache) > 2 * len(inp.jobs) + 1024:  # forget jobs that left the planner's view
            in_view = {j.id for j in inp.jobs}
            for jid in [x for x in cache if x not in in_view]:
                slot = cache.pop(jid).slot
                if slot >= 0:
                    rows.release(slot)
        specs = [e.spec for e in prepared]
        current_gpus = {j: e.gpus for j, e in enumerate(prepared) if e.assignment is not None}
        slots = np.array([e.slot for e in prepared], dtype=np.intp)
        table = rows.table(slots, [s.id for s in specs], [e.options for e in prepared])
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
        """gamma_0 x (weight of the costliest knob that changes) for every option (Eq. 7), per unit of w_j:
        the job's row scales it by its weight (``RowStore.put_many``), as it scales the value."""
        hit = self.caches.worst.get((id(opts), knobs))
        if hit is not None and hit[0] is opts:
            worst = hit[1]
        else:
            w = self.config.switch_weights
            kinds = {s.name: s.change for s in job.knob_space}
            weights = np.array([w[kinds[n].value] if n in kinds else w[-1] for n in opts.knob_names])
            if not len(weights):
                return np.zeros(len(opts))
            worst = (opts.changed_knobs(knobs) * weights[None, :]).max(axis=1)
            if len(self.caches.worst) >= 65536:
                self.caches.worst.clear()
            self.caches.worst[(id(opts), knobs)] = (opts, worst)
        return self.config.switch_cost * worst

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
