"""The evaluation report: tables shaped like the paper's Tables 4, 5 and 8, in markdown and HTML.

Pure functions from metrics to text; writing files is ``write_report``'s only side effect.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elastico_core.sim.metrics import PolicyMetrics, normalised
from elastico_core.sim.policy import PolicyKind
from elastico_core.sim.registry import LABELS
from elastico_core.sim.seeds import LOWER_IS_BETTER, SeedSummary, Spread

TABLE4_HEADER = ("System", "Avg JCT", "Throughput", "SM Util. (%)", "Attainment (%)")
TABLE5_HEADER = ("Configuration", "Avg JCT", "Throughput", "Mem Util. (%)", "SM Util. (%)")
MAIN = (PolicyKind.VOLCANO, PolicyKind.LUCID, PolicyKind.ELASTICO)
ABLATIONS = (PolicyKind.ELASTICO_NO_RST, PolicyKind.GREEDY, PolicyKind.ELASTICO_NO_IAC, PolicyKind.ELASTICO_NO_PDS)


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""

    def to_md(self) -> str:
        out = [f"### {self.title}", "", "| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.note:
            out += ["", self.note]
        return "\n".join(out) + "\n"

    def to_html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        note = f"<p class='note'>{html.escape(self.note)}</p>" if self.note else ""
        return f"<h3>{html.escape(self.title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def _x(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:.2f}x"


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def label(name: str) -> str:
    try:
        return LABELS[PolicyKind(name)]
    except ValueError:
        return name


def table4(metrics: Mapping[str, PolicyMetrics], baseline: str) -> Table | None:
    names = [k.value for k in MAIN if k.value in metrics] or [n for n in metrics if n == baseline]
    if not names:
        return None
    base = metrics[baseline]
    rows = []
    for n in names:
        r = normalised(metrics[n], base)
        rows.append((label(n), _x(r["avg_jct"]), _x(r["throughput"]), _pct(metrics[n].sm_util), _pct(metrics[n].attainment)))
    return Table(
        f"Table 4 shape: main comparison ({base.gpus} GPUs), normalised to {label(baseline)}",
        TABLE4_HEADER,
        tuple(rows),
    )


def table5(metrics: Mapping[str, PolicyMetrics]) -> Table | None:
    full = PolicyKind.ELASTICO.value
    present = [k.value for k in ABLATIONS if k.value in metrics]
    if full not in metrics or not present:
        return None
    base = metrics[full]
    rows = [(label(full), "1.00x", "1.00x", _pct(base.mem_util), _pct(base.sm_util))]
    for n in present:
        r = normalised(metrics[n], base)
        rows.append((label(n), _x(r["avg_jct"]), _x(r["throughput"]), _pct(metrics[n].mem_util), _pct(metrics[n].sm_util)))
    return Table(
        "Table 5 shape: ablations, normalised to full ElastiCo",
        TABLE5_HEADER,
        tuple(rows),
    )


def detail_table(metrics: Mapping[str, PolicyMetrics]) -> Table:
    rows = []
    for n, m in metrics.items():
        rows.append((
            label(n), f"{m.jobs_finished}/{m.jobs_total}", f"{m.avg_jct_s / 3600:.2f}", f"{m.median_jct_s / 3600:.2f}",
            f"{m.p95_jct_s / 3600:.2f}", f"{m.avg_queue_s / 60:.1f}", f"{m.throughput:.1f}", _pct(m.sm_util),
            _pct(m.mem_util), _pct(m.gpu_busy), _pct(m.attainment), f"{m.sched_latency_ms_p50:.2f}",
            f"{m.sched_latency_ms_p99:.1f}", f"{m.reconfig_per_gpu_hour:.2f}", str(m.oom_restarts),
        ))
    return Table(
        "All metrics",
        ("Policy", "Finished", "Avg JCT (h)", "Median JCT (h)", "p95 JCT (h)", "Avg queue (min)", "Throughput",
         "SM (%)", "Mem (%)", "GPUs busy (%)", "Attain. (%)", "Sched p50 (ms)", "Sched p99 (ms)",
         "Reconf./GPU-h", "OOM restarts"),
        tuple(rows),
        "Throughput is useful work per second in the window, in default-configuration GPU-seconds per second "
        "(a static scheduler keeping every GPU busy scores the GPU count).",
    )


def _spread_x(sp: Spread) -> str:
    return "-" if not math.isfinite(sp.mean) else f"{sp.mean:.2f}x ({sp.low:.2f}-{sp.high:.2f})"


def _spread_pct(sp: Spread) -> str:
    return "-" if not math.isfinite(sp.mean) else f"{100 * sp.mean:.1f} ({100 * sp.low:.1f}-{100 * sp.high:.1f})"


def table4_seeds(summary: SeedSummary) -> Table | None:
    """Table 4 over seeds: each ratio's geometric mean over seeds, and its range."""
    names = [k.value for k in MAIN if k.value in summary.policies]
    if not names:
        return None
    rows = [
        (label(n), _spread_x(summary.ratio(n, "avg_jct")), _spread_x(summary.ratio(n, "throughput")),
         _spread_pct(summary.metric(n, "sm_util")), _spread_pct(summary.metric(n, "attainment")))
        for n in names
    ]
    return Table(
        f"Table 4 shape over {len(summary.seeds)} seeds, normalised to {label(summary.baseline)} per seed",
        TABLE4_HEADER,
        tuple(rows),
        "Ratios: geometric mean over seeds (range in brackets); utilisation and attainment: mean (range).",
    )


def table5_seeds(summary: SeedSummary) -> Table | None:
    full = PolicyKind.ELASTICO.value
    present = [k.value for k in ABLATIONS if k.value in summary.policies]
    if full not in summary.policies or not present:
        return None
    rows = [(label(full), "1.00x", "1.00x", _spread_pct(summary.metric(full, "mem_util")), _spread_pct(summary.metric(full, "sm_util")))]
    rows += [
        (label(n), _spread_x(summary.ratio(n, "avg_jct", full)), _spread_x(summary.ratio(n, "throughput", full)),
         _spread_pct(summary.metric(n, "mem_util")), _spread_pct(summary.metric(n, "sm_util")))
        for n in present
    ]
    return Table(
        f"Table 5 shape over {len(summary.seeds)} seeds, normalised to full ElastiCo per seed",
        TABLE5_HEADER,
        tuple(rows),
        "Ratios: geometric mean over seeds (range in brackets); utilisation: mean (range).",
    )


def seeds_table(summary: SeedSummary) -> Table:
    """Average JCT of every policy on every seed, over the baseline's on that seed."""
    by_policy = [summary.ratios(p, "avg_jct") for p in summary.policies]
    rows = [
        (str(s), f"{summary.per_seed[s][summary.baseline].avg_jct_s / 3600:.2f}", *(_x(r[i]) for r in by_policy))
        for i, s in enumerate(summary.seeds)
    ]
    return Table(
        f"Average JCT per seed, over {label(summary.baseline)}'s",
        ("Seed", f"{label(summary.baseline)} avg JCT (h)", *(label(p) for p in summary.policies)),
        tuple(rows),
    )


def claims_table(summary: SeedSummary) -> Table | None:
    claims = summary.claims()
    if not claims:
        return None
    word = {"avg_jct": "average JCT", "throughput": "throughput", "sm_util": "SM utilisation"}
    rows = tuple(
        (f"{label(c.policy)} {'below' if c.figure in LOWER_IS_BETTER else 'above'} {label(c.other)}", word.get(c.figure, c.figure),
         f"{c.held} of {c.seeds}")
        for c in claims
    )
    return Table("The paper's orderings, seed by seed", ("Claim", "Figure", "Holds on"), rows)


@dataclass(frozen=True, slots=True)
class ScalingRow:
    gpus: int
    load: float
    baseline: PolicyMetrics
    metrics: Mapping[str, PolicyMetrics]


def table8(rows: Sequence[ScalingRow], policy: str = PolicyKind.ELASTICO.value) -> Table:
    out = []
    for r in rows:
        if policy not in r.metrics:
            continue
        m = r.metrics[policy]
        n = normalised(m, r.baseline)
        out.append((str(r.gpus), _x(n["avg_jct"]), _x(n["throughput"]), f"{100 * m.sm_util:.0f}", f"{m.sched_latency_ms_p50:.1f}"))
    return Table(
        f"Table 8 shape: {label(policy)} at increasing scale, normalised to {label(rows[0].baseline.policy) if rows else 'the baseline'}",
        ("GPUs", "Avg JCT", "Throughput", "SM Util. (%)", "Sched. Latency (ms)"),
        tuple(out),
    )


def load_table(rows: Sequence[ScalingRow], policy: str = PolicyKind.ELASTICO.value) -> Table:
    out = []
    for r in rows:
        if policy not in r.metrics:
            continue
        m = r.metrics[policy]
        out.append((f"{100 * r.load:.0f} %", f"{r.baseline.avg_jct_s / 3600:.2f}", f"{m.avg_jct_s / 3600:.2f}",
                    _x(r.baseline.avg_jct_s / m.avg_jct_s if m.avg_jct_s > 0 else math.nan)))
    gpus = rows[0].gpus if rows else 0
    return Table(
        f"Load sweep at {gpus} GPUs (§5.6)",
        ("Arrival rate", f"{label(rows[0].baseline.policy) if rows else 'baseline'} avg JCT (h)",
         f"{label(policy)} avg JCT (h)", "JCT improvement"),
        tuple(out),
    )


def gpus_needed_table(needed: Mapping[str, int | None], base_gpus: int, targets: str) -> Table:
    base = needed.get(PolicyKind.VOLCANO.value)
    rows = []
    for n, g in needed.items():
        saving = "-" if g is None or not base else f"{100 * (1 - g / base):.0f} %"
        rows.append((label(n), str(g) if g is not None else f"> {base_gpus}", saving))
    return Table(f"GPUs needed to serve the mix generated for {base_gpus} GPUs", ("Policy", "GPUs", "fewer than Volcano-like"),
                 tuple(rows), targets)


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    intro: tuple[str, ...]
    tables: tuple[Table, ...]
    plots: Mapping[str, str] = field(default_factory=dict)  # caption -> relative file name

    def to_md(self) -> str:
        parts = [f"# {self.title}", "", *self.intro, ""]
        parts += [t.to_md() for t in self.tables]
        for caption, name in self.plots.items():
            parts.append(f"![{caption}]({name})\n")
        return "\n".join(parts)

    def to_html(self) -> str:
        intro = "".join(f"<p>{html.escape(p)}</p>" for p in self.intro)
        tables = "".join(t.to_html() for t in self.tables)
        plots = "".join(
            f"<figure><img src='{html.escape(n)}' alt='{html.escape(c)}'><figcaption>{html.escape(c)}</figcaption></figure>"
            for c, n in self.plots.items()
        )
        style = (
            "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
            "td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}th{background:#eee}"
            "td:first-child{text-align:left}img{max-width:100%}.note{color:#555;font-size:90%}"
        )
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(self.title)}</h1>{intro}{tables}{plots}</body></html>"
        )


def write_report(out: Path, report: Report, metrics_json: Mapping[str, object]) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"metrics": out / "metrics.json", "markdown": out / "report.md", "html": out / "report.html"}
    paths["metrics"].write_text(json.dumps(metrics_json, indent=2) + "\n")
    paths["markdown"].write_text(report.to_md())
    paths["html"].write_text(report.to_html())
    return paths
