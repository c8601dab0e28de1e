"""``batch_labeling``: a dataset of texts sharded with dynamic task mapping, each shard an inference job.

``make_shards`` splits the dataset (by default a deterministic public-domain one: lines of Shakespeare's
sonnets) into JSONL shards under ``<output_root>/batch_labeling/<run_id>/``; each shard is one mapped
``ElasticoJobOperator`` with a vLLM knob space (``max_num_seqs``, ``max_model_len``, prefix caching,
``gpu_memory_utilization``) and a tokens/s floor, writing parquet (polars) incrementally; ``merge``
concatenates the shards into ``labels.parquet``. Re-running the same run is idempotent: shards are
rewritten identically, registration returns the jobs already registered, a finished job is not run
again, an interrupted shard resumes at its last flushed row, and the merge overwrites atomically.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from elastico_airflow.operators import ElasticoJobOperator
from elastico_airflow.params import (
    INFER_KNOBS_SCHEMA,
    INFER_WORKLOADS,
    LAUNCHER_SCHEMA,
    OUTPUT_ROOT_SCHEMA,
    POD_OVERRIDES_SCHEMA,
    QUEUE_SCHEMA,
)

with DAG(
    dag_id="batch_labeling",
    description="Sharded offline LLM labeling; ElastiCo picks each shard's vLLM knobs and GPU",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["elastico", "inference"],
    max_active_tasks=8,
    render_template_as_native_obj=True,
    params={
        "dataset": Param(
            "builtin:sonnets",
            type="string",
            minLength=1,
            maxLength=1024,
            description="'builtin:sonnets' or a JSONL file with a 'text' field",
        ),
        "rows": Param(48, type="integer", minimum=1, maximum=100_000, description="rows of the builtin dataset"),
        "shards": Param(3, type="integer", minimum=1, maximum=64),
        "workload": Param("qwen-1.7b", type="string", enum=list(INFER_WORKLOADS)),
        "floor": Param(100.0, type="number", minimum=0, description="tokens/s the shard must reach"),
        "knobs": Param({"max_num_seqs": [2, 4], "prefix_caching": [True]}, **INFER_KNOBS_SCHEMA),
        "max_tokens": Param(16, type="integer", minimum=1, maximum=1024),
        "output_root": Param(None, **OUTPUT_ROOT_SCHEMA),
        "launcher": Param(None, **LAUNCHER_SCHEMA),
        "elastico_queue": Param(None, **QUEUE_SCHEMA),
        "pod_overrides": Param({}, **POD_OVERRIDES_SCHEMA),
    },
    doc_md=__doc__,
) as dag:

    @task
    def make_shards(params: dict | None = None, dag_run: Any = None) -> list[dict]:
        """Write the shards of this run and return one set of operator arguments per shard."""
        from pathlib import Path

        from elastico_airflow.dagwork import builtin_texts, outputs_root, read_texts, run_folder, write_shards
        from elastico_airflow.hooks import ElasticoHook

        assert params is not None
        settings = ElasticoHook().get_settings()
        folder = run_folder(outputs_root(params["output_root"] or "", settings.workdir), dag_run.dag_id, dag_run.run_id)
        dataset = params["dataset"]
        rows = builtin_texts(int(params["rows"])) if dataset == "builtin:sonnets" else read_texts(Path(dataset))
        shards = write_shards(rows, min(int(params["shards"]), max(1, len(rows))), folder / "shards")
        return [
            {
                "name": p.stem,  # the pod's name and the mapped task's label: shard-000, shard-001, ...
                "entry_args": [
                    "--input",
                    str(p),
                    "--output",
                    str(folder / "labels" / f"{p.stem}.parquet"),
                    "--max-tokens",
                    str(params["max_tokens"]),
                    "--stop-at-newline",
                ]
            }
            for p in shards
        ]

    shards = make_shards()
    label = ElasticoJobOperator.partial(
        task_id="label",
        workload="{{ params.workload }}",
        floor="{{ params.floor }}",
        knobs="{{ params.knobs }}",
        launcher="{{ params.launcher }}",
        elastico_queue="{{ params.elastico_queue }}",
        pod_overrides="{{ params.pod_overrides }}",
        # a retry of a job that already ended only reads its outcome: it also absorbs Airflow 3.3's race
        # that fails a deferred task resumed to running by the stale success of its deferral (apache/airflow#72716)
        retries=2,
        retry_delay=dt.timedelta(seconds=15),
        report_interval=5.0,
        map_index_template="{{ task.name }}",  # each mapped shard shows its name, not 0-2
    ).expand_kwargs(shards)

    @task
    def merge(results: Any, shard_args: Any, dag_run: Any = None) -> dict:
        """Concatenate the shard outputs (in shard order) into labels.parquet; finish the jobs' MLflow runs."""
        from pathlib import Path

        from elastico_airflow.dagwork import merge_outputs
        from elastico_airflow.hooks import ElasticoHook
        from elastico_airflow.tracking import sync_dag_jobs

        parts = [Path(a["entry_args"][3]) for a in shard_args]
        out = merge_outputs(parts, parts[0].parent.parent / "labels.parquet")
        rows = [r for r in results if isinstance(r, dict)]
        out["mlflow_runs"] = len(sync_dag_jobs(ElasticoHook().get_settings(), [r["job_id"] for r in rows]))
        print(f"merged {out['rows']} rows from {out['shards']} shards into {out['path']}")
        return out

    merge(label.output, shards)
