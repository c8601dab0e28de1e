"""The status page shows each user what Airflow lets them read (a real api-server, SimpleAuthManager's roles).

The probe's repro: a token whose role is None or VIEWER got every job, dag_id and run_id. Now a job of a
DAG is shown to users who may read that DAG (Airflow's own rule for ``/api/v2/dags``), and jobs outside
Airflow (or naming a DAG Airflow does not know) and the platform's notes to users who may read the
``elastico_default`` connection (OP and ADMIN); everyone authenticated sees the aggregates.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import (
    AIRFLOW_HOME,
    REPO,
    TINY_CLUSTER,
    bin_path,
    free_port,
    kill_group,
    run_epochs,
    start_group,
)

PASSWORD = "status-permissions-pass"
USERS = {"admin": "admin", "op": "op", "viewer": "viewer", "nobody": ""}  # "nobody": a user without a role


def _state(tmp: Path) -> tuple[str, dict[str, str]]:
    """Jobs of a DAG Airflow knows (training_runs), of one it does not (ghost), and one submitted from the CLI."""
    from elastico_core.state import ExternalIdentity, JobService

    cluster = tmp / "cluster.yaml"
    cluster.write_text(TINY_CLUSTER)
    url = f"sqlite:///{tmp / 'state.db'}"
    svc = JobService.open(url)
    ids = {
        "known": svc.register({"workload": "lstm", "floor": 100}, ExternalIdentity.airflow("training_runs", "run-k", "t"),
                              try_number=1).job.id,
        "ghost": svc.register({"workload": "dcgan", "floor": 100}, ExternalIdentity.airflow("ghost", "run-g", "t"),
                              try_number=1).job.id,
    }
    ids["cli"] = svc.submit_document("jobs:\n  - {id: cli-job, workload: ncf, floor: 1000}\n")[0].job.id
    svc.close()
    run_epochs(url, cluster, REPO / "profiles", n=2)
    return url, ids


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, airflow_db: Path) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("permissions")
    url, ids = _state(tmp)
    env = {**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items())}
    # the DAGs of dags/ into Airflow's database: what the auth manager authorizes reading is per DAG it knows
    done = subprocess.run([bin_path("airflow"), "dags", "reserialize"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    passwords = AIRFLOW_HOME / "simple_auth_manager_passwords.json.generated"
    port = free_port()
    passwords.write_text(json.dumps(dict.fromkeys(USERS, PASSWORD)))
    env.update({
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "ELASTICO_STATE_URL": "sqlite:////nonexistent/x.db",
        "AIRFLOW_CONN_ELASTICO_DEFAULT": json.dumps({"conn_type": "elastico", "extra": {"state_url": url}}),
    })
    proc = start_group([bin_path("airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)], tmp / "api.log", env)
    base = f"http://127.0.0.1:{port}"
    try:
        from tests.airflow.conftest import wait_until

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2):
                    return True
            except (urllib.error.URLError, OSError):
                assert proc.poll() is None, (tmp / "api.log").read_text()[-3000:]
                return False

        wait_until(healthy, 180, "the api-server", interval=1.0)
        tokens = {u: _call(base, "POST", "/auth/token", {"username": u, "password": PASSWORD})["access_token"] for u in USERS}
        yield {"base": base, "tokens": tokens, "ids": ids}
    finally:
        kill_group(proc)


def _call(base: str, method: str, path: str, body: Any = None, token: str = "") -> Any:
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(), method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
        return json.loads(raw) if resp.headers.get_content_type() == "application/json" else raw.decode()


def _job_ids(data: dict[str, Any]) -> set[str]:
    ids = {j["id"] for g in data["gpus"] for j in g["jobs"]} | {j["id"] for n in data["nodes"] for j in n["jobs"]}
    ids |= {q["id"] for q in data["queue"]} | {f["id"] for f in data["finished"]}
    return ids | {d["job_id"] for d in data["decisions"]} | {s["job_id"] for s in data["slowdowns"]}


def test_each_user_sees_what_airflow_lets_them_read(server: dict[str, Any]) -> None:
    ids = server["ids"]
    seen = {u: _call(server["base"], "GET", "/elastico/api/status", token=t) for u, t in server["tokens"].items()}
    assert _job_ids(seen["admin"]) == set(ids.values()) == _job_ids(seen["op"])
    assert _job_ids(seen["viewer"]) == {ids["known"]}  # a VIEWER may read every DAG Airflow knows, no more
    assert _job_ids(seen["nobody"]) == set()
    for user in ("viewer", "nobody"):
        text = json.dumps(seen[user])
        for hidden in ("ghost", "run-g", ids["ghost"], ids["cli"]):
            assert hidden not in text, (user, hidden)
        assert seen[user]["profile_problems"] == [] and seen[user]["iac_notes"] == []
        # the aggregates stay: counts, each GPU's occupancy (another's job as a count), prices
        assert seen[user]["counts"] == seen["admin"]["counts"]
        hidden_jobs = sum(g["hidden_jobs"] for g in seen[user]["gpus"])
        assert hidden_jobs + sum(len(g["jobs"]) for g in seen[user]["gpus"]) == sum(len(g["jobs"]) for g in seen["admin"]["gpus"])
        assert [g["used_mem_mib"] for g in seen[user]["gpus"]] == [g["used_mem_mib"] for g in seen["admin"]["gpus"]]
    assert "run-k" not in json.dumps(seen["nobody"]) and "training_runs" in json.dumps(seen["viewer"])


def test_the_page_is_filtered_the_same_way(server: dict[str, Any]) -> None:
    page = _call(server["base"], "GET", "/elastico/status", token=server["tokens"]["nobody"])
    assert isinstance(page, str) and "<html" in page.lower()
    for job_id in server["ids"].values():
        assert job_id not in page
