"""The rules sweep: production rules against each named variant, over loads and seeds (``simulate rules``).

PRODUCTION (``pds.rules``) is chosen by this evidence. For every load (the paper-mix arrival rate, or
the share of a Philly window's GPU-hours, as a multiple of the cluster's capacity) and every seed, one
trace is drawn and replayed through Volcano-like (the reference of the paper's tables) and through
ElastiCo under each rule set, with the same ground truth. Per load and variant the summary gives:

* the average JCT and throughput as geometric means over seeds of the per-seed ratios, to
  Volcano-like and to production (both saw the same trace on a seed);
* the noise: a 95 % confidence interval of the mean log ratio to production across seeds (Student's t),
  so "better than production beyond noise" means the whole interval is on the better side;
* floor attainment, OOM kills, reshapes (configuration switches), migrations and the GPU-hours spent
  changing, as means over seeds: what a rule costs the users' jobs besides JCT.

A task is one (load, seed): the trace is built once and every policy runs on it, so tasks are independent
and ``workers`` of them run at once in spawned processes (the figures do not depend on the count).
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elastico_core.model.errors import SpecError
from elastico_core.pds.rules import VARIANTS
from elastico_core.rst.store import ProfileStore
from elastico_core.sim import BUILTIN, PHILLY
from elastico_core.sim.metrics import PolicyMetrics, summarize
from elastico_core.sim.paper_mix import PaperMixConfig, paper_mix
from elastico_core.sim.policies.elastico import ElasticoConfig, ElasticoPolicy
from elastico_core.sim.policies.volcano import VolcanoPolicy
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.runner import cluster_for
from elastico_core.sim.simulator import SimConfig, simulate
from elastico_core.sim.trace import Trace
from elastico_core.sim.truth import ContentionPredictor, TruthKind, make_truth

REFERENCE = "volcano"
FIGURES = ("avg_jct_s", "throughput", "attainment", "oom_restarts", "switches", "migrations", "changing_gpu_h",
           "sched_latency_ms_p50", "wall_s", "preemptions", "median_jct_s", "p95_jct_s")


@dataclass(frozen=True, slots=True)
class SweepTask:
    """One (load, seed) of the sweep: what a worker process needs to build the trace and run every policy."""

    trace: str  # builtin:paper-mix or philly:PATH
    gpus: int
    load: float
    seed: int
    variants: tuple[str, ...]
    hours: float
    profiles: Path
    data_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class SweepCell:
    """The outcome of one task: each policy's figures (``volcano`` and every variant name)."""

    load: float
    seed: int
    jobs: int
    figures: Mapping[str, Mapping[str, float]]


def philly_sample(path: Path, load: float, gpus: int, hours: float, start_h: float | None = None) -> float:
    """The share of a Philly window's jobs that offers ``load`` x the cluster's GPU-hours (capped at 1)."""
    from elastico_core.sim.philly import DEFAULT_START_H, import_philly

    window = import_philly(path, hours=hours, start_h=DEFAULT_START_H if start_h is None else start_h)
    demand_h = sum(j.num_gpus * min(j.duration_s, hours * 3600.0) for j in window.jobs) / 3600.0
    if demand_h <= 0:
        raise SpecError(f"the Philly window holds no work: {path}", field="trace")
    return min(1.0, load * gpus * hours / demand_h)


def build_trace(task: SweepTask, store: ProfileStore) -> Trace:
    if task.trace == BUILTIN:
        return paper_mix(task.seed, PaperMixConfig(gpus=task.gpus, hours=task.hours, load=task.load), store=store,
                         data_dir=task.data_dir)
    if task.trace.startswith(PHILLY):
        from elastico_core.sim.philly import import_philly

        path = Path(task.trace[len(PHILLY):])
        sample = philly_sample(path, task.load, task.gpus, task.hours)
        return import_philly(path, seed=task.seed, hours=task.hours, sample=sample)
    raise SpecError(f"the rules sweep replays {BUILTIN} or {PHILLY}PATH, got {task.trace!r}", field="trace")


def _figures(m: PolicyMetrics) -> dict[str, float]:
    return {k: float(getattr(m, k)) for k in FIGURES}


def run_task(task: SweepTask) -> SweepCell:
    """Volcano-like and ElastiCo under every variant, on one trace with one ground truth per policy."""
    store = ProfileStore.open(task.profiles)
    trace = build_trace(task, store)
    cluster = cluster_for(task.gpus)
    ctx = PolicyContext(store, ContentionPredictor(), task.seed)
    config = SimConfig()
    out: dict[str, Mapping[str, float]] = {}
    policies: list[tuple[str, object]] = [(REFERENCE, VolcanoPolicy.from_context(ctx))]
    policies += [(v, ElasticoPolicy(ctx, ElasticoConfig(rules=VARIANTS[v]), PolicyKind.ELASTICO)) for v in task.variants]
    for name, policy in policies:
        result = simulate(trace, policy, cluster, task.seed, store=store, truth=make_truth(TruthKind.CONTENTION, task.seed),  # type: ignore[arg-type]
                          config=config)
        out[name] = _figures(summarize(result))
    return SweepCell(task.load, task.seed, len(trace), out)


def run_sweep(
    tasks: Sequence[SweepTask], workers: int = 1, done: Callable[[SweepCell], None] | None = None
) -> list[SweepCell]:
    """Every task, in the order given (``workers`` at once in spawned processes)."""
    for t in tasks:
        unknown = [v for v in t.variants if v not in VARIANTS]
        if unknown:
            raise SpecError(f"unknown rules {unknown}; known: {', '.join(VARIANTS)}", field="variants")
    if workers <= 1 or len(tasks) <= 1:
        cells = []
        for t in tasks:
            cells.append(run_task(t))
            if done:
                done(cells[-1])
        return cells
    got: dict[tuple[float, int], SweepCell] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=multiprocessing.get_context("spawn")) as pool:
        for fut in as_completed([pool.submit(run_task, t) for t in tasks]):
            cell = fut.result()
            got[(cell.load, cell.seed)] = cell
            if done:
                done(cell)
    return [got[(t.load, t.seed)] for t in tasks]


# ---- summary -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ratio:
    """A ratio over seeds: geometric mean, its 95 % interval (from the log ratios), min and max."""

    mean: float
    low: float
    high: float
    min: float
    max: float

    @classmethod
    def of(cls, ratios: Sequence[float]) -> Ratio:
        logs = np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], dtype=float))
        if not len(logs):
            return cls(math.nan, math.nan, math.nan, math.nan, math.nan)
        mean = float(logs.mean())
        half = _t95(len(logs)) * float(logs.std(ddof=1)) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
        return cls(math.exp(mean), math.exp(mean - half), math.exp(mean + half), float(np.exp(logs.min())), float(np.exp(logs.max())))

    @property
    def has_interval(self) -> bool:
        """False for one seed (or none): no spread to judge noise by."""
        return math.isfinite(self.low) and math.isfinite(self.high)

    def as_json(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "min": self.min, "max": self.max}


def _t95(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))


@dataclass(frozen=True, slots=True)
class VariantRow:
    """One variant at one load, over its seeds."""

    load: float
    variant: str
    seeds: int
    jct_vs_reference: Ratio
    jct_vs_production: Ratio
    throughput_vs_reference: Ratio
    throughput_vs_production: Ratio
    means: Mapping[str, float] = field(default_factory=dict)

    @property
    def better(self) -> bool:
        """Better than production beyond noise: shorter JCT (the whole interval below 1) without losing
        throughput or attainment beyond noise, or more throughput (interval above 1) at no JCT cost."""
        if self.variant == "production":
            return False
        faster = self.jct_vs_production.high < 1.0 and self.throughput_vs_production.high >= 1.0
        more = self.throughput_vs_production.low > 1.0 and self.jct_vs_production.low <= 1.0
        return faster or more

    def as_json(self) -> dict[str, object]:
        return {
            "load": self.load, "variant": self.variant, "seeds": self.seeds, "better_than_production": self.better,
            "jct_vs_reference": self.jct_vs_reference.as_json(), "jct_vs_production": self.jct_vs_production.as_json(),
            "throughput_vs_reference": self.throughput_vs_reference.as_json(),
            "throughput_vs_production": self.throughput_vs_production.as_json(), "means": dict(self.means),
        }


def summarise(cells: Sequence[SweepCell], variants: Sequence[str]) -> list[VariantRow]:
    """Per load and variant: ratios per seed (to Volcano-like and to production) and means of the costs."""
    rows: list[VariantRow] = []
    for load in sorted({c.load for c in cells}):
        at = [c for c in cells if c.load == load]
        for v in variants:
            def ratio(fig: str, to: str, cs: Sequence[SweepCell] = at, var: str = v) -> Ratio:
                return Ratio.of([c.figures[var][fig] / c.figures[to][fig] for c in cs if c.figures[to][fig] > 0])

            # (cells of earlier sweeps lack the figures added since: nan there)
            means = {f: float(np.mean([c.figures[v].get(f, np.nan) for c in at])) for f in FIGURES}
            prod = "production" if "production" in variants else v
            rows.append(VariantRow(load, v, len(at), ratio("avg_jct_s", REFERENCE), ratio("avg_jct_s", prod),
                                   ratio("throughput", REFERENCE), ratio("throughput", prod), means))
    return rows


def table_md(rows: Sequence[VariantRow], title: str) -> str:
    """The sweep as a markdown table: one line per load and variant."""
    head = ("| load | rules | JCT vs Volcano-like | JCT vs production (95 % CI) | throughput vs Volcano-like | "
            "throughput vs production (95 % CI) | attainment | OOM kills | reshapes | migrations | preemptions | GPU-h changing | "
            "p95 JCT (s) | better? |")
    lines = [f"**{title}**", "", head, "|" + "---|" * 14]
    for r in rows:
        m = r.means
        lines.append(
            f"| {r.load:g}x | {r.variant} | {r.jct_vs_reference.mean:.3f} | {_ci(r.jct_vs_production)} | "
            f"{r.throughput_vs_reference.mean:.3f} | {_ci(r.throughput_vs_production)} | {100 * m['attainment']:.1f} % | "
            f"{m['oom_restarts']:.1f} | {m['switches']:.0f} | {m['migrations']:.0f} | {_n(m['preemptions'])} | "
            f"{m['changing_gpu_h']:.1f} | {_n(m['p95_jct_s'])} | {'**yes**' if r.better else 'no'} |"
        )
    return "\n".join(lines)


def _n(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:,.0f}"


def _ci(r: Ratio) -> str:
    if not r.has_interval:
        return f"{r.mean:.3f}"
    return f"{r.mean:.3f} ({r.low:.3f}-{r.high:.3f})"
