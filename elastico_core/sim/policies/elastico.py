"""ElastiCo: the production ``Planner`` (Algorithm 1) driven through the Policy interface, and its ablations.

Every epoch the policy hands the planner all jobs that have arrived and not finished, the running
ones' current configurations and GPUs, last epoch's prices (warm start), the jobs left waiting last
epoch (Eq. 12's queue) and, on a cluster with queues, the jobs owed lent quota; it returns the plan's
placements as the decision and carries the prices, the waiting set and the owed jobs forward in
``Decision.state``. The ablations of §5.3 are parameters:

* ``rst=False`` (w/o RST): every job's knob space is narrowed to its default configuration (the
  data-parallel degree it asked for), so the planner can only admit, place and co-locate.
* ``iac=False`` (w/o IAC): the planner gets ``NoInterference``: it co-locates on capacity alone while
  the ground truth still interferes.
* ``pds=False`` (w/o PDS): no queue-aware reservation (``reserve_gamma = 0``) and no coordinated
  reconfiguration: a running job's knob space is narrowed to its current configuration and moving it
  costs more than any gain (``migration_cost = 1e3``), so decisions only add jobs around what runs.
  The ESP<->IAC rounds stay (they belong to ESP and IAC).
* w/o ESP is a different policy (``greedy``).

The rules are the controller's (``pds.rules.ElasticoRules``, ``PRODUCTION`` by default): the same
planner settings, the memory margin (the planner packs against a device less ``M_sys + margin``) and
the same OOM rule (the box below each crashed configuration, the default configuration when the box
misses the floor); ``elastico simulate rules`` runs the named variants. One difference is forced by the
simulator, which has no failed state: a job the controller would give up on (``max_oom_kills`` kills,
or nothing lower to try) runs at its default configuration instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from elastico_core.iac.predictor import NoInterference, SlowdownPredictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec, narrow_space
from elastico_core.model.knobs import Knobs
from elastico_core.model.plan import Plan, Prices
from elastico_core.model.planning import PlanningInput
from elastico_core.model.state import Assignment
from elastico_core.pds.planner import Planner
from elastico_core.pds.rules import BOUNDED, PRODUCTION, ElasticoRules, Limits, OomStep, apply_limits, merge_limits
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobView, PolicyContext, PolicyKind
from elastico_core.sim.profiles import ProfileBook


@dataclass(frozen=True, slots=True)
class ElasticoConfig:
    """Which parts of ElastiCo run (the ablations) and by which rules."""

    rst: bool = True
    iac: bool = True
    pds: bool = True
    rules: ElasticoRules = PRODUCTION


@dataclass(frozen=True, slots=True)
class ElasticoState:
    """What one epoch hands the next: the shadow prices and who was left waiting."""

    prices: Prices | None = None
    waiting: frozenset[str] = frozenset()
    owed: Mapping[str, int] = field(default_factory=dict)  # with queues: jobs owed lent quota, for how many epochs


@dataclass
class ElasticoPolicy:
    context: PolicyContext
    config: ElasticoConfig = ElasticoConfig()
    kind: PolicyKind = PolicyKind.ELASTICO
    event_driven: bool = False  # warm-started prices and Eq. 12's queue evolve between epochs
    _planner: Planner | None = field(default=None, repr=False)
    _cluster: tuple[Cluster, Cluster] | None = field(default=None, repr=False)
    _specs: dict[tuple[str, object], JobSpec] = field(default_factory=dict, repr=False)
    last_timing_ms: dict[str, float] = field(default_factory=dict, repr=False)
    # called with every epoch's planner input and plan (the replay benchmark records a window of them)
    observer: Callable[[PlanningInput, Plan], None] | None = field(default=None, repr=False)

    @classmethod
    def preset(cls, kind: PolicyKind, ctx: PolicyContext, rules: ElasticoRules | None = None) -> ElasticoPolicy:
        base = ElasticoConfig(rules=rules or PRODUCTION)
        variants = {
            PolicyKind.ELASTICO: base,
            PolicyKind.ELASTICO_BOUNDED: replace(base, rules=rules or BOUNDED),
            PolicyKind.ELASTICO_NO_RST: replace(base, rst=False),
            PolicyKind.ELASTICO_NO_IAC: replace(base, iac=False),
            PolicyKind.ELASTICO_NO_PDS: replace(base, pds=False),
        }
        return cls(ctx, variants[kind], kind)

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            cfg = self.config.rules.planner
            if not self.config.pds:
                cfg = replace(cfg, reserve_gamma=0.0, migration_cost=1e3)
            predictor = self.context.predictor if self.config.iac else NoInterference()
            self._planner = Planner(self.context.store, self.config.rules.iac_view(predictor), cfg)
        return self._planner

    def use_predictor(self, predictor: SlowdownPredictor) -> None:
        """Plan with ``predictor`` from the next epoch on (a newly promoted champion, as the controller does).

        Prices and the waiting set travel in ``Decision.state``, and the planner drops its pair memo
        and its last plan with the old predictor, so nothing planned with the old model is reused.
        """
        self.context = replace(self.context, predictor=predictor)
        if self._planner is not None and self.config.iac:
            self._planner.predictor = self.config.rules.iac_view(predictor)

    def planning_cluster(self, cluster: Cluster) -> Cluster:
        if self._cluster is None or self._cluster[0] is not cluster:
            self._cluster = (cluster, self.config.rules.planning_cluster(cluster))
        return self._cluster[1]

    def spec_for(self, job: JobView, cluster: Cluster, book: ProfileBook | None = None) -> JobSpec:
        """The JobSpec the planner sees (same object across epochs, so its option cache holds).

        ``cluster``: the planning cluster, on which a space narrowed after an out-of-memory crash must
        still reach the job's floor (else the job falls back to its default configuration). ``book``: the
        profiles by which the job's work is estimated (``_estimated``); None keeps the trace's work.
        """
        spec = job.spec if book is None else self._estimated(job, book)
        if not self.config.rst:
            spec = self._narrowed(spec, "default", job.default_knobs)
        elif job.oom_knobs:
            spec = self._after_oom(spec, job, cluster)
        if not self.config.pds and job.knobs is not None:
            spec = self._narrowed(spec, ("current", job.knobs), job.knobs)
        return spec

    def _estimated(self, job: JobView, book: ProfileBook) -> JobSpec:
        """The job with the work the planner may know: the runtime estimate every policy sees (Lucid-like
        orders its queue by it) at the default configuration's throughput, not the trace's exact work.
        ``JobSpec.work`` sizes the job's weight (``pds.job_size``), as a user's declared work does."""
        spec = job.spec
        if not math.isfinite(spec.work):
            return spec
        key = (spec.id, "estimate")
        hit = self._specs.get(key)
        if hit is None:
            prof = book.profile(spec.workload, job.default_knobs)
            hit = spec if prof is None else replace(spec, work=max(job.estimated_duration_s, 1.0) * prof.throughput)
            self._specs[key] = hit
        return hit

    def _narrowed(self, spec: JobSpec, tag: object, knobs: Knobs) -> JobSpec:
        key = (spec.id, (tag, spec.knob_space))
        hit = self._specs.get(key)
        if hit is None:
            hit = replace(spec, knob_space=narrow_space(spec.workload, knobs.as_dict(), spec.max_gpus))
            self._specs[key] = hit
        return hit

    def _after_oom(self, spec: JobSpec, job: JobView, cluster: Cluster) -> JobSpec:
        """The controller's OOM rule applied to each crashed configuration in turn (``ElasticoRules.after_oom``)."""
        key = (spec.id, ("oom", job.oom_knobs, spec.knob_space))
        hit = self._specs.get(key)
        if hit is not None:
            return hit
        compiler = self.planner.compiler(cluster)
        model = cluster.gpu_models()[0]

        def mem_of(knobs: Knobs) -> float | None:
            p = self.context.store.lookup(spec.workload, knobs, model)
            return None if p is None else p.resources.gpu_mem_mib

        limits: Limits | None = None
        hit = spec
        for kills, failed in enumerate(job.oom_knobs, start=1):
            out = self.config.rules.after_oom(
                hit, failed, kills, mem_of(failed) or 0.0, mem_of, lambda s: compiler.options(s).problem is None
            )
            if out.step is OomStep.GIVE_UP or out.limits is None:  # no failed state here: run as asked
                hit = self._narrowed(spec, "default", job.default_knobs)
                break
            limits = merge_limits(limits, out.limits) if out.step is OomStep.NARROW else out.limits
            hit = apply_limits(spec, limits)
        self._specs[key] = hit
        return hit

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        state = snapshot.state if isinstance(snapshot.state, ElasticoState) else ElasticoState()
        jobs = snapshot.jobs
        cluster = self.planning_cluster(snapshot.cluster)
        specs = tuple([self.spec_for(j, cluster, snapshot.profiles) for j in jobs])
        running = snapshot.running()
        inp = PlanningInput(cluster, specs, running=running, prices=state.prices, waiting=state.waiting, owed=state.owed)
        plan = self.planner.plan(inp)
        if self.observer is not None:
            self.observer(inp, plan)
        self.last_timing_ms = dict(self.planner.last_timing_ms)
        # a job kept as it runs gets its current Assignment back (the simulator then skips it at once)
        get = running.get
        assignments = tuple([
            cur if (cur := get(p.job_id)) is not None and cur.knobs is p.knobs and cur.gpus == p.gpus
            else Assignment(p.job_id, p.knobs, p.gpus)
            for p in plan.placements
        ])
        waiting = frozenset(plan.queued_ids)  # who waits; their reasons are never derived here
        return Decision(assignments, ElasticoState(plan.prices, waiting, plan.owed), plan.notes)
