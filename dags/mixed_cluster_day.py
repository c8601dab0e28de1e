"""``mixed_cluster_day``: the paper's mixed training + offline-inference day, scaled down for a demo.

``draw_day`` generates the §5.1 mix (``builtin:paper-mix``: Philly-like training, bursty batch inference)
for a small cluster, keeps the first jobs and compresses their arrival times; each job is one mapped
``ElasticoJobOperator`` that waits (deferred, no worker slot) until its arrival, then registers and is
scheduled by the controller alongside everything else on the cluster.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from elastico_airflow.operators import ElasticoJobOperator
from elastico_airflow.params import LAUNCHER_SCHEMA, OUTPUT_ROOT_SCHEMA, POD_OVERRIDES_SCHEMA, QUEUE_SCHEMA

with DAG(
    dag_id="mixed_cluster_day",
    description="The paper's mixed workload on a small cluster, time-compressed",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["elastico", "demo"],
    max_active_tasks=16,
    render_template_as_native_obj=True,
    params={
        "seed": Param(0, type="integer", minimum=0, maximum=2**31 - 1),
        "gpus": Param(4, type="integer", minimum=1, maximum=64, description="cluster size the mix is drawn for"),
        "hours": Param(2.0, type="number", exclusiveMinimum=0, maximum=24),
        "max_jobs": Param(6, type="integer", minimum=1, maximum=64),
        "time_scale": Param(600.0, type="number", minimum=1, description="trace seconds per real second"),
        "train_steps": Param(10, type="integer", minimum=1, maximum=100_000),
        "infer_rows": Param(8, type="integer", minimum=1, maximum=10_000),
        "output_root": Param(None, **OUTPUT_ROOT_SCHEMA),
        "launcher": Param(None, **LAUNCHER_SCHEMA),
        "elastico_queue": Param(None, **QUEUE_SCHEMA),
        "pod_overrides": Param({}, **POD_OVERRIDES_SCHEMA),
    },
    doc_md=__doc__,
) as dag:

    @task
    def draw_day(params: dict | None = None, dag_run: Any = None) -> list[dict]:
        """The day's jobs as operator arguments, with their compressed arrival offsets."""
        from elastico_airflow.dagwork import day_jobs, outputs_root, run_folder
        from elastico_airflow.hooks import ElasticoHook

        assert params is not None
        root = outputs_root(params["output_root"] or "", ElasticoHook().get_settings().workdir)
        return day_jobs(
            seed=int(params["seed"]),
            gpus=int(params["gpus"]),
            hours=float(params["hours"]),
            max_jobs=int(params["max_jobs"]),
            time_scale=float(params["time_scale"]),
            train_steps=int(params["train_steps"]),
            infer_rows=int(params["infer_rows"]),
            folder=run_folder(root, dag_run.dag_id, dag_run.run_id),
        )

    jobs = ElasticoJobOperator.partial(
        task_id="job",
        launcher="{{ params.launcher }}",
        elastico_queue="{{ params.elastico_queue }}",
        pod_overrides="{{ params.pod_overrides }}",
        # a retry of a job that already ended only reads its outcome: it also absorbs Airflow 3.3's race
        # that fails a deferred task resumed to running by the stale success of its deferral (apache/airflow#72716)
        retries=2,
        retry_delay=dt.timedelta(seconds=15),
        map_index_template="{{ task.name }}",  # each mapped job shows its workload and place in the day
    ).expand_kwargs(draw_day())

    @task
    def summarize_day(results: Any, dag_run: Any = None) -> dict:
        """Per-job outcome of the day; its MLflow runs brought up to date when MLflow is configured."""
        from elastico_airflow.hooks import ElasticoHook
        from elastico_airflow.tracking import sync_dag_jobs

        rows = [r for r in results if isinstance(r, dict)]
        for r in rows:
            print(
                f"{r['job_id']}: {r['status']} {r['workload']} knobs={r['knobs']} gpus={r['gpus']} "
                f"beside={r['partners']} measured={r['measured_throughput']}"
            )
        runs = sync_dag_jobs(ElasticoHook().get_settings(), [r["job_id"] for r in rows])
        return {"jobs": len(rows), "finished": sum(r["status"] == "finished" for r in rows), "mlflow_runs": len(runs)}

    summarize_day(jobs.output)
