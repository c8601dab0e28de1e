"""``elastico profiles``: the profile store (generate estimates, show rows, invalidate a signature, import
measurements from gpucheck, calibrate the estimators to measured rows)."""

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
        df = df.filter(pl.col("workload") == _known("workload", workload, _workload_names(df), "--workload"))
    if gpu:
        df = df.filter(pl.col("gpu") == _known("GPU model", gpu, _gpu_names(df), "--gpu"))
    if source:
        df = df.filter(pl.col("source") == _known("source", source, ["measured", "estimated"], "--source"))
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


@profiles_app.command("import")
def import_cmd(
    files: Annotated[list[Path], typer.Argument(help="measurements.jsonl files written by gpucheck")],
    store_dir: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    colocation: Annotated[
        Path | None,
        typer.Option("--colocation", help="co-location dataset to append pairs to (default: <profiles>/colocation/<gpu>.parquet)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Fold measurements (gpucheck's measurements.jsonl) into the store as measured rows, pairs into the dataset."""
    from elastico_core.model.errors import SpecError
    from elastico_core.model.hardware import HardwareSignature
    from elastico_core.profiling.colocate import append_rows
    from elastico_core.profiling.importing import read_measurements
    from elastico_core.rst.store import ProfileStore

    for f in files:
        if not f.is_file():
            raise SpecError("no such file", where=str(f))
    got = read_measurements(files)
    store = ProfileStore.open(store_dir or default_profiles())
    by_host: dict[str, list] = {}  # type: ignore[type-arg]
    for profile, host in got.profiles:
        by_host.setdefault(host, []).append(profile)
    written = sum(store.upsert(rows, measured_on=host) for host, rows in by_host.items())
    signatures = sorted({p.signature.key for p, _ in got.profiles})
    appended: dict[str, int] = {}
    for row in got.pairs:
        gpu, mem = str(row.get("gpu")), int(float(row.get("gpu_mem_mib") or 0))  # type: ignore[arg-type]
        path = colocation or store.root / "colocation" / f"{HardwareSignature(gpu, mem, 'any', 'any').slug()}.parquet"
        appended[str(path)] = appended.get(str(path), 0) + append_rows(path, [row])
    if as_json:
        print_json({"records": got.records, "profiles": written, "signatures": signatures, "pairs": appended,
                    "quarantined": list(got.quarantined), "store": str(store.root)})  # fmt: skip
        return
    stdout.print(f"{written} measured rows of {', '.join(signatures) or 'no signature'} into {store.root}")
    for dataset, n in appended.items():
        stdout.print(f"{n} co-located pairs appended to {dataset}")
    for why in got.quarantined:
        stdout.print(f"[yellow]quarantined:[/] {why}")


@profiles_app.command("calibrate")
def calibrate_cmd(
    measured: Annotated[
        list[Path] | None,
        typer.Option("--measured", help="measured rows: profile files (.parquet) or measurements.jsonl (default: the store's)"),
    ] = None,
    store_dir: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    write: Annotated[
        bool, typer.Option("--write", help="store calibrated estimates for the configurations nobody measured")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Fit the estimators' per-workload corrections to measured rows; report the held-out error before and after."""
    import polars as pl

    from elastico_core.model.profile import Source
    from elastico_core.profiling.importing import measured_profiles
    from elastico_core.rst.calibration import calibrate, calibrated_profiles
    from elastico_core.rst.catalog import PAPER_WORKLOADS
    from elastico_core.rst.store import ProfileStore, now_iso, row_profile

    store = ProfileStore.open(store_dir or default_profiles())
    problems: list[str] = []
    if measured:
        rows, problems = measured_profiles(measured)
    else:
        df = store.frame().filter(pl.col("source") == Source.MEASURED.value)
        rows = [row_profile(r) for r in df.iter_rows(named=True)]
    report = calibrate(rows, PAPER_WORKLOADS)
    written = 0
    if write:
        for c in report.corrections:
            for sig in sorted({p.signature for p in rows if p.signature.gpu == c.gpu}, key=lambda s: s.key):
                taken = {(p.workload, p.knobs.to_json()) for p in rows if p.signature == sig}
                note = (f"calibrated {now_iso()} from {c.rows} measured rows on {c.gpu} (held-out error: throughput "
                        f"x{report.after['throughput']:.2f}, memory x{report.after['memory']:.2f})")  # fmt: skip
                fresh = [p for p in calibrated_profiles(c, sig, PAPER_WORKLOADS.values(), note)
                         if (p.workload, p.knobs.to_json()) not in taken]  # fmt: skip
                written += store.upsert(fresh)
    if as_json:
        print_json({**report.to_dict(), "written": written, "quarantined": problems})
        return
    t = Table(title=f"held-out error of {report.rows} measured configurations (leave one out)", title_justify="left")
    for col in ("workload", "knobs", "gpu", "throughput before", "after", "memory before", "after"):
        t.add_column(col, overflow="fold")
    for r in report.per_row:
        t.add_row(str(r["workload"]), str(r["knobs"]), str(r["gpu"]), f"x{r['throughput_before']:.2f}",
                  f"x{r['throughput_after']:.2f}", f"x{r['memory_before']:.2f}", f"x{r['memory_after']:.2f}")  # fmt: skip
    stdout.print(t)
    stdout.print(
        f"geometric mean: throughput x{report.before['throughput']:.2f} -> x{report.after['throughput']:.2f}, "
        f"memory x{report.before['memory']:.2f} -> x{report.after['memory']:.2f}"
        + (f"; {written} calibrated estimates written to {store.root}" if write else "")
    )
    for why in [*report.skipped, *problems]:
        stdout.print(f"[yellow]skipped:[/] {why}")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")


def _workload_names(df: object) -> list[str]:
    from elastico_core.rst.catalog import PAPER_WORKLOADS

    return sorted({*PAPER_WORKLOADS, *df["workload"].unique().to_list()})  # type: ignore[index]


def _gpu_names(df: object) -> list[str]:
    from elastico_core.model.hardware import KNOWN_GPUS

    return sorted({*KNOWN_GPUS, *df["gpu"].unique().to_list()})  # type: ignore[index]


def _known(what: str, value: str, known: list[str], option: str) -> str:
    """``value`` if it names something the store or the catalog knows; else one line with the nearest names
    (an unknown name would print an empty table and exit 0, as if there were simply no rows)."""
    import difflib

    from elastico_core.model.errors import SpecError

    if value in known:
        return value
    if what == "GPU model":
        from elastico_core.model.hardware import gpu_model

        try:
            return gpu_model(value).name  # an alias (a100, nvidia-smi's name) of a known model
        except SpecError:
            pass
    near = difflib.get_close_matches(value, known, n=3)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise SpecError(f"unknown {what} {value!r} ({hint}known: {', '.join(known)})", field=option)
