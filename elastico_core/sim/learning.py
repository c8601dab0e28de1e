"""A simulated day that learns its interference model from what the simulated cluster measures.

The ground truth (``sim.truth``) differs from the model the planner starts with: Table 6's lookup, a
model trained on what ships (Gavel's and the H200 pairs), or any other predictor. While the day runs,
``Learner`` (a ``SimWatcher``) does what the controller and the ``iac_retrain`` DAG do on a real cluster:

* **Runtime pairs.** Every window in which exactly two single-GPU jobs ran together on a GPU, unchanged
  for at least ``min_window_s``, is one co-location row in the contract (``source=runtime``, the jobs,
  the window): each side's solo throughput is its profile's (the simulator's truth of a job alone), its
  co-located one what it achieved, times a persistent measurement error ``exp(N(0, measure_sigma))`` per
  window and side (the controller's median over a window's reports). A side measured faster together
  than alone below 0.97 makes the row ``suspect``, as in ``state.runtime_pairs``; suspect rows are kept,
  not trained on. A job holding several GPUs moves at its slowest worker's pace, so which partner
  slowed it is ambiguous: such windows are not rows (``runtime_pairs`` needs a single partner too).
* **Retraining** every ``retrain_every_s`` of simulated time: ``iac.retraining.challenge``, the rule the
  DAG runs, with the predictor the planner uses now as the champion: the newest runtime rows are held
  out, a challenger (``cf`` by default) is fitted on the base data plus the older runtime rows, and the
  planner switches to it (``ElasticoPolicy.use_predictor``, from the next epoch) only if it predicts
  the held-out rows better.
* **Prediction error.** Every window also records what the model in force when it opened predicted
  for both sides, against the ground truth's slowdown (the simulator knows it; the measurement error
  is not counted against the model). ``frozen=True`` records the same and never retrains: the baseline,
  which leaves the simulation bit-identical to a run without a watcher.

``compare_learning`` runs both on one trace, seed and ground truth (docs/iac.md has the figures).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np
import polars as pl

from elastico_core.iac.batch import PairBatch, profile_batch
from elastico_core.iac.dataset import CoLocationDataset, validate
from elastico_core.iac.evaluate import fit_model
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.iac.models import ModelKind, make_model
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.iac.retraining import HOLDOUT_FRACTION, MIN_HOLDOUT, challenge
from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.pds.rules import ElasticoRules
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.metrics import PolicyMetrics, summarize
from elastico_core.sim.policies.elastico import ElasticoPolicy
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.registry import default_registry
from elastico_core.sim.report import Report, Table
from elastico_core.sim.result import SimResult
from elastico_core.sim.simulator import Running, SimConfig, simulate
from elastico_core.sim.trace import Trace
from elastico_core.sim.truth import GroundTruth, PredictorKind, make_predictor

SUSPECT_BELOW = 0.97  # as state.runtime_pairs and the profiler: faster together than alone beyond noise
EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # simulated second 0, for the contract's ISO windows


@dataclass(frozen=True, slots=True)
class LearnConfig:
    """How the simulated controller learns (module doc)."""

    retrain_every_s: float = 3 * 3600.0
    min_window_s: float = 60.0  # shorter co-locations gave the controller too few reports to be a row
    measure_sigma: float = 0.02  # log-normal error of a window's measured co-located throughput, per side
    holdout_fraction: float = HOLDOUT_FRACTION  # the DAG's rule
    min_holdout: int = MIN_HOLDOUT
    kind: ModelKind = ModelKind.CF
    # grouped-CV folds of each challenger (its calibrated bound); None: 5 when the policy plans by the bound, else 0
    folds: int | None = None
    frozen: bool = False  # record and score, never retrain

    def __post_init__(self) -> None:
        if not self.retrain_every_s > 0 or not self.min_window_s >= 0 or not self.measure_sigma >= 0:
            raise SpecError("need retrain_every_s > 0, min_window_s >= 0 and measure_sigma >= 0", field="learning")
        if not 0 < self.holdout_fraction < 1 or self.min_holdout < 1:
            raise SpecError("need 0 < holdout_fraction < 1 and min_holdout >= 1", field="learning")


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured co-location window on one GPU: both sides' truth, measurement and prediction."""

    start_s: float
    end_s: float
    gpu: int
    job_a: str
    job_b: str
    workload_a: Workload
    workload_b: Workload
    profile_a: Profile
    profile_b: Profile
    true_a: float  # ground-truth S(a|b): solo throughput over what a achieved
    true_b: float
    measured_a: float  # what the controller would have measured (true x measurement error)
    measured_b: float
    predicted_a: float  # by the model in force when the window opened
    predicted_b: float
    version: int  # that model's version (0: the one the day started with)


@dataclass(frozen=True, slots=True)
class Retraining:
    """One retraining of the simulated day, and what it decided."""

    at_s: float
    runtime_rows: int
    holdout_rows: int
    challenger_mape: float | None
    champion_mape: float | None
    promoted: bool
    reason: str
    version: int  # the version planning after it


@dataclass
class _Open:
    start: float
    key: tuple[Any, ...]
    a: Running
    b: Running
    predictor: SlowdownPredictor
    version: int


@dataclass
class Learner:
    """The simulated controller's feedback loop (module doc): a ``SimWatcher`` driving one ``ElasticoPolicy``.

    :param policy: the policy whose predictor it replaces on a promotion
    :param base: the rows every challenger trains on besides the runtime ones (what ships), or None
    :param gpu_name: the simulated GPU model (the rows' ``gpu``)
    :param gpu_mem_mib: its device memory (the rows' ``gpu_mem_mib``: what the planner's batches carry)
    """

    policy: ElasticoPolicy
    base: CoLocationDataset | None
    gpu_name: str
    gpu_mem_mib: float
    config: LearnConfig = field(default_factory=LearnConfig)
    seed: int = 0
    observations: list[Observation] = field(default_factory=list)
    retrainings: list[Retraining] = field(default_factory=list)
    _open: dict[int, _Open] = field(default_factory=dict, repr=False)
    _next: float = math.nan
    _version: int = 0

    def __post_init__(self) -> None:
        self._next = self.config.retrain_every_s

    @property
    def predictor(self) -> SlowdownPredictor:
        return self.policy.context.predictor

    # ---- SimWatcher ----------------------------------------------------------------------------
    def gpus_changed(self, t: float, occupants: Mapping[int, tuple[Running, ...]]) -> None:
        for g, jobs in occupants.items():
            key: tuple[Any, ...] | None = None
            if len(jobs) == 2 and jobs[0].gpus == 1 and jobs[1].gpus == 1:
                a, b = jobs
                key = (a.job_id, a.profile.knobs, a.speed, b.job_id, b.profile.knobs, b.speed)
            cur = self._open.get(g)
            if cur is not None and cur.key == key:
                continue
            if cur is not None:
                self._close(g, cur, t)
            if key is not None:
                self._open[g] = _Open(t, key, jobs[0], jobs[1], self.predictor, self._version)

    def before_policy(self, t: float) -> None:
        if self.config.frozen:
            return
        while t >= self._next - 1e-9:
            at = self._next
            self._next += self.config.retrain_every_s
            self._retrain(at)

    def finish(self, t: float) -> None:
        """Close the windows still open when the day ends (they are measured up to ``t``)."""
        for g in sorted(self._open):
            self._close(g, self._open[g], t)
        self._open.clear()

    # ---- windows -------------------------------------------------------------------------------
    def _close(self, g: int, w: _Open, t: float) -> None:
        del self._open[g]
        if t - w.start < self.config.min_window_s:
            return
        a, b = w.a, w.b
        true_a, true_b = a.profile.throughput / a.speed, b.profile.throughput / b.speed
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, zlib.crc32(f"{g}|{a.job_id}|{b.job_id}|{w.start:.6f}".encode()), 11])
        noise = np.exp(self.config.measure_sigma * rng.normal(size=2))
        batch = PairBatch(profile_batch([(a.workload, a.profile), (b.workload, b.profile)]),
                          profile_batch([(b.workload, b.profile), (a.workload, a.profile)]),
                          np.full(2, self.gpu_mem_mib))
        pred = np.asarray(w.predictor.predict(batch), dtype=np.float64)
        self.observations.append(Observation(
            w.start, t, g, a.job_id, b.job_id, a.workload, b.workload, a.profile, b.profile, true_a, true_b,
            true_a * float(noise[0]), true_b * float(noise[1]), float(pred[0]), float(pred[1]), w.version,
        ))  # fmt: skip

    # ---- retraining ----------------------------------------------------------------------------
    def runtime_pairs(self, until: float = math.inf) -> CoLocationDataset | None:
        """The rows of every window closed by ``until``, in the co-location contract (None before the first)."""
        return runtime_dataset([o for o in self.observations if o.end_s <= until], self.gpu_name, self.gpu_mem_mib)

    def _retrain(self, t: float) -> None:
        runtime = self.runtime_pairs(t)
        label = f"the model in force (v{self._version}, {self.predictor.name})"
        folds = self.config.folds
        if folds is None:
            folds = 5 if self.policy.config.rules.iac_bound is not None else 0
        res = challenge(self.base, runtime, self.predictor, self.config.kind, holdout_fraction=self.config.holdout_fraction,
                        min_holdout=self.config.min_holdout, folds=folds, seed=self.seed, champion_label=label)
        if res.promoted:
            self._version += 1
            self.policy.use_predictor(res.predictor(name=f"learned v{self._version}"))
        self.retrainings.append(Retraining(t, 0 if runtime is None else runtime.rows, res.holdout_rows, res.challenger_mape,
                                           res.champion_mape, res.promoted, res.reason, self._version))


def runtime_dataset(observations: Sequence[Observation], gpu_name: str, gpu_mem_mib: float) -> CoLocationDataset | None:
    """Observations as contract rows (``source=runtime``, or ``suspect``; module doc)."""
    if not observations:
        return None
    rows: list[dict[str, object]] = []
    for o in observations:
        row: dict[str, object] = {"gpu": gpu_name, "gpu_mem_mib": gpu_mem_mib}
        for x, w, p, m, job in (("a", o.workload_a, o.profile_a, o.measured_a, o.job_a), ("b", o.workload_b, o.profile_b, o.measured_b, o.job_b)):
            c = p.counters
            row.update({
                f"workload_{x}": w.name, f"kind_{x}": w.kind.value, f"knobs_{x}": p.knobs.to_json(), f"params_{x}": float(w.params),
                f"solo_tput_{x}": p.throughput, f"colo_tput_{x}": p.throughput / m, f"job_{x}": job, f"repeats_{x}": 1.0,
                f"slowdown_min_{x}": m, f"slowdown_max_{x}": m,
                **{f"{n}_{x}": _finite(getattr(c, n)) for n in ("sm_active", "sm_occupancy", "dram_active", "fb_used_mb", "tensor_active")},
            })  # fmt: skip
        row.update({
            "source": "suspect" if min(o.measured_a, o.measured_b) < SUSPECT_BELOW else "runtime",
            "signature": o.profile_a.signature.key,
            "window_start": (EPOCH_UTC + dt.timedelta(seconds=o.start_s)).isoformat(),
            "window_end": (EPOCH_UTC + dt.timedelta(seconds=o.end_s)).isoformat(),
        })  # fmt: skip
        rows.append(row)
    return validate(pl.DataFrame(rows, infer_schema_length=None), origin="simulated runtime pairs")


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# ---- one day, and the comparison ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Error:
    """MAPE (%) of the predictions against the ground truth over some windows (both sides of each)."""

    mape: float | None
    samples: int

    def as_dict(self) -> dict[str, object]:
        return {"mape": None if self.mape is None else round(self.mape, 4), "samples": self.samples}


def rescored(observations: Sequence[Observation], predictor: SlowdownPredictor, gpu_mem_mib: float) -> Error:
    """Error of ``predictor`` on the given windows (both sides), against the ground truth."""
    if not observations:
        return Error(None, 0)
    a = [(o.workload_a, o.profile_a) for o in observations] + [(o.workload_b, o.profile_b) for o in observations]
    b = [(o.workload_b, o.profile_b) for o in observations] + [(o.workload_a, o.profile_a) for o in observations]
    pred = np.asarray(predictor.predict(PairBatch(profile_batch(a), profile_batch(b), np.full(len(a), gpu_mem_mib))))
    truth = np.array([o.true_a for o in observations] + [o.true_b for o in observations])
    return Error(float(100.0 * np.mean(np.abs(pred - truth) / truth)), len(truth))


def prediction_error(observations: Sequence[Observation], lo: float = 0.0, hi: float = math.inf) -> Error:
    """Error of the windows that opened in [lo, hi): what the model in force then predicted, against the truth."""
    sel = [o for o in observations if lo <= o.start_s < hi]
    if not sel:
        return Error(None, 0)
    truth = np.array([v for o in sel for v in (o.true_a, o.true_b)])
    pred = np.array([v for o in sel for v in (o.predicted_a, o.predicted_b)])
    return Error(float(100.0 * np.mean(np.abs(pred - truth) / truth)), len(truth))


@dataclass(frozen=True)
class LearningRun:
    """One simulated day with a ``Learner`` watching (frozen or learning)."""

    result: SimResult
    metrics: PolicyMetrics
    observations: tuple[Observation, ...]
    retrainings: tuple[Retraining, ...]
    frozen: bool
    final: SlowdownPredictor  # the model planning at the end of the day
    gpu_name: str  # the simulated GPU model
    gpu_mem_mib: float  # its device memory (what the planner's batches carry)

    def error(self, lo: float = 0.0, hi: float = math.inf) -> Error:
        return prediction_error(self.observations, lo, hi)

    def error_by(self, bin_s: float, end_s: float) -> list[tuple[float, Error]]:
        """(bin start, error of the windows opened in it) over consecutive bins up to ``end_s``."""
        edges = np.arange(0.0, max(end_s, bin_s) + bin_s / 2, bin_s)
        return [(float(a), self.error(float(a), float(b))) for a, b in itertools.pairwise(edges)]


def run_learning(
    trace: Trace,
    cluster: Cluster,
    seed: int,
    *,
    store: ProfileStore,
    truth: GroundTruth,
    predictor: SlowdownPredictor,
    base: CoLocationDataset | None,
    learn: LearnConfig,
    kind: PolicyKind = PolicyKind.ELASTICO,
    config: SimConfig = SimConfig(),
    progress: Callable[[float], None] | None = None,
    rules: ElasticoRules | None = None,
) -> LearningRun:
    """One day of ``kind`` (an ElastiCo policy) starting from ``predictor``, learning unless ``learn.frozen``;
    ``rules``: a variant of the production rules (``pds.rules.VARIANTS``)."""
    ctx = PolicyContext(store, predictor, seed)
    policy = default_registry().get(kind)(ctx)
    if not isinstance(policy, ElasticoPolicy):
        raise SpecError(f"learning needs an ElastiCo policy (its planner asks IAC), got {kind.value!r}", field="policy")
    if rules is not None:
        policy = ElasticoPolicy.preset(kind, ctx, rules)
    gpu = cluster.gpu_models()[0]
    learner = Learner(policy, base, gpu.name, float(gpu.memory_mib), learn, seed)
    result = simulate(trace, policy, cluster, seed, store=store, truth=truth, config=config, progress=progress, watcher=learner)
    learner.finish(result.end_s)
    return LearningRun(result, summarize(result), tuple(learner.observations), tuple(learner.retrainings), learn.frozen,
                       learner.predictor, learner.gpu_name, learner.gpu_mem_mib)


@dataclass(frozen=True)
class LearningComparison:
    """The same trace, seed and ground truth with a frozen model and with learning."""

    frozen: LearningRun
    learning: LearningRun
    bin_s: float

    def series(self, bin_s: float) -> dict[str, list[tuple[float, float]]]:
        """(hour, MAPE %) of each run by the hour its windows opened (bins without windows left out): the plot."""
        end = max(self.frozen.result.window_s, self.learning.result.window_s)
        return {name: [(a / 3600.0, e.mape) for a, e in run.error_by(bin_s, end) if e.mape is not None]
                for name, run in (("frozen model", self.frozen), ("learning", self.learning))}

    def learning_pairs(self) -> CoLocationDataset | None:
        """The learning run's runtime pairs, in the co-location contract."""
        return runtime_dataset(self.learning.observations, self.learning.gpu_name, self.learning.gpu_mem_mib)

    def final_on_frozen(self) -> Error:
        """The learning run's last model scored on the frozen run's windows: the same pairs for both models."""
        return rescored(self.frozen.observations, self.learning.final, self.learning.gpu_mem_mib)

    def as_dict(self) -> dict[str, object]:
        end = max(self.frozen.result.window_s, self.learning.result.window_s)
        first = next((r.at_s for r in self.learning.retrainings if r.promoted), None)

        def run(r: LearningRun) -> dict[str, object]:
            m = r.metrics
            return {
                "error": r.error().as_dict(),
                "error_after_first_promotion": r.error(first, math.inf).as_dict() if first is not None else None,
                "error_by_bin": [{"from_h": round(a / 3600, 3), **e.as_dict()} for a, e in r.error_by(self.bin_s, end)],
                "attainment": round(m.attainment, 6), "avg_jct_s": round(m.avg_jct_s, 3), "p95_jct_s": round(m.p95_jct_s, 3),
                "throughput": round(m.throughput, 6), "jobs_finished": m.jobs_finished, "windows": len(r.observations),
                "retrainings": [{"at_h": round(x.at_s / 3600, 3), "runtime_rows": x.runtime_rows, "holdout_rows": x.holdout_rows,
                                 "challenger_mape": x.challenger_mape, "champion_mape": x.champion_mape, "promoted": x.promoted,
                                 "version": x.version, "reason": x.reason} for x in r.retrainings],
            }  # fmt: skip

        f, g = self.frozen.error().mape, self.learning.error().mape
        return {
            "frozen": run(self.frozen),
            "learning": run(self.learning),
            "final_model_on_frozen_windows": self.final_on_frozen().as_dict(),
            "error_ratio": round(g / f, 4) if f and g is not None else None,
            "attainment_gain": round(self.learning.metrics.attainment - self.frozen.metrics.attainment, 6),
            "avg_jct_ratio": round(self.learning.metrics.avg_jct_s / self.frozen.metrics.avg_jct_s, 4) if self.frozen.metrics.avg_jct_s else None,
        }


def compare_learning(
    trace: Trace,
    cluster: Cluster,
    seed: int,
    *,
    store: ProfileStore,
    truth: Callable[[int], GroundTruth],
    predictor: SlowdownPredictor,
    base: CoLocationDataset | None,
    learn: LearnConfig,
    kind: PolicyKind = PolicyKind.ELASTICO,
    config: SimConfig = SimConfig(),
    progress: Callable[[str], Callable[[float], None] | None] | None = None,
    rules: ElasticoRules | None = None,
) -> LearningComparison:
    """``run_learning`` frozen and learning: one trace and seed, each run with a fresh ground truth of that seed."""
    runs = [
        run_learning(trace, cluster, seed, store=store, truth=truth(seed), predictor=predictor, base=base,
                     learn=replace(learn, frozen=frozen), kind=kind, config=config,
                     progress=progress(name) if progress is not None else None, rules=rules)
        for frozen, name in ((True, "frozen model"), (False, "learning"))
    ]  # fmt: skip
    return LearningComparison(runs[0], runs[1], learn.retrain_every_s)


# ---- what the day starts with, and the report ---------------------------------------------------
class StartModel(StrEnum):
    """The interference model the simulated day starts with."""

    TABLE6 = "table6"  # Table 6's workload pairs, no interference elsewhere
    SHIPPED = "shipped"  # the challenger kind fitted on the training rows alone (what a fresh install trains)
    CHAMPION = "champion"  # the registry's elastico-iac@champion
    CONTENTION = "contention"  # the contention model without the truth's noise
    NONE = "none"


def start_predictor(
    start: StartModel, base: CoLocationDataset | None, *, kind: ModelKind = ModelKind.CF, seed: int = 0,
    tracking_uri: str | None = None,
) -> SlowdownPredictor:
    """The predictor for ``start``; ``shipped`` is fitted on ``base``, ``champion`` loaded from the registry."""
    if start is StartModel.TABLE6:
        return make_predictor(PredictorKind.TABLE6)
    if start is StartModel.CONTENTION:
        return make_predictor(PredictorKind.CONTENTION)
    if start is StartModel.NONE:
        return make_predictor(PredictorKind.NONE)
    if start is StartModel.SHIPPED:
        samples = base.samples() if base is not None else None
        if samples is None or not len(samples):
            raise SpecError("'shipped' is fitted on the training rows: give --data (or a profile store with colocation/*.parquet)",
                            field="predictor")
        return LearnedPredictor(fit_model(make_model(kind, seed), samples), name=f"shipped {kind.value}")
    from elastico_core.iac.champion import load_champion

    loaded = load_champion(tracking_uri=tracking_uri)
    if loaded.origin == "fallback":
        raise SpecError(f"no registered champion to start from ({loaded.message})", field="predictor")
    return loaded.predictor


def learning_report(cmp: LearningComparison, doc: Mapping[str, object], plots: Mapping[str, str]) -> Report:
    """The comparison as a report: the two runs, every retraining, the error by bin."""
    rows = []
    for name, run in (("frozen model", cmp.frozen), ("learning", cmp.learning)):
        m, err = run.metrics, run.error()
        rows.append((name, _num(err.mape), str(len(run.observations)), f"{100 * m.attainment:.2f}", f"{m.avg_jct_s / 3600:.3f}",
                     f"{m.p95_jct_s / 3600:.3f}", f"{m.throughput:.2f}", str(sum(r.promoted for r in run.retrainings))))
    same = cmp.final_on_frozen()
    summary = Table("Frozen model vs learning from runtime pairs",
                    ("run", "prediction MAPE %", "windows", "attainment %", "avg JCT h", "p95 JCT h", "throughput", "promotions"),
                    tuple(rows), f"The last learned model on the frozen run's windows (the same pairs): {_num(same.mape)} % MAPE.")
    retr = Table("Retrainings of the learning run", ("at h", "runtime rows", "held out", "challenger %", "in force %", "promoted", "why"),
                 tuple((f"{r.at_s / 3600:.1f}", str(r.runtime_rows), str(r.holdout_rows), _num(r.challenger_mape), _num(r.champion_mape),
                        "yes" if r.promoted else "no", r.reason) for r in cmp.learning.retrainings))
    end = max(cmp.frozen.result.window_s, cmp.learning.result.window_s)
    bins = Table("Prediction error by the hour the windows opened (MAPE %, samples)", ("from h", "frozen", "learning"),
                 tuple((f"{a / 3600:.0f}", f"{_num(e.mape)} ({e.samples})", f"{_num(g.mape)} ({g.samples})")
                       for (a, e), (_, g) in zip(cmp.frozen.error_by(cmp.bin_s, end), cmp.learning.error_by(cmp.bin_s, end), strict=True)))
    meta = doc.get("run", {})
    intro = (f"Run: {json.dumps(meta, sort_keys=True)}",) if meta else ()
    return Report("ElastiCo: a simulated day that learns its interference model", intro, (summary, retr, bins), dict(plots))


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
