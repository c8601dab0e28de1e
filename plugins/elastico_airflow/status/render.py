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
.node{border:1px solid #d1d5db;border-radius:8px;padding:10px;width:560px}
.node h3{font-size:14px;margin:0 0 6px} .meter{display:flex;align-items:center;gap:6px;font-size:12px;margin:2px 0}
.meter .lbl{width:90px} .meter svg{flex:none} .links a{font-size:11px;margin-right:6px;color:#2563eb}
.hint{color:#6b7280;font-size:11px}
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


def job_links(row: Mapping[str, Any]) -> str:
    """Links from a job to its Airflow task instance, its log and its MLflow run (those that exist)."""
    links = row.get("links") or {}
    labels = (("task_instance", "task"), ("log", "log"), ("mlflow_run", "MLflow run"))
    parts = [
        f'<a href="{_e(links[key])}" data-link="{key}" target="_top">{label}</a>' for key, label in labels if links.get(key)
    ]
    return f'<span class="links">{"".join(parts)}</span>' if parts else ""


def _gib(mib: Any) -> str:
    return f"{_num(float(mib) / 1024, '.1f')} GiB" if isinstance(mib, (int, float)) else "–"


def meter(label: str, used: float, total: float, text: str, width: int = 260) -> str:
    """One horizontal gauge: ``used`` of ``total`` (red past 90 %)."""
    frac = 0.0 if total <= 0 else max(0.0, min(1.0, used / total))
    color = "#ef4444" if frac > 0.9 else "#3b82f6"
    return (
        f'<div class="meter"><span class="lbl">{_e(label)}</span><svg width="{width}" height="12" role="img" '
        f'aria-label="{_e(label)} {_e(text)}"><rect width="{width}" height="12" fill="#f3f4f6" rx="3"/>'
        f'<rect width="{width * frac:.1f}" height="12" fill="{color}" rx="3"/></svg><span>{_e(text)}</span></div>'
    )


def node_cards(nodes: Sequence[Mapping[str, Any]]) -> str:
    """The node view: each node's GPUs, CPU cores and host memory, and what each job holds there."""
    cards = []
    for n in nodes:
        rows = "".join(
            f'<tr data-job="{_e(j["id"])}"><td>{_e(j["id"])} {_pill(j["status"])}<br>{job_links(j)}</td>'
            f"<td>{_e(', '.join(j['gpus']))}</td><td>{_gib(j['gpu_mem_mib'])}</td>"
            f"<td>{_num(j['cpu_cores'], '.3g')}</td><td>{_gib(j['host_mem_mib'])}</td></tr>"
            for j in n["jobs"]
        )
        table = (
            f"<table><thead><tr><th>job</th><th>GPUs</th><th>GPU memory</th><th>CPU cores</th><th>host memory</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>"
            if rows
            else '<p class="muted">no jobs</p>'
        )
        cards.append(
            f'<div class="node" data-node="{_e(n["name"])}"><h3>{_e(n["name"])} <span class="muted">'
            f"{n['gpus']} × {_e(n['gpu_model'])}</span></h3>"
            + meter("GPUs busy", n["gpus_busy"], n["gpus"], f"{n['gpus_busy']} / {n['gpus']}")
            + meter("CPU cores", n["cpu_used"], n["cpu_cores"], f"{_num(n['cpu_used'], '.3g')} / {_num(n['cpu_cores'], '.3g')} cores")
            + meter("host memory", n["host_used_mib"], n["host_mem_mib"], f"{_gib(n['host_used_mib'])} / {_gib(n['host_mem_mib'])}")
            + table
            + "</div>"
        )
    return "".join(cards)


def _rate(value: Any, unit: str | None) -> str:
    text = _num(value, ",.4g")
    return text if text == "–" else f"{text} {_e(unit or '')}".strip()


def render_page(data: Mapping[str, Any], *, user: str = "") -> str:
    """The whole page for ``status_snapshot`` data."""
    ids = [j["id"] for g in data["gpus"] for j in g["jobs"]]
    colors = {job_id: _color(i) for i, job_id in enumerate(dict.fromkeys(ids))}
    counts = ", ".join(f"{k} {v}" for k, v in sorted(data["counts"].items())) or "no jobs"
    cards = []
    for g in data["gpus"]:
        jobs = "".join(
            f'<tr data-job="{_e(j["id"])}"><td><span style="color:{colors.get(j["id"], "#999")}">■</span> '
            f'{_e(j["id"])}<br><span class="muted">{_e(j["workload"])}</span><br>{job_links(j)}</td><td>{_pill(j["status"])}</td>'
            f"<td>{_e(j['knobs_short'])}{' → ' + _e(j['target_knobs']) if j.get('target_knobs') else ''}</td>"
            f"<td>{_gib(j.get('memory_mib'))}</td><td>{_num(j.get('predicted_slowdown'), '.2f')}×</td></tr>"
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
        f'<tr data-job="{_e(q["id"])}"><td data-position="{_e(q.get("position"))}">#{_e(q.get("position"))}</td>'
        f'<td>{_e(q["id"])}<br>{job_links(q)}</td><td>{_e(q["workload"])}{_queue_of(q)}</td>'
        f"<td>{_rate(q.get('floor'), q.get('unit'))}</td><td>{_num(q.get('waiting_s'), '.0f')} s</td>"
        f"<td class=\"why\">{_e(q.get('why') or q['reason'])}<br><span class=\"hint\">{_e(q.get('admit_hint') or '')}</span></td>"
        f"<td>{_e(q.get('queue_code'))}</td></tr>"
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
        f"<td>{_num(s.get('measured_slowdown'), '.2f')}×</td><td class=\"muted\">{_e(s.get('measured_on') or '')}</td></tr>"
        for s in data["slowdowns"]
    ]
    finished = [
        f'<tr data-job="{_e(f["id"])}"><td>{_e(f["id"])}<br>{job_links(f)}</td><td>{_pill(f["status"])}</td>'
        f"<td>{_e(f['knobs_short'])}</td><td>{_rate(f.get('measured_throughput'), f.get('unit'))}</td><td>{_e(f['reason'])}</td></tr>"
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
<h2>Nodes</h2><div class="grid" id="nodes">{node_cards(data.get("nodes") or []) or '<p class="muted">No cluster recorded yet: start the controller.</p>'}</div>
<h2>GPUs</h2><div class="grid" id="gpus">{"".join(cards) or '<p class="muted">No GPUs yet: start the controller.</p>'}</div>
{queue_view(data.get("queues") or [])}
<h2>Queue</h2>
<p class="muted">In the controller's order (priority, then registration). Why each job waits, and what would admit it sooner.</p>
{_table(["pos", "job", "workload", "floor", "waiting", "why it waits", "code"], queue, "The queue is empty.", "queue")}
<h2>Shadow prices</h2>
<p class="muted">Price of one whole unit of each good (a GPU's memory, SMs, job slot; a node's CPU, host memory), in
shares of a job's score (weight × throughput / its best throughput): 0 means nothing is scarce.</p>
{price_chart(data["prices"])}
<h2>Recent decisions</h2>{_table(["epoch", "decision", "job", "knobs", "GPUs", "reason"], decisions, "No decisions yet.", "decisions")}
<h2>Predicted vs measured slowdown</h2>
<p class="muted">measured slowdown = predicted isolated throughput / measured throughput (a CPU demo measures far below a GPU).</p>
{_table(["job", "workload", "knobs", "co-located", "predicted", "predicted T", "measured T", "measured", "measured on"], slow, "No measurements yet.", "slowdowns")}
<h2>Recently ended</h2>{_table(["job", "status", "knobs", "measured throughput", "last word"], finished, "Nothing has ended yet.", "finished")}
{_profile_problems(data.get("profile_problems") or [])}
</body></html>"""


def _queue_of(row: Mapping[str, Any]) -> str:
    queue = row.get("queue")
    return f'<br><span class="muted">queue {_e(queue)}</span>' if queue and queue != "default" else ""


def queue_view(queues: Sequence[Mapping[str, Any]]) -> str:
    """Teams' queues: each one's use against its nominal quota (past it: borrowed), what it lends, its fair share."""
    if not queues:
        return ""
    rows = []
    for q in queues:
        nominal, used = float(q["nominal_gpus"]), float(q["used_gpus"])
        gauge = meter("in use / nominal", used, max(nominal, used, 1e-9) if used > nominal else nominal,
                      f"{_num(used, '.2f')} / {_num(nominal, '.3g')} GPUs", width=160)
        rows.append(
            f'<tr data-queue="{_e(q["name"])}"><td>{_e(q["name"])}</td><td>{_e(q.get("cohort") or "–")}</td>'
            f"<td>{_num(q['weight'], '.3g')}</td><td>{gauge}</td><td>{_num(q['borrowed_gpus'], '.2f')}</td>"
            f"<td>{_num(q['lent_gpus'], '.2f')}</td><td>{_e(q['pending'])}</td><td>{_num(q['fair_share_gpus'], '.2f')}</td>"
            f"<td>{_num(q['price'], '.3g')}</td></tr>"
        )
    table = _table(["queue", "cohort", "weight", "in use", "borrowed", "lent", "pending", "fair share", "price"], rows,
                   "No queues.", "queues")
    return (
        '<h2>Teams\' queues</h2><p class="muted">GPUs\' worth: a shared GPU is charged to each job by the larger of its '
        "SM and memory shares (at least one slot). Nominal quota is guaranteed; unused quota is lent in the cohort and "
        "comes back within a few epochs; fair share is what a queue may hold now.</p>" + table
    )


def _profile_problems(notes: list[str]) -> str:
    """Defective profile files and quarantined rows: left out of planning, the estimator stands in."""
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<h2>Profile store problems ({len(notes)})</h2><ul id="profile-problems">{items}</ul>'
