"""ElastiCo: the production ``Planner`` (Algorithm 1) driven through the Policy interface, and its ablations.

Every epoch the policy hands the planner all jobs that have arrived and not finished, the running
ones' current configurations and GPUs, last epoch's prices (warm start) and the jobs left waiting last
epoch (Eq. 12's queue); it returns the plan's placements as the decision and carries the prices and
the waiting set forward in ``Decision.state``. The ablations of §5.3 are parameters:

* ``rst=False`` (w/o RST): every job's knob space is narrowed to its default configuration (the
  data-parallel degree it asked for), so the planner can only admit, place and co-locate.
* ``iac=False`` (w/o IAC): the planner gets ``NoInterference``: it co-locates on capacity alone while
  the ground truth still interferes.
* ``pds=False`` (w/o PDS): no queue-aware reservation (``reserve_gamma = 0``) and no coordinated
  reconfiguration: a running job's knob space is narrowed to its current configuration and moving it
  costs more than any gain (``migration_cost = 1e3``), so decisions only add jobs around what runs.
  The ESP<->IAC rounds stay (they belong to ESP and IAC).
* w/o ESP is a different policy (``greedy``).

Memory safety: the planner packs against a device less ``M_sys + memory_margin_mib`` (the margin
absorbs the difference between estimated and real footprints). When a job still crashes out of
memory, its space is narrowed below the crashed configuration (smaller micro-batch for training,
smaller gpu_memory_utilization for vLLM); after ``max_oom_narrowing`` crashes, or when the narrowed
space cannot reach the job's floor, it falls back to its default configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from elastico_core.iac.predictor import NoInterference
from elastico_core.iac.thresholds import ThresholdConfig
from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec, narrow_space
from elastico_core.model.knobs import Knobs, KnobSpec
from elastico_core.model.plan import Plan, Prices
from elastico_core.model.state import Assignment
from elastico_core.pds.planner import Planner, PlannerConfig, PlanningInput
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobView, PolicyContext, PolicyKind

SHRINK_KNOB = {"train": "micro_batch", "infer": "gpu_memory_utilization"}


@dataclass(frozen=True, slots=True)
class ElasticoConfig:
    rst: bool = True
    iac: bool = True
    pds: bool = True
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    memory_margin_mib: int = 1024
    max_oom_narrowing: int = 3


@dataclass(frozen=True, slots=True)
class ElasticoState:
    """What one epoch hands the next: the shadow prices and who was left waiting."""

    prices: Prices | None = None
    waiting: frozenset[str] = frozenset()


def tuned_planner() -> PlannerConfig:
    """The planner settings the simulator's ElastiCo uses (the only tuned policy; see docs).

    * ``local_search_evals=0``: on paper-mix at 64 GPUs the pair local search (stage 6) changed average
      JCT by < 2 % but multiplied reconfigurations by 4-5x and planning time by 4-10x;
    * ``tau_default=1.5`` (decay >= 0.67 tolerated, still capped by T/L so floors hold): with 1.25 most
      co-locations the contention model allows end in post-hoc splits of violating pairs; 1.5 halves
      planning time and cuts switches ~20x at the same JCT. (Figures: docs/simulator.md.)
    """
    return PlannerConfig(local_search_evals=0, thresholds=ThresholdConfig(tau_default=1.5))


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
    def preset(cls, kind: PolicyKind, ctx: PolicyContext, planner: PlannerConfig | None = None) -> ElasticoPolicy:
        base = ElasticoConfig(planner=planner or tuned_planner())
        variants = {
            PolicyKind.ELASTICO: base,
            PolicyKind.ELASTICO_NO_RST: replace(base, rst=False),
            PolicyKind.ELASTICO_NO_IAC: replace(base, iac=False),
            PolicyKind.ELASTICO_NO_PDS: replace(base, pds=False),
        }
        return cls(ctx, variants[kind], kind)

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            cfg = self.config.planner
            if not self.config.pds:
                cfg = replace(cfg, reserve_gamma=0.0, migration_cost=1e3)
            predictor = self.context.predictor if self.config.iac else NoInterference()
            self._planner = Planner(self.context.store, predictor, cfg)
        return self._planner

    def planning_cluster(self, cluster: Cluster) -> Cluster:
        if self._cluster is None or self._cluster[0] is not cluster:
            self._cluster = (cluster, replace(cluster, m_sys_mib=cluster.m_sys_mib + self.config.memory_margin_mib))
        return self._cluster[1]

    def spec_for(self, job: JobView, cluster: Cluster) -> JobSpec:
        """The JobSpec the planner sees (same object across epochs, so its option cache holds).

        ``cluster``: the planning cluster, on which a space narrowed after an out-of-memory crash must
        still reach the job's floor (else the job falls back to its default configuration).
        """
        spec = job.spec
        if not self.config.rst:
            spec = self._narrowed(spec, "default", job.default_knobs)
        elif job.oom_knobs:
            spec = self._after_oom(spec, job, cluster)
        if not self.config.pds and job.knobs is not None:
            spec = self._narrowed(spec, ("current", job.knobs), job.knobs)
        return spec

    def _narrowed(self, spec: JobSpec, tag: object, knobs: Knobs) -> JobSpec:
        key = (spec.id, (tag, spec.knob_space))
        hit = self._specs.get(key)
        if hit is None:
            hit = replace(spec, knob_space=narrow_space(spec.workload, knobs.as_dict(), spec.max_gpus))
            self._specs[key] = hit
        return hit

    def _after_oom(self, spec: JobSpec, job: JobView, cluster: Cluster) -> JobSpec:
        """The space below the crashed configurations' shrink knob; the default configuration after
        ``max_oom_narrowing`` crashes, or when the narrowed space cannot reach the floor (a two-GPU
        job narrowed to small micro-batches would otherwise wait forever as floor-unreachable)."""
        if len(job.oom_knobs) > self.config.max_oom_narrowing:
            return self._narrowed(spec, "default", job.default_knobs)
        key = (spec.id, ("oom", job.oom_knobs))
        hit = self._specs.get(key)
        if hit is not None:
            return hit
        knob = SHRINK_KNOB[spec.kind.value]
        limit = min(float(k[knob]) for k in job.oom_knobs if knob in k)  # type: ignore[arg-type]
        space: list[KnobSpec] = []
        for s in spec.knob_space:
            if s.name == knob:
                smaller = tuple(v for v in s.values if float(v) < limit)  # type: ignore[arg-type]
                s = s.restricted(smaller or (s.values[0],))
            space.append(s)
        hit = replace(spec, knob_space=tuple(space))
        if self.planner.compiler(cluster).options(hit).problem is not None:
            hit = self._narrowed(spec, "default", job.default_knobs)
        self._specs[key] = hit
        return hit

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        state = snapshot.state if isinstance(snapshot.state, ElasticoState) else ElasticoState()
        jobs = snapshot.jobs
        cluster = self.planning_cluster(snapshot.cluster)
        specs = tuple([self.spec_for(j, cluster) for j in jobs])
        running = snapshot.running()
        inp = PlanningInput(cluster, specs, running=running, prices=state.prices, waiting=state.waiting)
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
        waiting = frozenset([q.job_id for q in plan.queued])
        return Decision(assignments, ElasticoState(plan.prices, waiting), plan.notes)
