"""``airflow_load``: N jobs submitted together, each a mapped ``ElasticoJobOperator`` running the sleep workload.

The load test of the whole path (``elastico bench airflow``): DAG -> operator -> state -> controller ->
trigger -> local launch, at hundreds to a thousand jobs. Every job is a real process of
``elastico_core.workloads.sleep`` (progress events for ``seconds``, nothing heavy imported); the planner
sees a small training workload with floor 0, so it packs two jobs per GPU.
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow.sdk import DAG, Param, task

from elastico_airflow.operators import ElasticoJobOperator

with DAG(
    dag_id="airflow_load",
    description="Load test: N sleep-like jobs through the whole ElastiCo path",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["elastico", "load-test"],
    max_active_tasks=1024,
    render_template_as_native_obj=True,
    params={
        "jobs": Param(30, type="integer", minimum=1, maximum=1024, description="mapped jobs"),
        "seconds": Param(60.0, type="number", minimum=0, maximum=86_400, description="each job runs this long"),
        "steps": Param(6, type="integer", minimum=1, maximum=10_000, description="progress steps per job"),
        "workload": Param("ncf", type="string", description="the workload the planner sees"),
    },
    doc_md=__doc__,
) as dag:

    @task
    def make_jobs(params: dict | None = None) -> list[list[str]]:
        """One ``entry_args`` list per job."""
        assert params is not None
        return [["--seconds", str(params["seconds"]), "--steps", str(params["steps"])]] * int(params["jobs"])

    ElasticoJobOperator.partial(
        task_id="job",
        workload="{{ params.workload }}",
        entrypoint="sleep",
        floor=0.0,
        retries=2,
        retry_delay=dt.timedelta(seconds=10),
    ).expand(entry_args=make_jobs())
