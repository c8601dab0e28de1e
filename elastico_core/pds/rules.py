"""ElastiCo's rules: the planner settings, the memory margin and what an out-of-memory kill does, in one value.

The controller and the simulator's ElastiCo policy both take an ``ElasticoRules``; by default both take
``PRODUCTION`` (every field's default), so every simulated figure of ``elastico`` is a figure of what a
user deploys. Each differently tuned variant has its own name (``VARIANTS``), and the rules sweep
(``elastico simulate rules``) measures each against production.

After an OOM kill at configuration ``c`` that really needed ``M`` MiB per GPU, the job's space becomes a
*box below c*: one knob ``k`` is restricted to the values whose one-step move from ``c`` is predicted to
need strictly less than ``M``, and every other knob to the values predicted to need at most ``M`` (its
value in ``c`` always stays allowed). Under the estimators' per-knob monotone memory model every
configuration in the box needs less memory than ``c``, and ``c`` itself is never in it. Among the knobs
that admit such a cut, the one keeping the most configurations wins (ties: the smallest memory cut, to
keep throughput). Limits only shrink, so a job is killed at most ``|space| - 1`` times; after
``max_oom_kills`` kills, or when nothing in its space needs less memory, the job is given up on. When
the box cannot reach the job's throughput floor, the job falls back to its default configuration (a
two-GPU job narrowed to small micro-batches would otherwise wait forever as floor-unreachable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.iac.thresholds import ThresholdConfig
from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs, KnobValue
from elastico_core.pds.job_size import SizeWeights
from elastico_core.pds.oom import Limits, apply_limits, lower_memory_limits, merge_limits
from elastico_core.pds.planner import PlannerConfig

__all__ = [
    "BOUNDED", "LEARNING_VARIANTS", "PRODUCTION", "VARIANTS", "ElasticoRules", "Limits", "OomOutcome", "OomStep", "apply_limits", "merge_limits", "variant",
]


class OomStep(StrEnum):
    NARROW = "narrow"  # plan it again inside the box below the crashed configuration
    DEFAULT = "default"  # the box misses its floor: back to the configuration it asked for
    GIVE_UP = "give-up"  # too many kills, or nothing needs less memory: fail it


@dataclass(frozen=True, slots=True)
class OomOutcome:
    """What one OOM kill does to a job: the step, its knob limits from now on, and why (one line)."""

    step: OomStep
    limits: Limits | None
    why: str


@dataclass(frozen=True, slots=True)
class ElasticoRules:
    """Every setting that decides what ElastiCo plans, shared by the controller and the simulator."""

    planner: PlannerConfig = field(default_factory=PlannerConfig, metadata={"help": "Algorithm 1's own settings"})
    memory_margin_mib: float = field(
        default=1024.0, metadata={"help": "planned against each GPU less M_sys and this (beyond the cluster's own M_sys)"}
    )
    max_oom_kills: int = field(default=3, metadata={"help": "OOM kills after which a job is given up on"})
    iac_bound: float | None = field(default=None, metadata={
        "help": "plan pairs by IAC's calibrated upper bound at this coverage level (e.g. 0.9) instead of its point "
                "estimate, where the predictor has one: the tolerance check then holds with that probability"})

    explore_cold: float | None = field(default=1.2, metadata={
        "help": "plan a pair whose workload the interference model never saw as if it slowed each side by this "
                "(e.g. 1.2) instead of the model's cold-start answer, so that new workloads are co-located, measured "
                "and learned from (a learned factor model only)"})

    def iac_view(self, predictor: SlowdownPredictor) -> SlowdownPredictor:
        """What the planner asks for pair slowdowns: the predictor, or its upper bound under ``iac_bound``,
        with cold-start pairs answered by ``explore_cold`` where the predictor can tell them.

        The hook of both rules: tolerance checks (and the slowdowns a plan records) use the bound wherever
        the predictor is a learned model calibrated with one, and the assumption wherever it is a factor
        model that never saw a side of the pair; any other predictor is used as is.
        """
        view = predictor
        if self.iac_bound is not None and callable(upper := getattr(predictor, "upper", None)):
            view = upper(self.iac_bound)
        if self.explore_cold is not None and callable(exploring := getattr(predictor, "exploring", None)):
            view = exploring(self.explore_cold, view)
        return view

    def cold_start_note(self, predictor: SlowdownPredictor, workloads: Iterable[str]) -> str | None:
        """One line naming the ``workloads`` whose pairs ``predictor`` (a learned factor model) cannot answer
        and these rules plan at ``explore_cold`` instead; None when there are none or nothing explores."""
        unseen = getattr(predictor, "unseen", None)
        if self.explore_cold is None or not callable(unseen):
            return None
        names = sorted(unseen(set(workloads)))
        if not names:
            return None
        return (f"interference model {predictor.name}: no measured pairs of {', '.join(names)}; their pairs are "
                f"planned at the cold-start assumption of {self.explore_cold:g}x until a retraining learns them")

    def planning_cluster(self, cluster: Cluster) -> Cluster:
        """The cluster as the planner sees it: every GPU smaller by the memory margin."""
        if not self.memory_margin_mib:
            return cluster
        return replace(cluster, m_sys_mib=cluster.m_sys_mib + int(self.memory_margin_mib))

    def after_oom(
        self,
        spec: JobSpec,
        failed: Knobs,
        kills: int,
        needed_mib: float,
        mem_of: Callable[[Knobs], float | None],
        reaches_floor: Callable[[JobSpec], bool],
    ) -> OomOutcome:
        """The rule for a job just OOM-killed at ``failed`` (its ``kills``-th kill), which needed ``needed_mib``.

        ``spec`` is its space before this kill (earlier limits applied); ``mem_of`` predicts a
        configuration's per-GPU memory (None: cannot run); ``reaches_floor`` says whether a space can
        still meet the job's floor on this cluster. The fallback is ``spec.default_knobs``: the
        configuration the job asked for, within what earlier kills left.
        """
        at = f"OOM-killed at {failed.short()} ({needed_mib:.0f} MiB per GPU)"
        if kills >= self.max_oom_kills:
            return OomOutcome(OomStep.GIVE_UP, None, f"{at}: {kills} OOM kills, giving up")
        limits = lower_memory_limits(spec, failed, needed_mib, mem_of)
        if limits is None:
            return OomOutcome(OomStep.GIVE_UP, None, f"{at}: no configuration in its space needs less memory")
        try:
            narrowed = apply_limits(spec, limits)
        except SpecError as exc:
            return OomOutcome(OomStep.GIVE_UP, None, f"{at}: {exc}")
        if reaches_floor(narrowed):
            text = ", ".join(f"{k} in {_show(v)}" for k, v in sorted(limits.items()))
            return OomOutcome(OomStep.NARROW, limits, f"{at}: knob space narrowed to {text}")
        default = spec.default_knobs
        if default == failed:
            return OomOutcome(OomStep.GIVE_UP, None, f"{at}: its default configuration, and nothing lower reaches its floor")
        fallback = {s.name: [default.get(s.name)] for s in spec.knob_space if s.name in default}
        return OomOutcome(OomStep.DEFAULT, fallback, f"{at}: nothing lower reaches its floor; back to its default configuration")  # type: ignore[arg-type]


def _show(values: Sequence[KnobValue]) -> str:
    return "[" + ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values) + "]"


# What the controller runs, and the simulator's ``elastico``: the defaults of every field (a
# ``Planner`` or ``ElasticoRules`` built without arguments plans the same way). Chosen by the rules
# sweep (``elastico simulate rules``, docs/simulator.md): at every load from 0.5 to 2x capacity no
# variant below beats it by more than the seed-to-seed noise.
PRODUCTION = ElasticoRules()
# Named variants, each PRODUCTION with one thing changed: what the sweep compares it against. None
# is used by the controller; ``elastico simulate rules --variants`` and ``bench planner --rules`` take
# them by name.
VARIANTS: Mapping[str, ElasticoRules] = MappingProxyType({
    "production": PRODUCTION,
    "margin-0": replace(PRODUCTION, memory_margin_mib=0.0),
    "margin-512m": replace(PRODUCTION, memory_margin_mib=512.0),
    "margin-2g": replace(PRODUCTION, memory_margin_mib=2048.0),
    "tau-1.25": replace(PRODUCTION, planner=replace(PRODUCTION.planner, thresholds=ThresholdConfig(tau_default=1.25))),
    "tau-2": replace(PRODUCTION, planner=replace(PRODUCTION.planner, thresholds=ThresholdConfig(tau_default=2.0))),
    "local-search": replace(PRODUCTION, planner=replace(PRODUCTION.planner, local_search_evals=4000)),
    "careful-packing": replace(PRODUCTION, planner=replace(PRODUCTION.planner, careful_packing=True)),
    "one-round": replace(PRODUCTION, planner=replace(PRODUCTION.planner, max_rounds=1)),
    "split-few": replace(PRODUCTION, planner=replace(PRODUCTION.planner, split_share=0.01)),
    "no-size": replace(PRODUCTION, planner=replace(PRODUCTION.planner, sizing=SizeWeights(exponent=0.0))),
    "size-0.25": replace(PRODUCTION, planner=replace(PRODUCTION.planner, sizing=SizeWeights(exponent=0.25))),
    "size-1": replace(PRODUCTION, planner=replace(PRODUCTION.planner, sizing=SizeWeights(exponent=1.0))),
    "no-preempt": replace(PRODUCTION, planner=replace(PRODUCTION.planner, preempt_outbid=None)),
    "preempt-0": replace(PRODUCTION, planner=replace(PRODUCTION.planner, preempt_outbid=0.0)),
    "preempt-1": replace(PRODUCTION, planner=replace(PRODUCTION.planner, preempt_outbid=1.0)),
    "oom-kills-1": replace(PRODUCTION, max_oom_kills=1),
    "oom-kills-6": replace(PRODUCTION, max_oom_kills=6),
    "no-explore": replace(PRODUCTION, explore_cold=None),
    "explore-1.0": replace(PRODUCTION, explore_cold=1.0),
    "explore-1.4": replace(PRODUCTION, explore_cold=1.4),
})


# The variants that plan differently only with a learned factor model (cold-start exploration): with any
# other predictor they plan as PRODUCTION does, so the rules sweep (contention model) leaves them out of
# ``all``; ``elastico simulate learn --rules`` compares them (docs/iac.md, *Cold-start exploration*).
LEARNING_VARIANTS = frozenset({"no-explore", "explore-1.0", "explore-1.4"})


def variant(name: str) -> ElasticoRules:
    """The rules named ``name`` (``production`` or a key of ``VARIANTS``); a one-line error otherwise."""
    if name not in VARIANTS:
        raise SpecError(f"unknown rules {name!r}; known: {', '.join(VARIANTS)}", field="rules")
    return VARIANTS[name]
# PRODUCTION planning pairs by IAC's calibrated 90 % upper bound (policy ``elastico-bounded``): a pair is
# admitted only if the bound, not the point estimate, stays within each side's tolerance
# (docs/iac.md, "Know how sure it is"). Needs a predictor with a bound (a registered model); reported
# beside PRODUCTION, never instead of it.
BOUNDED = replace(PRODUCTION, iac_bound=0.9)
