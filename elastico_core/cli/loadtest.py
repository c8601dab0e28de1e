"""``elastico bench airflow``: the load test of the whole Airflow path (``elastico_core.bench.airflow_load``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Annotated

import typer

from elastico_core.cli.common import print_json


def bench_airflow_command(
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=1024, help="jobs submitted together (mapped tasks)")] = 30,
    seconds: Annotated[float, typer.Option("--seconds", min=0.0, help="each job's run time")] = 60.0,
    steps: Annotated[int, typer.Option("--steps", min=1, help="progress events per job")] = 6,
    gpus: Annotated[
        int, typer.Option("--gpus", min=1, help="GPUs of the generated cluster (A100-80GB, 8 a node)")
    ] = 128,
    per_gpu: Annotated[int, typer.Option("--per-gpu", min=1, max=2, help="jobs per GPU")] = 2,
    executor: Annotated[
        str, typer.Option("--executor", help="local | celery (Redis broker, --workers processes)")
    ] = "local",
    workers: Annotated[int, typer.Option("--workers", min=1, help="Celery workers")] = 2,
    parallelism: Annotated[
        int, typer.Option("--parallelism", min=1, help="Airflow's core.parallelism (worker slots)")
    ] = 16,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="the controller's ΔT in seconds")] = 2.0,
    postgres: Annotated[
        str | None,
        typer.Option("--postgres", help="a PostgreSQL server URL to create fresh databases on (default: SQLite files)"),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="where results and the deployment's files go")] = Path(
        ".elastico/loadtest"
    ),
    timeout: Annotated[
        float, typer.Option("--timeout", min=10.0, help="give up after this many seconds of load")
    ] = 1800.0,
    chaos: Annotated[
        bool, typer.Option("--chaos", help="SIGKILL the workers and the triggerer mid-run, start them again")
    ] = False,
    preload: Annotated[
        bool, typer.Option("--preload/--no-preload", help="LocalExecutor: workers start with the operator imported (PreloadedLocalExecutor)")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print the full JSON instead of the summary")] = False,
) -> None:
    """N sleep-like jobs through the embedded Airflow + controller + local launcher; figures on stdout (exit 1 if a
    job was lost, duplicated or stuck, or a task did not succeed)."""
    from elastico_core.bench.airflow_load import Executor, LoadConfig, run_load, summary_lines

    try:
        kind = Executor(executor.strip().lower())
    except ValueError:
        raise typer.BadParameter(f"{executor!r} is not 'local' or 'celery'", param_hint="--executor") from None
    if kind is Executor.CELERY and not postgres:
        raise typer.BadParameter("the CeleryExecutor needs --postgres (its result backend and workers share it)",
                                 param_hint="--executor")  # fmt: skip
    if postgres and importlib.util.find_spec("asyncpg") is None:
        raise typer.BadParameter("Airflow 3 on PostgreSQL needs the asyncpg driver: pip install 'elastico[postgres]'",
                                 param_hint="--postgres")  # fmt: skip
    cfg = LoadConfig(jobs=jobs, seconds=seconds, steps=steps, gpus=gpus, per_gpu=per_gpu, executor=kind, workers=workers,
                     parallelism=parallelism, interval_s=interval, postgres_url=postgres, out=out, timeout_s=timeout,
                     chaos=chaos, preload=preload)  # fmt: skip
    result = run_load(cfg, say=lambda line: print(line, file=sys.stderr, flush=True))
    if as_json:
        print_json(result)
    else:
        print("\n".join(summary_lines(result)))
    bad = result["jobs"]["lost"] or result["jobs"]["duplicated"] or result["jobs"]["stuck"]
    if bad or result["tasks"]["states"].get("success", 0) != jobs:
        raise typer.Exit(1)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``airflow`` to the bench group."""
    bench.command("airflow")(bench_airflow_command)
