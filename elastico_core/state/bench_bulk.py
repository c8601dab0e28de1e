"""Bulk benchmark of the state's edges: submit N jobs, resubmit them, then with N ended jobs time the status
page (its data, and data plus HTML) and ``jobs list --json`` (prints one JSON object).

Each figure runs in a fresh process of the checkout under test (``--checkout``, repeatable), so an old and
a new checkout are compared in the same run on the same machine:

    python -m elastico_core.state.bench_bulk --jobs 100000 --checkout . --checkout ../old
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOADS = ("bert", "resnet50", "lstm", "ppo", "ncf", "dcgan", "transformer", "qwen-1.7b")
STATUS_PAGE = """
import sys, time
from elastico_core.state import JobService
from elastico_airflow.status.data import status_snapshot
from elastico_airflow.status.render import render_page
svc = JobService.open(sys.argv[1])
render_page(status_snapshot(svc, backend="sqlite"))  # warm: connections, imports, charts
t, h = [], []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); snap = status_snapshot(svc, backend="sqlite"); t1 = time.perf_counter()
    render_page(snap); t.append(t1 - t0); h.append(time.perf_counter() - t0)
print(sorted(t)[len(t) // 2] * 1e3, sorted(h)[len(h) // 2] * 1e3, len(snap["finished"]))
"""
CLI = "import sys; from elastico_core.cli import main; main(sys.argv[1:])"


def jobs_yaml(n: int) -> str:
    rows = (f"  - {{id: j{i:07d}, workload: {WORKLOADS[i % len(WORKLOADS)]}, floor: {10 + i % 50}}}" for i in range(n))
    return "jobs:\n" + "\n".join(rows) + "\n"


def _run(checkout: Path, code: str, *args: str) -> tuple[float, bytes]:
    env_path = f"{checkout}:{checkout / 'plugins'}"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=checkout, check=True, capture_output=True,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - t0, out.stdout


def _end_all(url: str) -> None:
    """Every job ended (finished, failed, cancelled in turn), one second apart: the state a long-lived cluster has."""
    import sqlalchemy as sa

    from elastico_core.state.db import make_engine
    from elastico_core.state.models import Job

    engine = make_engine(url)
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        ids = [r[0] for r in conn.execute(sa.select(Job.id).order_by(Job.id))]
        statuses = ("finished", "failed", "cancelled")
        rows = [{"i": i, "s": statuses[k % 3], "f": base + dt.timedelta(seconds=k)} for k, i in enumerate(ids)]
        conn.execute(sa.update(Job).where(Job.id == sa.bindparam("i")).values(status=sa.bindparam("s"),
                                                                             finished_at=sa.bindparam("f")), rows)
    engine.dispose()


def bench_checkout(checkout: Path, n: int, workdir: Path, repeats: int) -> dict[str, Any]:
    spec = workdir / f"jobs-{n}.yaml"
    if not spec.exists():
        spec.write_text(jobs_yaml(n))
    url = f"sqlite:///{workdir / f'state-{checkout.name}.db'}"
    Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    submit_s, _ = _run(checkout, CLI, "jobs", "submit", "--spec", str(spec), "--state", url)
    resubmit_s, _ = _run(checkout, CLI, "jobs", "submit", "--spec", str(spec), "--state", url)
    _end_all(url)
    list_s, out = _run(checkout, CLI, "jobs", "list", "--json", "--state", url)
    _, page = _run(checkout, STATUS_PAGE, url, str(repeats))
    page_ms, html_ms, finished = page.split()
    return {
        "checkout": str(checkout), "jobs": n, "submit_s": round(submit_s, 2), "submit_jobs_per_s": round(n / submit_s),
        "resubmit_s": round(resubmit_s, 2), "jobs_list_json_s": round(list_s, 2), "jobs_list_json_bytes": len(out),
        "jobs_listed": len(json.loads(out)), "status_page_ms": round(float(page_ms), 1),
        "status_page_html_ms": round(float(html_ms), 1),
        "status_page_finished_rows": int(finished),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--checkout", type=Path, action="append", required=True)
    ap.add_argument("--repeats", type=int, default=5, help="status page requests timed (the median is printed)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="elastico-bench-") as tmp:
        out = [bench_checkout(c.resolve(), args.jobs, Path(tmp), args.repeats) for c in args.checkout]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
