"""The status page's two charts, drawn with matplotlib as inline SVG: GPU occupancy over time and predicted
against measured throughput.

Why matplotlib and not a JavaScript library: it is already a dependency (the simulator's plots), the page
stays one self-contained document with no script from a CDN, and the same figures render in the Airflow
menu, on the standalone page and in a screenshot. Each figure is an ``matplotlib.figure.Figure`` of its
own (no pyplot state: safe in the api-server's threads); a chart is cached by its data, so a page that
refreshes while nothing changed costs no drawing.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

PALETTE = ("#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#14b8a6", "#f97316", "#64748b", "#ec4899", "#84cc16")


def color_of(job_id: str, order: Sequence[str]) -> str:
    return PALETTE[order.index(job_id) % len(PALETTE)] if job_id in order else "#9ca3af"


def _svg(fig: Any, salt: str) -> str:
    """The figure as an inline ``<svg>`` element (ids salted so two charts on one page never share one)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]


def gpu_timeline(data: Mapping[str, Any]) -> str:
    """One row per GPU, a bar per job for the time it held that GPU (the last hour or the window given)."""
    return _timeline(json.dumps(data, sort_keys=True, default=str))


@functools.lru_cache(maxsize=16)
def _timeline(key: str) -> str:
    from matplotlib.figure import Figure

    data = json.loads(key)
    gpus: list[str] = data["gpus"]
    bars: list[dict[str, Any]] = data["bars"]
    start, end = (dt.datetime.fromisoformat(t) for t in (data["start"], data["end"]))
    order = list(dict.fromkeys(b["job_id"] for b in bars))
    height = 0.6 + 0.32 * max(1, len(gpus))
    fig = Figure(figsize=(9.0, height), dpi=96)
    ax = fig.add_subplot()
    rows = {g: i for i, g in enumerate(gpus)}
    span = max((end - start).total_seconds(), 1.0)
    for b in bars:
        t0 = max(0.0, (dt.datetime.fromisoformat(b["start"]) - start).total_seconds())
        t1 = min(span, (dt.datetime.fromisoformat(b["end"]) - start).total_seconds())
        if t1 <= t0 or b["gpu"] not in rows:
            continue
        y = rows[b["gpu"]] + (0.2 if b.get("lane") else -0.2)  # a GPU's two jobs side by side
        ax.barh(y, (t1 - t0) / 60.0, left=t0 / 60.0, height=0.38, color=color_of(b["job_id"], order),
                edgecolor="white", linewidth=0.5)
        if (t1 - t0) / span > 0.12:
            ax.text((t0 + (t1 - t0) / 2) / 60.0, y, b["label"], ha="center", va="center", fontsize=7, color="white",
                    clip_on=True)
    ax.set_yticks(range(len(gpus)), gpus, fontsize=8)
    ax.set_ylim(-0.7, len(gpus) - 0.3)
    ax.invert_yaxis()
    ax.set_xlim(0, span / 60.0)
    ax.set_xlabel(f"minutes since {start:%H:%M:%S} UTC (now at the right edge)", fontsize=8)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#e5e7eb", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if order:
        from matplotlib.patches import Patch

        handles = [Patch(color=color_of(j, order), label=j) for j in order[:10]]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                  title="jobs" + (f" (10 of {len(order)})" if len(order) > 10 else ""), title_fontsize=7)
    return _svg(fig, "gpu-timeline")


def predicted_vs_measured(points: Sequence[Mapping[str, Any]]) -> str:
    """Measured against predicted throughput, one point per job (log-log, each unit its own marker); the
    diagonal is a perfect prediction. A CPU measurement is drawn hollow: not comparable with a GPU's."""
    return _scatter(json.dumps(list(points), sort_keys=True, default=str))


@functools.lru_cache(maxsize=16)
def _scatter(key: str) -> str:
    from matplotlib.figure import Figure

    points = json.loads(key)
    fig = Figure(figsize=(5.6, 4.0), dpi=96)
    ax = fig.add_subplot()
    values = [v for p in points for v in (p["predicted"], p["measured"]) if v and v > 0]
    lo, hi = (min(values) / 2, max(values) * 2) if values else (1.0, 10.0)
    ax.plot([lo, hi], [lo, hi], color="#9ca3af", linewidth=1, linestyle="--", label="measured = predicted")
    markers = {"samples/s": "o", "tokens/s": "s"}
    for unit in sorted({p["unit"] for p in points}):
        for on_cpu in (False, True):
            sel = [p for p in points if p["unit"] == unit and bool(p["on_cpu"]) == on_cpu]
            if not sel:
                continue
            where = "this machine's CPU" if on_cpu else "a GPU"
            ax.scatter([p["predicted"] for p in sel], [p["measured"] for p in sel], marker=markers.get(unit, "o"),
                       facecolors="none" if on_cpu else "#3b82f6", edgecolors="#1d4ed8", s=36,
                       label=f"{unit}, measured on {where}")
    for p in points[:12]:
        ax.annotate(p["job_id"][-18:], (p["predicted"], p["measured"]), fontsize=6, xytext=(4, 3),
                    textcoords="offset points", color="#374151")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    for axis in (ax.xaxis, ax.yaxis):  # whole decades, written as numbers (1,000 not 10^3)
        axis.set_major_locator(LogLocator(base=10))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("predicted throughput beside its partner (unit/s)", fontsize=8)
    ax.set_ylabel("measured throughput (unit/s)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(color="#e5e7eb", linewidth=0.6, which="both")
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    return _svg(fig, "predicted-measured")


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
