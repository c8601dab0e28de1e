"""Drive the demo through Airflow's REST API: trigger the DAG runs, follow them, print plan and outcomes.

Runs against the api-server that ``scripts/demo.sh`` started on 127.0.0.1; reads the planner state
through ``JobService`` to print what ElastiCo decided. Exit status 1 if a run did not succeed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

RUNS = {
    "training_runs": {"steps": 12},
    "batch_labeling": {"rows": 36, "shards": 3, "max_tokens": 12},
}


class Api:
    def __init__(self, base: str) -> None:
        self.base = base
        self.token = ""

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def login(self, airflow_home: Path, wait_s: float = 60) -> None:
        pw_file = airflow_home / "simple_auth_manager_passwords.json.generated"
        deadline = time.monotonic() + wait_s
        while not pw_file.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        password = json.loads(pw_file.read_text())["admin"]
        self.token = self.call("POST", "/auth/token", {"username": "admin", "password": password})["access_token"]


def wait_for_dags(api: Api, dags: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    missing = list(dags)
    while missing and time.monotonic() < deadline:
        for dag in list(missing):
            try:
                info = api.call("GET", f"/api/v2/dags/{dag}")
            except urllib.error.HTTPError:
                continue
            if info.get("is_paused"):
                api.call("PATCH", f"/api/v2/dags/{dag}", {"is_paused": False})
            missing.remove(dag)
        if missing:
            time.sleep(1)
    if missing:
        raise SystemExit(f"the dag-processor did not load {missing} in {timeout:.0f} s (see .elastico/demo/logs)")


def task_states(api: Api, dag: str, run: str) -> list[dict[str, Any]]:
    out = api.call("GET", f"/api/v2/dags/{dag}/dagRuns/{run}/taskInstances?limit=100")
    return sorted(out["task_instances"], key=lambda t: (t["task_id"], t.get("map_index", -1)))


def print_plan(state_url: str) -> None:
    from elastico_core.state import JobService

    svc = JobService.open(state_url)
    try:
        jobs = svc.list_jobs()
        decisions = svc.decisions(limit=1000)
        models = {g.id: g.model for g in svc.gpus()}
        measured_on = {}
        for m in svc.measurements(limit=1000):
            measured_on.setdefault(m.job_id, m.signature.split("|", 1)[0] if m.signature else "")
        print(f"\nThe plan: {len(jobs)} jobs on the demo cluster ({', '.join(g.id for g in svc.gpus())})")
        print("  predicted: the profile the planner used (its source and GPU signature); measured: this machine's")
        print("  CPU run, stored under the CPU's own signature (never as a GPU measurement)")
        print(f"  {'job':44} {'status':9} {'knobs':30} {'gpu':11} {'beside':22} {'predicted':>10} {'profile':>24} "
              f"{'measured':>10} {'measured on':>14}")
        for j in jobs:
            p = j.plan
            beside = ",".join(x.split(".", 1)[-1][:20] for x in p.partners) if p and p.partners else "-"
            profile = f"{p.source} {models.get(p.gpus[0], '?')}" if p else "-"
            print(
                f"  {j.id:44} {j.status.value:9} {(p.knobs.short() if p else '-'):30} "
                f"{(','.join(p.gpus) if p else '-'):11} {beside:22} "
                f"{(format(p.throughput, '.4g') if p else '-'):>10} {profile:>24} "
                f"{(format(j.measured_throughput, '.4g') if j.measured_throughput else '-'):>10} "
                f"{measured_on.get(j.id, '-') or '-':>14}"
            )
        kinds: dict[str, int] = {}
        for d in decisions:
            kinds[d.kind.value] = kinds.get(d.kind.value, 0) + 1
        print("  decisions:", ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
        for d in reversed(decisions):
            if d.kind.value in ("switch", "migrate", "narrow", "preempt"):
                print(f"  epoch {d.epoch} {d.kind.value} {d.job_id}: {d.reason}")
        shared = {tuple(sorted((j.id, *j.plan.partners))) for j in jobs if j.plan and j.plan.partners}
        print(
            f"  co-located pairs: {len(shared)}" + (" — " + "; ".join(" + ".join(s) for s in shared) if shared else "")
        )
    finally:
        svc.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--state", required=True)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    api = Api(f"http://127.0.0.1:{args.port}")
    api.login(Path(os.environ["AIRFLOW_HOME"]))
    wait_for_dags(api, list(RUNS), 180)
    t0 = time.monotonic()
    runs = {}
    for dag, conf in RUNS.items():
        run = api.call("POST", f"/api/v2/dags/{dag}/dagRuns", {"logical_date": None, "conf": conf})
        runs[dag] = run["dag_run_id"]
        print(f"triggered {dag} run {run['dag_run_id']} with conf {json.dumps(conf)}")
    seen: dict[tuple[str, str, int], str] = {}
    final: dict[str, str] = {}
    while len(final) < len(runs) and time.monotonic() - t0 < args.timeout:
        for dag, run in runs.items():
            if dag in final:
                continue
            for t in task_states(api, dag, run):
                key = (dag, t["task_id"], t.get("map_index", -1))
                if t["state"] and seen.get(key) != t["state"]:
                    seen[key] = t["state"]
                    idx = f"[{key[2]}]" if key[2] >= 0 else ""
                    print(f"  {time.monotonic() - t0:6.1f}s  {dag}.{t['task_id']}{idx}: {t['state']}")
            state = api.call("GET", f"/api/v2/dags/{dag}/dagRuns/{run}")["state"]
            if state in ("success", "failed"):
                final[dag] = state
                print(f"  {time.monotonic() - t0:6.1f}s  {dag} run {state}")
        time.sleep(2)
    print_plan(args.state)
    print("\nOutcome of every task:")
    for dag, run in runs.items():
        for t in task_states(api, dag, run):
            idx = f"[{t['map_index']}]" if t.get("map_index", -1) >= 0 else ""
            dur = f"{t['duration']:.1f}s" if t.get("duration") else "-"
            print(f"  {dag}.{t['task_id']}{idx:5} {t['state'] or 'none':10} try {t['try_number']}  {dur}")
        print(f"  => {dag}: {final.get(dag, 'did not finish in time')}")
    print(f"\nDAG runs took {time.monotonic() - t0:.0f} s")
    return 0 if all(final.get(d) == "success" for d in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
