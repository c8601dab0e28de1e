"""``builtin:paper-mix``: a 24-hour mixed trace shaped like the paper's §5.1 workload, scaled by cluster size.

Everything is drawn from one ``np.random.Generator(seed)``; arrival rates are proportional to the
number of GPUs (§5.6: constant load factor) and to ``load`` (the §5.6 load sweep: 0.5, 1.0, 1.5).

**Training** (labelled by workload, not synthetic in shape): Poisson arrivals with a mild diurnal
swing (rate x (1 + 0.3 sin), peak mid-day); durations log-normal with Philly's median (1,144 s) and
spread (sigma 1.78, so Philly's 90th percentile of 3.1 h), truncated to [1 min, 12 h]; GPU requests
1/2/4/8 with Philly's frequencies among jobs of <= 8 GPUs (93.2 / 2.2 / 2.3 / 2.3 %, larger jobs
folded into 8); workloads uniform over the 8 training workloads of Table 2.

**Offline inference** (``synthetic=True``: no public trace mixes it with training): batch jobs of N
requests (N log-normal, median 2,000, log-sd 0.5) whose generated-token counts are drawn from the Azure LLM
conversation trace (``azure-llm-trace``) when the public data folder is there, else from a
log-normal fitted to it (median 129 tokens, log-sd 0.86); the job's work is their sum and its
``duration_s`` the time its default configuration needs for it. Demand is bursty: a two-state
Markov-modulated Poisson process alternates "burst" periods (mean 60 min) and near-idle periods
(mean 45 min, at 3 % of the burst rate). Those three constants were chosen (over seeds 0-7) so that
the coefficient of variation of the submitted inference work per 10-minute bin is 0.87 +- 0.10, as
§2.2 measures for production GenAI demand (``demand_cv`` reports it for a generated trace); about
28 % of the 10-minute bins then carry less than a tenth of the mean: long near-zero stretches.

**Load.** At ``load = 1`` training offers 60 % and inference 40 % of the cluster's GPU-time at the
jobs' default configurations: the cluster is provisioned for its average demand at the requested
configurations, so a static scheduler falls behind during every inference burst. Users: training jobs belong to 8 teams (Zipf shares), inference to 2 pipelines.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elastico_core.model.errors import SpecError
from elastico_core.model.workload import JobKind
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.trace import Trace, TraceJob

PHILLY_MEDIAN_S = 1144.0
PHILLY_SIGMA = 1.78
DP_MIX = ((1, 0.932), (2, 0.022), (4, 0.023), (8, 0.023))
AZURE_CONV = Path("azure-llm-trace") / "AzureLLMInferenceTrace_conv.csv"
FALLBACK_TOKENS = (129.0, 0.86)  # median, log-sd of Azure conv GeneratedTokens


@dataclass(frozen=True, slots=True)
class PaperMixConfig:
    gpus: int = 64
    hours: float = 24.0
    load: float = 1.0
    train_share: float = 0.6
    infer_share: float = 0.4
    train_min_s: float = 60.0
    train_max_s: float = 12 * 3600.0
    diurnal: float = 0.3
    burst_mean_s: float = 60 * 60.0
    idle_mean_s: float = 45 * 60.0
    idle_rate: float = 0.03
    requests_median: float = 2000.0
    requests_sigma: float = 0.5
    gpu_name: str = "a100-40gb"


def _trunc_lognormal_mean(median: float, sigma: float, lo: float, hi: float) -> float:
    """E[X | lo <= X <= hi] for X log-normal, so arrival rates hit the GPU-time share exactly."""
    from scipy.stats import lognorm

    d = lognorm(s=sigma, scale=median)
    mass = d.cdf(hi) - d.cdf(lo)
    mu = math.log(median)
    # E[X 1{lo<=X<=hi}] = exp(mu + s^2/2) (Phi((ln hi - mu - s^2)/s) - Phi((ln lo - mu - s^2)/s))
    from scipy.stats import norm

    part = math.exp(mu + sigma**2 / 2) * (
        norm.cdf((math.log(hi) - mu - sigma**2) / sigma) - norm.cdf((math.log(lo) - mu - sigma**2) / sigma)
    )
    return float(part / mass)


def request_tokens(data_dir: Path | None) -> tuple[np.ndarray | None, str]:
    """Generated tokens per request from the Azure conversation trace, if it is present."""
    if data_dir is not None:
        path = data_dir / AZURE_CONV
        if path.is_file():
            with path.open(newline="") as fh:
                vals = [float(r["GeneratedTokens"]) for r in csv.DictReader(fh)]
            return np.maximum(np.array(vals), 1.0), f"request sizes from {AZURE_CONV.as_posix()} ({len(vals)} requests)"
    return None, f"request sizes from a log-normal (median {FALLBACK_TOKENS[0]:g}, log-sd {FALLBACK_TOKENS[1]}) fitted to the Azure trace"


def _default_throughput(workload: str, store: ProfileStore, gpu: str) -> float:
    from elastico_core.model.hardware import gpu_model

    w = PAPER_WORKLOADS[workload]
    p = store.lookup(w, w.defaults, gpu_model(gpu))
    if p is None:
        raise SpecError(f"default configuration of {workload} does not fit {gpu}")
    return p.throughput


def paper_mix(
    seed: int = 0, config: PaperMixConfig = PaperMixConfig(), *, store: ProfileStore, data_dir: Path | None = None
) -> Trace:
    """Generate the trace (module doc)."""
    if config.gpus <= 0:
        return Trace("paper-mix", ())
    rng = np.random.default_rng(seed)
    horizon = config.hours * 3600.0
    g = config.gpus * config.load
    train_names = sorted(w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.TRAIN)
    infer_names = sorted(w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.INFER)
    teams = [f"team-{i}" for i in range(8)]
    team_p = np.array([1.0 / (i + 1) for i in range(8)])
    team_p /= team_p.sum()
    jobs: list[TraceJob] = []

    # training: thinning of a Poisson process at the peak rate
    dps = np.array([d for d, _ in DP_MIX])
    dp_p = np.array([p for _, p in DP_MIX])
    dp_p /= dp_p.sum()
    mean_gpu_s = _trunc_lognormal_mean(PHILLY_MEDIAN_S, PHILLY_SIGMA, config.train_min_s, config.train_max_s) * float(dps @ dp_p)
    rate = config.train_share * g / mean_gpu_s
    peak = rate * (1 + config.diurnal)
    t = 0.0
    n = 0
    while True:
        t += rng.exponential(1.0 / peak)
        if t >= horizon:
            break
        accept = (1 + config.diurnal * math.sin(2 * math.pi * (t / 86400.0 - 0.25))) / (1 + config.diurnal)
        if rng.random() > accept:
            continue
        dur = -1.0
        while not config.train_min_s <= dur <= config.train_max_s:  # truncation by rejection
            dur = float(rng.lognormal(math.log(PHILLY_MEDIAN_S), PHILLY_SIGMA))
        dp = int(rng.choice(dps, p=dp_p))
        jobs.append(
            TraceJob(f"train-{n:05d}", round(t, 3), round(dur, 3), dp, JobKind.TRAIN,
                     train_names[int(rng.integers(len(train_names)))], teams[int(rng.choice(8, p=team_p))])
        )
        n += 1

    # inference: Markov-modulated Poisson bursts
    tokens, how = request_tokens(data_dir)
    tput = {w: _default_throughput(w, store, config.gpu_name) for w in infer_names}
    mean_tokens = float(tokens.mean()) if tokens is not None else FALLBACK_TOKENS[0] * math.exp(FALLBACK_TOKENS[1] ** 2 / 2)
    mean_requests = config.requests_median * math.exp(config.requests_sigma**2 / 2)
    mean_gpu_s_inf = mean_requests * mean_tokens * float(np.mean([1.0 / v for v in tput.values()]))
    p_burst = config.burst_mean_s / (config.burst_mean_s + config.idle_mean_s)
    avg_rate = config.infer_share * g / mean_gpu_s_inf
    burst_rate = avg_rate / (p_burst + (1 - p_burst) * config.idle_rate)
    t, n = 0.0, 0
    burst = bool(rng.random() < p_burst)
    switch_at = rng.exponential(config.burst_mean_s if burst else config.idle_mean_s)
    while t < horizon:
        lam = burst_rate * (1.0 if burst else config.idle_rate)
        nxt = t + rng.exponential(1.0 / lam)
        if nxt >= switch_at:
            t = switch_at
            burst = not burst
            switch_at = t + rng.exponential(config.burst_mean_s if burst else config.idle_mean_s)
            continue
        t = nxt
        if t >= horizon:
            break
        w = infer_names[int(rng.integers(len(infer_names)))]
        requests = int(np.clip(rng.lognormal(math.log(config.requests_median), config.requests_sigma), 100, 60_000))
        if tokens is not None:
            work = float(tokens[rng.integers(len(tokens), size=requests)].sum())
        else:
            work = float(rng.lognormal(math.log(FALLBACK_TOKENS[0]), FALLBACK_TOKENS[1], size=requests).sum())
        jobs.append(
            TraceJob(f"infer-{n:05d}", round(t, 3), round(work / tput[w], 3), 1, JobKind.INFER, w,
                     f"pipeline-{int(rng.integers(2))}", synthetic=True)
        )
        n += 1
    jobs.sort(key=lambda j: (j.submit_time_s, j.job_id))
    notes = (
        f"paper-mix: {config.gpus} GPUs, {config.hours:g} h, load {config.load:g}, seed {seed}; "
        f"{sum(j.kind is JobKind.TRAIN for j in jobs)} training and {sum(j.kind is JobKind.INFER for j in jobs)} "
        f"synthetic inference jobs; {how}",
    )
    return Trace("paper-mix", tuple(jobs), notes)


def demand_cv(trace: Trace, bin_s: float = 600.0, kind: JobKind = JobKind.INFER) -> float:
    """Coefficient of variation of the submitted work (default GPU-seconds) per bin of ``bin_s``."""
    horizon = max((j.submit_time_s for j in trace.jobs), default=0.0)
    if horizon <= 0:
        return 0.0
    bins = np.zeros(int(horizon // bin_s) + 1)
    for j in trace.jobs:
        if j.kind is kind:
            bins[int(j.submit_time_s // bin_s)] += j.duration_s * j.num_gpus
    return float(bins.std() / bins.mean()) if bins.mean() > 0 else 0.0
