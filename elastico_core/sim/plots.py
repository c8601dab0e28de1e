"""PNG plots of simulation results (matplotlib, Agg backend): a separate step that reads ``SimResult``s."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from elastico_core.sim.result import SimResult

BIN_S = 600.0


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, ax, path: Path) -> Path:  # type: ignore[no-untyped-def]
    """The finish every plot shares: grid, legend when something was drawn, PNG, figure closed."""
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def binned(result: SimResult, name: str, bin_s: float = BIN_S) -> tuple[np.ndarray, np.ndarray]:
    """Time averages of one series over consecutive bins covering the window (hours, values)."""
    end = max(result.window_s, bin_s)
    edges = np.arange(0.0, end + bin_s, bin_s)
    vals = np.array([result.series.mean(name, float(a), float(b)) for a, b in itertools.pairwise(edges)])
    return edges[:-1] / 3600.0, vals


def jct_cdf(results: Mapping[str, SimResult], path: Path, labels: Mapping[str, str]) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        jct = np.sort([j.jct_s / 3600.0 for j in r.jobs if j.finished])
        if len(jct):
            ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=labels.get(name, name))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h, log scale)")
    ax.set_ylabel("CDF of jobs")
    return _save(plt, fig, ax, path)


def queue_by_arrival(results: Mapping[str, SimResult], path: Path, labels: Mapping[str, str]) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        q = np.array([j.queue_s / 60.0 for j in r.jobs if j.first_start_s == j.first_start_s])
        if len(q):
            k = max(1, len(q) // 50)
            smooth = np.convolve(q, np.ones(k) / k, mode="valid")
            ax.plot(np.arange(len(smooth)), smooth, label=labels.get(name, name))
    ax.set_xlabel("jobs in arrival order")
    ax.set_ylabel("queueing delay (min, moving average)")
    return _save(plt, fig, ax, path)


def over_time(
    results: Mapping[str, SimResult], path: Path, labels: Mapping[str, str], name: str, ylabel: str
) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for key, r in results.items():
        hours, vals = binned(r, name)
        ax.plot(hours, 100.0 * vals / max(r.gpus, 1), label=labels.get(key, key))
    ax.set_xlabel("time (h)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    return _save(plt, fig, ax, path)


def ratio_by_seed(
    ratios: Mapping[str, Sequence[float]], path: Path, labels: Mapping[str, str], ylabel: str, reference: str
) -> Path:
    """One dot per seed and policy (the figure over the reference's on that seed), the geometric mean as a bar."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(ratios) + 1.5), 4))
    for i, vals in enumerate(ratios.values()):
        v = np.array([x for x in vals if x > 0 and np.isfinite(x)])
        if not len(v):
            continue
        ax.bar(i, float(np.exp(np.log(v).mean())), width=0.6, alpha=0.35, color=f"C{i % 10}")
        ax.scatter(i + np.linspace(-0.18, 0.18, len(v)), v, s=14, color=f"C{i % 10}", zorder=3)
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--", label=reference)
    ax.set_xticks(range(len(ratios)), [labels.get(n, n) for n in ratios], rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    return _save(plt, fig, ax, path)


def all_plots(results: Mapping[str, SimResult], out: Path, labels: Mapping[str, str]) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    return {
        "jct_cdf": jct_cdf(results, out / "jct_cdf.png", labels),
        "queue_by_arrival": queue_by_arrival(results, out / "queue_by_arrival.png", labels),
        "sm_util": over_time(results, out / "sm_util.png", labels, "sm", "SM utilisation (%)"),
        "gpu_occupancy": over_time(results, out / "gpu_occupancy.png", labels, "busy", "GPUs holding a job (%)"),
    }


def rules_plot(rows: Sequence[object], path: Path, title: str) -> Path:
    """The rules sweep: each variant's average JCT over production's per load, with its 95 % interval."""
    plt = _pyplot()
    loads = sorted({r.load for r in rows})  # type: ignore[attr-defined]
    names = list(dict.fromkeys(r.variant for r in rows))  # type: ignore[attr-defined]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) * len(loads) / 2 + 2), 4.2))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        mine = {r.load: r.jct_vs_production for r in rows if r.variant == name}  # type: ignore[attr-defined]
        xs = [li + (i - (len(names) - 1) / 2) * width for li, ld in enumerate(loads) if ld in mine]
        rs = [mine[ld] for ld in loads if ld in mine]
        mean = np.array([r.mean for r in rs])
        err = np.array([[max(0.0, r.mean - r.low) if r.has_interval else 0.0 for r in rs],
                        [max(0.0, r.high - r.mean) if r.has_interval else 0.0 for r in rs]])
        err = np.where(np.isfinite(err), err, 0.0)
        ax.errorbar(xs, mean, yerr=err, fmt="o", ms=4, capsize=2, color=f"C{i % 10}", label=name)
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set_xticks(range(len(loads)), [f"{ld:g}x" for ld in loads])
    ax.set_xlabel("load (x capacity)")
    ax.set_ylabel("average JCT / production's (95 % CI over seeds)")
    ax.set_title(title, fontsize=9)
    return _save(plt, fig, ax, path)


def error_over_day(series: Mapping[str, Sequence[tuple[float, float]]], promotions: Sequence[float], path: Path) -> Path:
    """Prediction error (MAPE %) by the hour co-location windows opened, one line per run; promotions dotted."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, points in series.items():
        if points:
            hours, vals = zip(*points, strict=True)
            ax.plot(hours, vals, marker="o", ms=3, label=name)
    for i, h in enumerate(promotions):
        ax.axvline(h, color="0.5", lw=0.8, ls=":", label="a challenger promoted" if i == 0 else None)
    ax.set_xlabel("time the co-location began (h)")
    ax.set_ylabel("prediction error, MAPE (%)")
    ax.set_ylim(bottom=0)
    return _save(plt, fig, ax, path)
