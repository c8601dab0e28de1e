"""``training_runs``: several Table-2 zoo models trained in parallel, each with a knob space and a floor.

Each model is one mapped ``ElasticoJobOperator``: the author states which micro-batch sizes,
checkpointing and AMP settings are acceptable and the throughput the run needs; ElastiCo picks the
configuration and the GPU (possibly shared with another run under MPS) and may switch it later.
``report`` collects what every run got and records it in MLflow when a tracking URI is configured.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from elastico_airflow.operators import ElasticoJobOperator
from elastico_airflow.params import LAUNCHER_SCHEMA, POD_OVERRIDES_SCHEMA, QUEUE_SCHEMA, TRAIN_RUN_SCHEMA

DEFAULT_MODELS = [
    {"name": "resnet", "workload": "resnet50", "floor": 600, "weight": 2, "knobs": {"micro_batch": [32, 64, 128]}},
    {"name": "bert", "workload": "bert", "floor": 150, "weight": 2, "knobs": {"micro_batch": [32, 64]}},
    {"name": "dcgan", "workload": "dcgan", "floor": 2000, "knobs": {"micro_batch": [32, 64, 128]}},
    {"name": "lstm", "workload": "lstm", "floor": 800, "knobs": {"micro_batch": [32, 64, 128, 256]}},
]

with DAG(
    dag_id="training_runs",
    description="Zoo training runs with knob spaces and floors; ElastiCo picks configurations and GPUs",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["elastico", "training"],
    max_active_tasks=8,
    render_template_as_native_obj=True,
    params={
        "models": Param(
            DEFAULT_MODELS,
            type="array",
            minItems=1,
            maxItems=16,
            items=TRAIN_RUN_SCHEMA,
            description="training runs: name, workload, floor (samples/s), weight, gpus, knobs",
        ),
        "steps": Param(20, type="integer", minimum=1, maximum=1_000_000, description="iterations per run"),
        "launcher": Param(None, **LAUNCHER_SCHEMA),
        "elastico_queue": Param(None, **QUEUE_SCHEMA),
        "pod_overrides": Param({}, **POD_OVERRIDES_SCHEMA),
    },
    doc_md=__doc__,
) as dag:

    @task
    def plan_runs(params: dict | None = None) -> list[dict]:
        """One set of operator arguments per model (names unique, knob spaces as given)."""
        from elastico_airflow.dagwork import training_runs

        assert params is not None
        return training_runs(params["models"], int(params["steps"]))

    train = ElasticoJobOperator.partial(
        task_id="train",
        launcher="{{ params.launcher }}",
        elastico_queue="{{ params.elastico_queue }}",
        pod_overrides="{{ params.pod_overrides }}",
        # a retry of a job that already ended only reads its outcome: it also absorbs Airflow 3.3's race
        # that fails a deferred task resumed to running by the stale success of its deferral (apache/airflow#72716)
        retries=2,
        retry_delay=dt.timedelta(seconds=15),
        report_interval=5.0,
        map_index_template="{{ task.name }}",  # each mapped run shows its model's name, not 0-3
    ).expand_kwargs(plan_runs())

    @task
    def report(results: Any, params: dict | None = None, dag_run: Any = None) -> dict:
        """What each run was given and achieved; its MLflow run brought up to date when MLflow is configured."""
        from elastico_airflow.hooks import ElasticoHook
        from elastico_airflow.tracking import sync_dag_jobs

        rows = [r for r in results if isinstance(r, dict)]
        for r in rows:
            print(
                f"{r['job_id']}: {r['status']} knobs={r['knobs']} gpus={r['gpus']} "
                f"predicted={r['predicted_throughput']} measured={r['measured_throughput']}"
            )
        runs = sync_dag_jobs(ElasticoHook().get_settings(), [r["job_id"] for r in rows])
        return {"jobs": len(rows), "finished": sum(r["status"] == "finished" for r in rows), "mlflow_runs": len(runs)}

    report(train.output)
