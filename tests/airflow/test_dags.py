"""The example DAGs: they load without errors, have the expected graphs, are cheap to parse, and every one
passes ``airflow dags test`` on SQLite end to end (controller running, local launcher, real workloads).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import DAGS, PLUGINS, REPO, Env, bin_path, controller

EXPECTED = {
    "training_runs": {"plan_runs": {"train"}, "train": {"report"}, "report": set()},
    "batch_labeling": {"make_shards": {"label", "merge"}, "label": {"merge"}, "merge": set()},
    "mixed_cluster_day": {"draw_day": {"job"}, "job": {"summarize_day"}, "summarize_day": set()},
    "iac_retrain": {"collect_runtime_pairs": {"retrain"}, "retrain": set()},
}
NO_JOBS = {"iac_retrain"}  # maintenance DAGs: no ElastiCo job of their own
SECRET_PASSWORD = "pw-Xy7-never-shown-0815"
SECRET_TOKEN = "tok-Zq9-never-shown-4711"
HEAVY = ("numpy", "polars", "torch", "pandas", "mlflow", "sklearn", "lightgbm", "scipy")


def test_dagbag_has_no_import_errors_and_the_expected_graphs() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == set(EXPECTED)
    for dag_id, graph in EXPECTED.items():
        dag = bag.dags[dag_id]
        got = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
        assert got == graph, dag_id
        if dag_id in NO_JOBS:
            continue
        assert dag.params["launcher"] is None and dag.params["pod_overrides"] == {}
        # every default is valid as it is: Airflow's trigger form enables Trigger without a change
        for name, param in dag.params.items():
            param.resolve(dag.params[name])
        elastico = [t for t in dag.tasks if t.task_type == "ElasticoJobOperator"]
        assert elastico and all(t.map_index_template == "{{ task.name }}" for t in elastico)  # named, not 0..n
        mapped = [t for t in dag.tasks if t.task_type == "ElasticoJobOperator" or "Elastico" in str(type(t))]
        assert mapped, f"{dag_id} has no ElastiCo task"


def test_dag_files_import_no_numerics() -> None:
    """DAG files are parsed every few seconds: no numpy/polars/torch/mlflow at top level (STYLE G12)."""
    code = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(PLUGINS)!r})\n"
        f"for f in {sorted(str(p) for p in DAGS.glob('*.py'))!r}:\n"
        "    runpy.run_path(f)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def _dags_test(dag_id: str, conf: dict[str, Any], env: dict[str, str], log: Path, timeout: float = 400) -> int:
    with open(log, "wb") as out:
        done = subprocess.run(
            [bin_path("airflow"), "dags", "test", dag_id, "-c", json.dumps(conf)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            timeout=timeout,
        )
    return done.returncode


def _run_state(log: Path) -> str:
    text = log.read_text(errors="replace")
    marker = "DagRun Finished:"
    line = next((x for x in reversed(text.splitlines()) if marker in x), "")
    return "success" if "state=success" in line else ("failed" if line else "unknown")


def _no_secret_anywhere(*roots: Path) -> None:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                for secret in (SECRET_PASSWORD, SECRET_TOKEN):
                    assert secret.encode() not in data, f"{secret} leaked into {path}"


@pytest.fixture
def dag_env(elastico_env: Env, airflow_db: Path, tmp_path: Path) -> dict[str, str]:
    """Process env for ``airflow dags test``: the connection carries a password and a token that must never
    appear in logs, XComs, MLflow or outputs."""
    conn = json.dumps(
        {
            "conn_type": "elastico",
            "password": SECRET_PASSWORD,
            "extra": {
                **elastico_env.extra,
                "api_token": SECRET_TOKEN,
                "mlflow_tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            },
        }
    )
    return {**elastico_env.process_env(), "AIRFLOW_CONN_ELASTICO_DEFAULT": conn}


@pytest.mark.slow
def test_training_runs_passes_dags_test(
    dag_env: dict[str, str],
    elastico_env: Env,
    cluster_file: Path,
    profiles_copy: Path,
    tmp_path: Path,
    airflow_db: Path,
) -> None:
    from elastico_core.state import JobService

    conf = {
        "models": [
            {"name": "resnet", "workload": "resnet50", "floor": 100, "knobs": {"micro_batch": [32]}},
            {"name": "lstm", "workload": "lstm", "floor": 100, "knobs": {"micro_batch": [32, 64]}},
        ],
        "steps": 4,
    }
    log = tmp_path / "dags-test.log"
    with controller(elastico_env.state_url, cluster_file, profiles_copy, tmp_path / "controller.log"):
        rc = _dags_test("training_runs", conf, dag_env, log)
    assert rc == 0 and _run_state(log) == "success", log.read_text()[-4000:]
    svc = JobService.open(elastico_env.state_url)
    try:
        jobs = svc.list_jobs()
        assert [j.status.value for j in jobs] == ["finished", "finished"]
        assert {j.workload for j in jobs} == {"resnet50", "lstm"}
        assert all(j.measured_throughput for j in jobs)
    finally:
        svc.close()
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["elastico/training_runs"], output_format="list")
    assert len(runs) == 2 and {r.data.params["workload"] for r in runs} == {"resnet50", "lstm"}
    _no_secret_anywhere(tmp_path, airflow_db.parent / "logs")
    assert SECRET_PASSWORD.encode() not in airflow_db.read_bytes()  # XComs, task instances, rendered fields


@pytest.mark.slow
def test_batch_labeling_passes_dags_test(
    dag_env: dict[str, str], elastico_env: Env, cluster_file: Path, profiles_copy: Path, tmp_path: Path
) -> None:
    import polars as pl

    conf = {"rows": 10, "shards": 2, "max_tokens": 4, "output_root": str(tmp_path / "out")}
    log = tmp_path / "dags-test.log"
    with controller(elastico_env.state_url, cluster_file, profiles_copy, tmp_path / "controller.log"):
        rc = _dags_test("batch_labeling", conf, dag_env, log)
    assert rc == 0 and _run_state(log) == "success", log.read_text()[-4000:]
    labels = list((tmp_path / "out" / "batch_labeling").glob("*/labels.parquet"))
    assert len(labels) == 1
    df = pl.read_parquet(labels[0])
    assert df.height == 10 and set(df["shard"].to_list()) == {0, 1} and df["id"].n_unique() == 10
    assert "label" in df.columns
    _no_secret_anywhere(tmp_path)


@pytest.mark.slow
def test_mixed_cluster_day_passes_dags_test(
    dag_env: dict[str, str], elastico_env: Env, cluster_file: Path, profiles_copy: Path, tmp_path: Path
) -> None:
    from elastico_core.state import JobService

    conf = {"max_jobs": 2, "train_steps": 3, "infer_rows": 3, "time_scale": 5000, "output_root": str(tmp_path / "o")}
    log = tmp_path / "dags-test.log"
    with controller(elastico_env.state_url, cluster_file, profiles_copy, tmp_path / "controller.log"):
        rc = _dags_test("mixed_cluster_day", conf, dag_env, log)
    assert rc == 0 and _run_state(log) == "success", log.read_text()[-4000:]
    svc = JobService.open(elastico_env.state_url)
    try:
        assert [j.status.value for j in svc.list_jobs()] == ["finished", "finished"]
    finally:
        svc.close()


def test_dags_test_refuses_a_disallowed_conf(dag_env: dict[str, str], elastico_env: Env, tmp_path: Path) -> None:
    """A conf reaching for the image or privileged mode is refused when the run is created: nothing runs."""
    from elastico_core.state import JobService

    for i, conf in enumerate(
        [
            {"pod_overrides": {"image": "evil:1"}},
            {"pod_overrides": {"privileged": True}},
            {"models": [{"name": "x", "workload": "bert", "floor": "fast"}]},
        ]
    ):
        log = tmp_path / f"bad-{i}.log"
        rc = _dags_test("training_runs", conf, dag_env, log, timeout=120)
        text = log.read_text(errors="replace")
        assert rc != 0 and "ParamValidationError" in text, text[-3000:]
        assert "Running upgrade" not in text or "[DAG TEST] starting task" not in text
    svc = JobService.open(elastico_env.state_url)
    try:
        assert svc.list_jobs() == ()
    finally:
        svc.close()
