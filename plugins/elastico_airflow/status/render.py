"""The scheduling-status page: one HTML body that Airflow's menu shows (``render_fragment``, inside the
React app of the plugin) and the standalone page wraps (``render_page``).

Server-side rendering keeps the page working without a build step and makes it trivially the same data as
the JSON endpoint: both are views of ``status_snapshot``. The CSS is scoped under ``.eco`` so it never
restyles Airflow's own page; the charts are matplotlib SVG (``charts``); every value is HTML-escaped;
elements carry ``data-gpu`` / ``data-job`` / ``data-col`` attributes so tests (and people) can find them.
Throughputs always carry their unit, knobs their legend.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from elastico_airflow.status.charts import PALETTE, gpu_timeline, predicted_vs_measured

CSS = """
.eco{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1f2937;background:#fff;padding:12px 16px;
 font-size:13px;line-height:1.35}
.eco h1{font-size:20px;margin:0 0 4px} .eco h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #e5e7eb}
.eco .muted{color:#6b7280;font-size:12px} .eco .grid{display:flex;flex-wrap:wrap;gap:12px}
.eco .gpu{border:1px solid #d1d5db;border-radius:8px;padding:10px;width:400px}
.eco .gpu table{table-layout:fixed;word-break:break-word}
.eco .gpu h3,.eco .node h3{font-size:14px;margin:0 0 6px}
.eco table{border-collapse:collapse;font-size:12px;width:100%}
.eco th,.eco td{text-align:left;padding:3px 6px;border-bottom:1px solid #f3f4f6;vertical-align:top}
.eco th{background:#f9fafb} .eco .pill{display:inline-block;padding:0 6px;border-radius:9px;background:#eef2ff;font-size:11px}
.eco .st-running{background:#dcfce7} .eco .st-admitted{background:#e0f2fe} .eco .st-switching{background:#fef3c7}
.eco .st-pending{background:#f3f4f6} .eco .st-finished{background:#e5e7eb} .eco .st-failed{background:#fee2e2}
.eco .st-cancelled{background:#fde68a}
.eco .node{border:1px solid #d1d5db;border-radius:8px;padding:10px;width:560px}
.eco .meter{display:flex;align-items:center;gap:6px;font-size:12px;margin:2px 0}
.eco .meter .lbl{width:90px} .eco .meter svg{flex:none} .eco .links a{font-size:11px;margin-right:6px;color:#2563eb}
.eco .hint{color:#6b7280;font-size:11px} .eco .bar{background:#e5e7eb;border-radius:4px;height:8px;width:140px}
.eco .bar span{display:block;height:8px;border-radius:4px;background:#22c55e}
.eco form.filters{display:flex;gap:10px;align-items:end;flex-wrap:wrap;margin:8px 0}
.eco form.filters label{display:flex;flex-direction:column;font-size:11px;color:#4b5563}
.eco select,.eco button{font-size:12px;padding:2px 6px;border:1px solid #d1d5db;border-radius:4px;background:#fff;
 color:#1f2937} .eco h1{font-weight:600} .eco h2{font-weight:600} .eco a{color:#2563eb}
.eco button.cancel{color:#b91c1c;border:1px solid #fca5a5;background:#fff;border-radius:4px;cursor:pointer}
.eco .chart svg{max-width:100%;height:auto} .eco .note{background:#fefce8;padding:4px 8px;border-radius:4px}
"""

# cancel from the standalone page: the same request the React app makes (POST, JSON, the page's token)
PAGE_SCRIPT = """
document.addEventListener('click', async (ev) => {
  const btn = ev.target.closest('button[data-cancel]');
  if (!btn) return;
  const root = document.getElementById('eco');
  const id = btn.getAttribute('data-cancel');
  if (!confirm('Cancel job ' + id + '? Its GPUs are released and its process is stopped.')) return;
  const res = await fetch(root.dataset.api + 'api/jobs/' + encodeURIComponent(id) + '/cancel', {
    method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-ElastiCo-CSRF': root.dataset.csrf}, body: '{}'});
  const body = await res.json().catch(() => ({}));
  if (!res.ok) { alert('Not cancelled: ' + (body.detail || res.status)); return; }
  location.reload();
});
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
        title = f"{job['id']}: {_num(float(job.get('memory_mib') or 0.0) / 1024, '.1f')} GiB"
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


def _table(headers: Iterable[str], rows: Iterable[str], empty: str, table_id: str,
           cols: Sequence[str] | None = None) -> str:
    body = "".join(rows)
    if not body:
        return f'<p class="muted" id="{table_id}-empty">{_e(empty)}</p>'
    names = list(cols) if cols else [""] * len(list(headers))
    head = "".join(f'<th data-col="{_e(c)}">{_e(h)}</th>' if c else f"<th>{_e(h)}</th>"
                   for h, c in zip(headers, names, strict=False))
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


def progress_cell(progress: Mapping[str, Any] | None, status: str) -> str:
    """A progress bar and its words (``12/20 steps (60%), ETA 30 s``), or what is known before a report."""
    if not progress:
        text = "starting" if status == "admitted" else "no report yet" if status in ("running", "switching") else "–"
        return f'<td class="progress" data-col="progress"><span class="muted">{_e(text)}</span></td>'
    frac = progress.get("fraction")
    bar = (f'<div class="bar" title="{100 * frac:.0f}%"><span style="width:{100 * frac:.0f}%"></span></div>'
           if isinstance(frac, (int, float)) else "")
    return (f'<td class="progress" data-col="progress">{bar}{_e(progress["text"])}'
            f'<br><span class="hint">reported {_e(progress.get("age"))} ago</span></td>')


def _cancel(job_id: str, may: bool = True) -> str:
    return f'<button class="cancel" data-cancel="{_e(job_id)}" title="cancel this job">cancel</button>' if may else ""


def _filters(data: Mapping[str, Any]) -> str:
    """The filter form (plain GET: works without a script; the React app submits it in place)."""
    chosen = data.get("filter") or {}
    choices = data.get("choices") or {}
    fields = []
    for key, label in (("user", "user"), ("dag", "DAG"), ("queue", "queue")):
        options = ['<option value="">any</option>'] + [
            f'<option value="{_e(v)}"{" selected" if chosen.get(key) == v else ""}>{_e(v)}</option>'
            for v in choices.get(key, [])]
        if chosen.get(key) and chosen[key] not in choices.get(key, []):
            options.append(f'<option value="{_e(chosen[key])}" selected>{_e(chosen[key])}</option>')
        fields.append(f'<label>{label}<select name="{key}" data-filter="{key}">{"".join(options)}</select></label>')
    if chosen.get("job"):  # a job's own link (the operator's "ElastiCo job" button) shows that job alone
        fields.append(f'<input type="hidden" name="job" value="{_e(chosen["job"])}">'
                      f'<span class="muted" id="one-job">job {_e(chosen["job"])} only</span>')
    active = any(chosen.get(k) for k in ("user", "dag", "queue", "job"))
    clear = '<a href="?" data-filter-clear="1">show all</a>' if active else ""
    return (f'<form class="filters" method="get" data-filters="1">{"".join(fields)}'
            f'<button type="submit">filter</button>{clear}</form>')


def _legend(data: Mapping[str, Any]) -> str:
    from elastico_core.model.knobs import knob_legend

    names = {k for rows in (data.get("running") or [], data.get("finished") or []) for r in rows
             for k in (r.get("knobs") or {})}
    names |= {k for g in data.get("gpus") or [] for j in g["jobs"] for k in (j.get("knobs") or {})}
    return f'<p class="muted" id="knob-legend">knobs: {_e(knob_legend(names))}.</p>' if names else ""


def render_fragment(data: Mapping[str, Any], *, user: str = "", csrf: str = "", base: str = "") -> str:
    """The page's body: every section, scoped styles, the data the cancel buttons need (token, API path)."""
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
    running = [
        f'<tr data-job="{_e(r["id"])}"><td>{_e(r["id"])}<br>{job_links(r)}</td><td>{_pill(r["status"])}</td>'
        f'<td>{_e(r.get("dag_id") or "-")}<br><span class="muted">{_e(r.get("user") or "")} queue {_e(r.get("queue"))}</span></td>'
        f"<td>{_e(r['workload'])}</td><td>{_e(r['knobs_short'])}</td><td>{_e(', '.join(r['gpus']))}</td>"
        f"{progress_cell(r.get('progress'), r['status'])}"
        f"<td>{_e(r.get('measured_text'))}<br><span class=\"hint\">predicted {_e(r.get('predicted_text'))}, "
        f"floor {_e(r.get('floor_text'))}</span></td><td>{_cancel(r['id'])}</td></tr>"
        for r in data.get("running") or []
    ]
    queue = [
        f'<tr data-job="{_e(q["id"])}"><td data-position="{_e(q.get("position"))}">#{_e(q.get("position"))}</td>'
        f'<td>{_e(q["id"])}<br>{job_links(q)}</td><td>{_e(q["workload"])}{_queue_of(q)}</td>'
        f"<td>{_e(q.get('floor_text') or _num(q.get('floor')))}</td><td>{_num(q.get('waiting_s'), '.0f')} s</td>"
        f"<td class=\"why\">{_e(q.get('why') or q['reason'])}<br><span class=\"hint\" data-col=\"admit\">"
        f"{_e(q.get('admit_hint') or '')}{'; next after ' + _e(q['behind']) if q.get('behind') else ''}</span></td>"
        f"<td>{_e(q.get('queue_code'))}</td><td>{_cancel(q['id'])}</td></tr>"
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
        f"<td>{_e(s.get('predicted_text'))}</td><td>{_e(s.get('measured_text'))}</td>"
        f"<td>{_num(s.get('measured_slowdown'), '.2f')}×</td><td class=\"muted\">{_e(s.get('measured_on') or '')}</td></tr>"
        for s in data["slowdowns"]
    ]
    finished = [
        f'<tr data-job="{_e(f["id"])}"><td>{_e(f["id"])}<br>{job_links(f)}</td><td>{_pill(f["status"])}</td>'
        f"<td>{_e(f['knobs_short'])}</td><td>{_e(f.get('measured_text'))}</td><td>{_e(f['reason'])}</td></tr>"
        for f in data.get("finished", [])
    ]
    timeline = data.get("timeline") or {}
    has_bars = bool(timeline.get("bars"))
    chart = gpu_timeline(timeline) if has_bars else '<p class="muted">No GPU was held in the last hour.</p>'
    points = [{"job_id": s["job_id"], "predicted": s["predicted_effective"], "measured": s["measured_throughput"],
               "unit": s.get("unit") or "unit/s", "on_cpu": bool(s.get("on_cpu"))} for s in data["slowdowns"]
              if s.get("predicted_effective") and s.get("measured_throughput")]
    scatter = predicted_vs_measured(points) if points else ""
    who = f" · signed in as {_e(user)}" if user else ""
    api = f"{base.rstrip('/')}/elastico/"
    return f"""<div class="eco" id="eco" data-csrf="{_e(csrf)}" data-api="{_e(api)}"><style>{CSS}</style>
<h1>ElastiCo scheduling status</h1>
<div class="muted" id="summary">{_e(counts)} · state: {_e(data["state"]["backend"])} · {_e(data["generated_at"])}{who}
 · <a href="{_e(api)}api/status">JSON</a> · <a href="{_e(api)}status" target="_blank" rel="noopener">open on its own</a></div>
{_filters(data)}
<h2>Running</h2>
<p class="muted">Progress from each job's launcher; ETA at its latest measured rate. Throughput in the workload's unit.</p>
{_table(["job", "status", "DAG / user", "workload", "knobs", "GPUs", "progress", "measured", ""], running,
        "Nothing runs now.", "running", ["job", "status", "dag", "workload", "knobs", "gpus", "progress", "measured", "cancel"])}
<h2>GPU timeline</h2>
<p class="muted">Which job held each GPU over the last hour (a shared GPU shows its two jobs side by side).</p>
<div class="chart" id="gpu-timeline">{chart}</div>
<h2>Nodes</h2><div class="grid" id="nodes">{node_cards(data.get("nodes") or []) or '<p class="muted">No cluster recorded yet: start the controller.</p>'}</div>
<h2>GPUs</h2><div class="grid" id="gpus">{"".join(cards) or '<p class="muted">No GPUs yet: start the controller.</p>'}</div>
{queue_view(data.get("queues") or [])}
<h2>Queue</h2>
<p class="muted">In the controller's order (priority, then registration). Why each job waits, and what would admit it.</p>
{_table(["pos", "job", "workload", "floor", "waiting", "why it waits, what would admit it", "code", ""], queue,
        "The queue is empty.", "queue")}
<h2>Predicted vs measured throughput</h2>
<p class="muted">Each job's latest measurement against what the planner predicted beside its partner; hollow points
were measured on this machine's CPU (a local run), not on the planned GPU.</p>
<div class="chart" id="predicted-measured">{scatter}</div>
{_table(["job", "workload", "knobs", "co-located", "predicted slowdown", "predicted", "measured", "measured slowdown", "measured on"], slow, "No measurements yet.", "slowdowns")}
<h2>Shadow prices</h2>
<p class="muted">Price of one whole unit of each good (a GPU's memory, SMs, job slot; a node's CPU, host memory), in
shares of a job's score (weight × throughput / its best throughput): 0 means nothing is scarce.</p>
{price_chart(data["prices"])}
<h2>Recent decisions</h2>{_table(["epoch", "decision", "job", "knobs", "GPUs", "reason"], decisions, "No decisions yet.", "decisions")}
<h2>Recently ended</h2>{_table(["job", "status", "knobs", "measured throughput", "last word"], finished, "Nothing has ended yet.", "finished")}
{_legend(data)}
{_profile_problems(data.get("profile_problems") or [])}
{_iac_notes(data.get("iac_notes") or [])}
</div>"""


def render_page(data: Mapping[str, Any], *, user: str = "", csrf: str = "", base: str = "") -> str:
    """The standalone page: the fragment, a 10-second refresh, and the cancel buttons' script."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
<title>ElastiCo scheduling status</title><style>body{{margin:0}}</style></head>
<body>
{render_fragment(data, user=user, csrf=csrf, base=base)}
<script>{PAGE_SCRIPT}</script>
</body></html>"""


def render_missing(message: str, *, fragment: bool = False) -> str:
    """What the page says while there is no state to show (before the controller first ran)."""
    body = (f'<div class="eco" id="eco"><style>{CSS}</style><h1>ElastiCo scheduling status</h1>'
            f'<p class="note" id="no-state">{_e(message)}</p></div>')
    if fragment:
        return body
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
<title>ElastiCo scheduling status</title></head><body>{body}</body></html>"""


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


def _iac_notes(notes: list[str]) -> str:
    """Workloads the interference model has no pairs of: their pairs are planned on an assumption until learned."""
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<h2>Interference model</h2><ul id="iac-notes">{items}</ul>'


def _profile_problems(notes: list[str]) -> str:
    """Defective profile files and quarantined rows: left out of planning, the estimator stands in."""
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<h2>Profile store problems ({len(notes)})</h2><ul id="profile-problems">{items}</ul>'
