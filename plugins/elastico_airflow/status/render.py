"""The scheduling-status page as one self-contained HTML document (inline CSS and SVG, no script, no CDN).

Server-side rendering keeps the page working offline and inside the Airflow UI's iframe, and makes it
trivially the same data as the JSON endpoint: both are views of ``status_snapshot``. Every value is
HTML-escaped; elements carry ``data-gpu`` / ``data-job`` attributes so tests (and people) can find them.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PALETTE = ("#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#14b8a6", "#f97316", "#64748b")
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#1f2937;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #e5e7eb}
.muted{color:#6b7280;font-size:12px} .grid{display:flex;flex-wrap:wrap;gap:12px}
.gpu{border:1px solid #d1d5db;border-radius:8px;padding:10px;width:400px}
.gpu table{table-layout:fixed;word-break:break-word}
.gpu h3{font-size:14px;margin:0 0 6px} table{border-collapse:collapse;font-size:12px;width:100%}
th,td{text-align:left;padding:3px 6px;border-bottom:1px solid #f3f4f6;vertical-align:top}
th{background:#f9fafb} .pill{display:inline-block;padding:0 6px;border-radius:9px;background:#eef2ff;font-size:11px}
.st-running{background:#dcfce7} .st-admitted{background:#e0f2fe} .st-switching{background:#fef3c7}
.st-pending{background:#f3f4f6} .st-finished{background:#e5e7eb} .st-failed{background:#fee2e2}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any, fmt: str = ".3g") -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "–"
    return format(value, fmt)


def _color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def memory_bar(gpu: Mapping[str, Any], colors: Mapping[str, str], width: int = 400, height: int = 18) -> str:
    """Stacked bar: each job's reserved memory on the GPU, against the usable capacity."""
    cap = float(gpu.get("capacity_mib") or 0.0) or 1.0
    x = 0.0
    parts = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f3f4f6" rx="3"/>']
    for job in gpu["jobs"]:
        w = width * min(1.0, float(job.get("memory_mib") or 0.0) / cap)
        title = f"{job['id']}: {_num(job.get('memory_mib'), '.0f')} MiB"
        parts.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{colors.get(job["id"], "#9ca3af")}" '
            f'data-job="{_e(job["id"])}"><title>{_e(title)}</title></rect>'
        )
        x += w
    used = float(gpu.get("used_mem_mib") or 0.0)
    label = f"{used / 1024:.1f} / {cap / 1024:.1f} GiB"
    parts.append(
        f'<text x="{width - 4}" y="{height - 5}" font-size="10" text-anchor="end" fill="#111827">{_e(label)}</text>'
    )
    return f'<svg width="{width}" height="{height}" role="img" aria-label="memory {_e(label)}">{"".join(parts)}</svg>'


def price_chart(prices: Mapping[str, Any], width: int = 700, height: int = 220) -> str:
    """Shadow prices per good over the recorded epochs: one polyline each, with a legend."""
    epochs: Sequence[int] = prices.get("epochs") or []
    series: Mapping[str, Sequence[float | None]] = prices.get("series") or {}
    if not epochs or not series:
        return '<p class="muted" id="prices-empty">No epochs recorded yet.</p>'
    pad_l, pad_b, pad_t, pad_r = 44, 24, 8, 160
    values = [v for s in series.values() for v in s if isinstance(v, (int, float))]
    top = max(values, default=1.0) or 1.0
    lo_e, hi_e = min(epochs), max(epochs)
    span = (hi_e - lo_e) or 1

    def px(i: int, v: float) -> tuple[float, float]:
        x = pad_l + (width - pad_l - pad_r) * (epochs[i] - lo_e) / span
        y = pad_t + (height - pad_t - pad_b) * (1 - v / top)
        return x, y

    out = [f'<svg id="price-chart" width="{width}" height="{height}" role="img" aria-label="shadow prices">']
    out.append(
        f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" stroke="#9ca3af"/>'
    )
    out.append(f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#9ca3af"/>')
    for frac in (0.0, 0.5, 1.0):
        y = pad_t + (height - pad_t - pad_b) * (1 - frac)
        out.append(f'<text x="{pad_l - 4}" y="{y + 3:.1f}" font-size="10" text-anchor="end">{_num(top * frac)}</text>')
    out.append(f'<text x="{pad_l}" y="{height - 6}" font-size="10">epoch {lo_e}</text>')
    out.append(f'<text x="{width - pad_r}" y="{height - 6}" font-size="10" text-anchor="end">epoch {hi_e}</text>')
    for k, (good, vals) in enumerate(sorted(series.items())):
        pts = [px(i, float(v)) for i, v in enumerate(vals) if isinstance(v, (int, float))]
        color = _color(k)
        if len(pts) == 1:
            out.append(f'<circle cx="{pts[0][0]:.1f}" cy="{pts[0][1]:.1f}" r="3" fill="{color}"/>')
        elif pts:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" data-good="{_e(good)}"/>'
            )
        ly = pad_t + 14 * k + 8
        out.append(f'<rect x="{width - pad_r + 10}" y="{ly - 8}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{width - pad_r + 24}" y="{ly + 1}" font-size="11">{_e(good)}</text>')
    out.append("</svg>")
    return "".join(out)


def _table(headers: Iterable[str], rows: Iterable[str], empty: str, table_id: str) -> str:
    body = "".join(rows)
    if not body:
        return f'<p class="muted" id="{table_id}-empty">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _pill(status: str) -> str:
    return f'<span class="pill st-{_e(status)}">{_e(status)}</span>'


def render_page(data: Mapping[str, Any], *, user: str = "") -> str:
    """The whole page for ``status_snapshot`` data."""
    ids = [j["id"] for g in data["gpus"] for j in g["jobs"]]
    colors = {job_id: _color(i) for i, job_id in enumerate(dict.fromkeys(ids))}
    counts = ", ".join(f"{k} {v}" for k, v in sorted(data["counts"].items())) or "no jobs"
    cards = []
    for g in data["gpus"]:
        jobs = "".join(
            f'<tr data-job="{_e(j["id"])}"><td><span style="color:{colors.get(j["id"], "#999")}">■</span> '
            f'{_e(j["id"])}<br><span class="muted">{_e(j["workload"])}</span></td><td>{_pill(j["status"])}</td>'
            f"<td>{_e(j['knobs_short'])}{' → ' + _e(j['target_knobs']) if j.get('target_knobs') else ''}</td>"
            f"<td>{_num(j.get('memory_mib'), '.0f')} MiB</td><td>{_num(j.get('predicted_slowdown'), '.2f')}×</td></tr>"
            for j in g["jobs"]
        )
        table = (
            (
                f"<table><thead><tr><th>job</th><th>status</th><th>knobs</th><th>memory</th><th>slowdown</th></tr>"
                f"</thead><tbody>{jobs}</tbody></table>"
            )
            if jobs
            else '<p class="muted">idle</p>'
        )
        absent = "" if g.get("present", True) else ' <span class="pill st-failed">not in cluster</span>'
        cards.append(
            f'<div class="gpu" data-gpu="{_e(g["id"])}"><h3>{_e(g["id"])} <span class="muted">{_e(g["model"])}'
            f" · {len(g['jobs'])}/{g['max_jobs']} jobs</span>{absent}</h3>{memory_bar(g, colors)}{table}</div>"
        )
    queue = [
        f'<tr data-job="{_e(q["id"])}"><td>{_e(q["id"])}</td><td>{_e(q["workload"])}</td><td>{_num(q.get("floor"))}</td>'
        f"<td>{_num(q.get('waiting_s'), '.0f')} s</td><td>{_e(q.get('queue_code'))}</td><td>{_e(q['reason'])}</td></tr>"
        for q in data["queue"]
    ]
    decisions = [
        f"<tr><td>{_e(d['epoch'])}</td><td>{_e(d['kind'])}</td><td>{_e(d['job_id'])}</td>"
        f"<td>{_e(d.get('from_knobs') or '')}{' → ' if d.get('to_knobs') else ''}{_e(d.get('to_knobs') or '')}</td>"
        f"<td>{_e(', '.join(d.get('to_gpus') or []))}</td><td>{_e(d['reason'])}</td></tr>"
        for d in data["decisions"]
    ]
    slow = [
        f'<tr data-job="{_e(s["job_id"])}"><td>{_e(s["job_id"])}</td><td>{_e(s["workload"])}</td><td>{_e(s["knobs"])}</td>'
        f"<td>{'yes' if s['colocated'] else 'no'}</td><td>{_num(s.get('predicted_slowdown'), '.2f')}×</td>"
        f"<td>{_num(s.get('predicted_throughput'))}</td><td>{_num(s.get('measured_throughput'))}</td>"
        f"<td>{_num(s.get('measured_slowdown'), '.2f')}×</td></tr>"
        for s in data["slowdowns"]
    ]
    finished = [
        f'<tr data-job="{_e(f["id"])}"><td>{_e(f["id"])}</td><td>{_pill(f["status"])}</td><td>{_e(f["knobs_short"])}</td>'
        f"<td>{_num(f.get('measured_throughput'))}</td><td>{_e(f['reason'])}</td></tr>"
        for f in data.get("finished", [])
    ]
    who = f" · signed in as {_e(user)}" if user else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
<title>ElastiCo scheduling status</title><style>{CSS}</style></head>
<body>
<h1>ElastiCo scheduling status</h1>
<div class="muted" id="summary">{_e(counts)} · state: {_e(data["state"]["backend"])} · {_e(data["generated_at"])}{who}
 · <a href="api/status">JSON</a></div>
<h2>GPUs</h2><div class="grid" id="gpus">{"".join(cards) or '<p class="muted">No GPUs yet: start the controller.</p>'}</div>
<h2>Queue</h2>{_table(["job", "workload", "floor", "waiting", "code", "reason"], queue, "The queue is empty.", "queue")}
<h2>Shadow prices</h2>{price_chart(data["prices"])}
<h2>Recent decisions</h2>{_table(["epoch", "decision", "job", "knobs", "GPUs", "reason"], decisions, "No decisions yet.", "decisions")}
<h2>Predicted vs measured slowdown</h2>
<p class="muted">measured slowdown = predicted isolated throughput / measured throughput (a CPU demo measures far below a GPU).</p>
{_table(["job", "workload", "knobs", "co-located", "predicted", "predicted T", "measured T", "measured"], slow, "No measurements yet.", "slowdowns")}
<h2>Recently ended</h2>{_table(["job", "status", "knobs", "measured T", "reason"], finished, "Nothing has ended yet.", "finished")}
{_profile_problems(data.get("profile_problems") or [])}
</body></html>"""


def _profile_problems(notes: list[str]) -> str:
    """Defective profile files and quarantined rows: left out of planning, the estimator stands in."""
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<h2>Profile store problems ({len(notes)})</h2><ul id="profile-problems">{items}</ul>'
