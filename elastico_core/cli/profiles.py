"""``elastico profiles``: the profile store (generate estimates, show rows, invalidate a signature)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from elastico_core.cli.common import default_profiles, print_json, stdout

profiles_app = typer.Typer(help="The RST profile store under profiles/.", no_args_is_help=True)


@profiles_app.command("generate")
def generate(
    out: Annotated[Path | None, typer.Option("--out", help="profile store folder")] = None,
    gpus: Annotated[str, typer.Option("--gpus", help="comma-separated GPU models")] = "a100-40gb,a100-80gb,h100-80gb,h200-141gb",
) -> None:
    """Fill the store with estimated rows for every configuration of the 12 paper workloads."""
    from elastico_core.model.hardware import gpu_model
    from elastico_core.rst.catalog import PAPER_WORKLOADS
    from elastico_core.rst.generate import estimated_profiles
    from elastico_core.rst.store import ProfileStore

    store = ProfileStore.open(out or default_profiles())
    models = [gpu_model(g) for g in gpus.split(",") if g.strip()]
    n = store.upsert(list(estimated_profiles(PAPER_WORKLOADS.values(), models)))
    stdout.print(f"wrote {n} estimated profiles for {len(models)} GPU models to {store.root}")


@profiles_app.command("show")
def show(
    workload: Annotated[str | None, typer.Option("--workload", help="only this workload")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="only this GPU model")] = None,
    source: Annotated[str | None, typer.Option("--source", help="measured or estimated")] = None,
    limit: Annotated[int, typer.Option("--limit", help="rows to print")] = 40,
    store_dir: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print profile rows (with the MLflow run that measured each)."""
    import polars as pl

    from elastico_core.rst.store import ProfileStore

    store = ProfileStore.open(store_dir or default_profiles())
    df = store.frame()
    if workload:
        df = df.filter(pl.col("workload") == workload)
    if gpu:
        df = df.filter(pl.col("gpu") == gpu)
    if source:
        df = df.filter(pl.col("source") == source)
    for problem in store.problems:
        stdout.print(f"[yellow]skipped:[/] {problem}")
    if as_json:
        print_json(df.head(limit).to_dicts())
        return
    t = Table(title=f"{df.height} profiles in {store.root}", title_justify="left")
    for col in ("workload", "knobs", "gpu", "memory GiB", "SM", "throughput", "source", "mlflow run"):
        t.add_column(col, overflow="fold")
    for row in df.head(limit).iter_rows(named=True):
        t.add_row(
            row["workload"],
            row["knobs"],
            row["gpu"],
            f"{row['gpu_mem_mib'] / 1024:.1f}",
            f"{row['sm']:.2f}",
            f"{row['throughput']:,.4g} {row['unit']}",
            row["source"],
            row["mlflow_run_id"] or "-",
        )
    stdout.print(t)


@profiles_app.command("invalidate")
def invalidate(
    signature: Annotated[str, typer.Argument(help="hardware signature gpu|mem|driver|framework")],
    source: Annotated[str | None, typer.Option("--source", help="only rows of this source")] = None,
    store_dir: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
) -> None:
    """Drop one hardware signature's rows (e.g. after a driver upgrade); other signatures stay."""
    from elastico_core.model.profile import Source
    from elastico_core.rst.store import ProfileStore

    store = ProfileStore.open(store_dir or default_profiles())
    n = store.invalidate(signature, source=Source(source) if source else None)
    stdout.print(f"removed {n} rows of {signature}")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")
