"""``elastico profiles``: the profile store (generate estimates, show rows, invalidate a signature, import
measurements from gpucheck, calibrate the estimators to measured rows, trace the workloads' code)."""

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
    """Fill the store with estimated rows for every configuration of the 12 paper workloads.

    Traced where the store holds a current trace (``elastico profiles trace``), parametric elsewhere.
    """
    from elastico_core.model.hardware import gpu_model
    from elastico_core.rst.catalog import PAPER_WORKLOADS
    from elastico_core.rst.generate import estimated_profiles
    from elastico_core.rst.store import ProfileStore

    store = ProfileStore.open(out or default_profiles())
    models = [gpu_model(g) for g in gpus.split(",") if g.strip()]
    done = store.upsert(list(estimated_profiles(PAPER_WORKLOADS.values(), models, store.estimate)), where="estimator")
    stdout.print(f"wrote {done.written} estimated profiles for {len(models)} GPU models to {store.root}")
    for note in done.notes():
        stdout.print(f"[yellow]{note}[/]")


def origin(row: dict[str, object]) -> str:
    """Where a stored row's numbers came from, in words."""
    provenance = str(row.get("provenance") or "")
    run = str(row.get("mlflow_run_id") or "")
    if row.get("source") == "measured":
        return ", ".join(x for x in (provenance or "measured", f"MLflow run {run}" if run else "") if x)
    if provenance.startswith(("calibrated", "traced")):
        return provenance
    return "parametric estimate (rst.estimators)"


def origin_label(row: dict[str, object]) -> str:
    """``origin`` in a few words, for the table (``--json`` has it whole)."""
    provenance = str(row.get("provenance") or "")
    if row.get("source") == "measured":
        run = str(row.get("mlflow_run_id") or "")
        return "measured" + (" by gpucheck" if "gpucheck" in provenance else "") + (f", run {run[:8]}" if run else "")
    if provenance.startswith("calibrated"):
        return "calibrated" + (" (traced)" if "traced" in provenance else " (parametric)")
    if provenance.startswith("traced"):
        return provenance.split(" (")[0]
    return "parametric"


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
        print_json([{**r, "origin": origin(r)} for r in df.head(limit).to_dicts()])
        return
    t = Table(title=f"{df.height} profiles in {store.root}", title_justify="left")
    for col in ("workload", "knobs", "gpu", "memory GiB", "SM", "throughput", "from"):
        t.add_column(col, overflow="fold")
    from elastico_core.model.knobs import Knobs

    for row in df.head(limit).iter_rows(named=True):
        t.add_row(
            row["workload"],
            Knobs.from_json(row["knobs"]).short(),
            row["gpu"],
            f"{row['gpu_mem_mib'] / 1024:.1f}",
            f"{row['sm']:.2f}",
            f"{row['throughput']:,.4g} {row['unit']}",
            origin_label(row),
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
    from elastico_core.model.profile import Profile
    from elastico_core.profiling.colocate import append_rows, existing_rows
    from elastico_core.profiling.importing import read_measurements
    from elastico_core.rst.store import ProfileStore

    for f in files:
        if not f.is_file():
            raise SpecError("no such file", where=str(f))
    got = read_measurements(files)  # every record checked: what is refused is listed, nothing is written yet
    store = ProfileStore.open(store_dir or default_profiles())
    by_host: dict[str, list[Profile]] = {}
    for profile, host in got.profiles:
        by_host.setdefault(host, []).append(profile)
    by_dataset: dict[Path, list[dict[str, object]]] = {}
    for row in got.pairs:
        by_dataset.setdefault(colocation or store.root / "colocation" / f"{_dataset_slug(row)}.parquet", []).append(row)
    for path in by_dataset:  # a damaged dataset file fails the import before anything is written
        existing_rows(path)
    quarantined = list(got.quarantined)
    written = 0
    for host, rows in by_host.items():
        done = store.upsert(rows, measured_on=host, where="import")
        written += done.written
        quarantined += done.notes()
    signatures = sorted({p.signature.key for p, _ in got.profiles})
    appended = {str(path): append_rows(path, rows) for path, rows in by_dataset.items()}
    if as_json:
        print_json({"records": got.records, "profiles": written, "signatures": signatures, "pairs": appended,
                    "quarantined": quarantined, "store": str(store.root)})  # fmt: skip
        return
    stdout.print(f"{written} measured rows of {', '.join(signatures) or 'no signature'} into {store.root}")
    for dataset, n in appended.items():
        stdout.print(f"{n} co-located pairs appended to {dataset}")
    for why in quarantined:
        stdout.print(f"[yellow]quarantined:[/] {why}")


def _dataset_slug(row: dict[str, object]) -> str:
    """The file name of a pair's GPU in ``<profiles>/colocation/`` (as a signature's slug, driver ``any``)."""
    mem = row.get("gpu_mem_mib")
    mib = int(mem) if isinstance(mem, (int, float)) and not isinstance(mem, bool) and 0 < mem < 1 << 40 else 0
    raw = f"{row.get('gpu')}_{mib}_any_any"
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in raw)[:200]


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
    estimator: Annotated[
        str, typer.Option("--estimator", help="traced (efficiency per workload family) or parametric (log-linear corrections)")
    ] = "traced",
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Calibrate the estimates to measured rows; report the held-out (leave-one-out) error before and after.

    ``--estimator traced`` (default) fits one throughput efficiency per workload family and GPU model to the
    traced estimates (memory is traced, not fitted); ``parametric`` fits the parametric estimators' corrections.
    """
    import polars as pl

    from elastico_core.model.errors import SpecError
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
    if estimator not in ("traced", "parametric"):
        raise SpecError(f"unknown estimator {estimator!r} (traced or parametric)", field="--estimator")
    if estimator == "traced":
        _calibrate_traced(store, rows, problems, write=write, as_json=as_json)
        return
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
                done = store.upsert(fresh, where=f"calibration of {c.gpu}")
                written += done.written
                problems += [f"{n} (estimate not written)" for n in done.notes()]
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


def _calibrate_traced(store: object, rows: list, problems: list[str], *, write: bool, as_json: bool) -> None:  # type: ignore[type-arg]
    """``profiles calibrate --estimator traced``: efficiencies per workload family, held-out error, optional write."""
    from dataclasses import replace

    from elastico_core.model.hardware import gpu_model
    from elastico_core.model.knobs import cartesian
    from elastico_core.model.profile import Source
    from elastico_core.model.workload import JobKind
    from elastico_core.rst.catalog import PAPER_WORKLOADS
    from elastico_core.rst.efficiency import calibrate_traced, write_efficiencies
    from elastico_core.rst.store import ProfileStore, now_iso
    from elastico_core.rst.traced import TracedCache
    from elastico_core.rst.traced_estimator import TracedEstimator, traced_observations, train_trace_for

    assert isinstance(store, ProfileStore)
    cache = TracedCache(store.root)
    obs, skipped = traced_observations(rows, PAPER_WORKLOADS, cache)
    report = calibrate_traced(obs, skipped)
    written, efficiency_file = 0, ""
    if write:
        stamp = now_iso()
        fits = [replace(f, provenance=f"calibrated {stamp} from {f.rows} measured rows (held-out throughput error "
                                      f"x{report.after['throughput']:.2f})") for f in report.fits]  # fmt: skip
        efficiency_file = str(write_efficiencies(cache.folder, fits))
        estimator = TracedEstimator(cache)
        for f in fits:
            gpu = gpu_model(f.gpu)
            for sig in sorted({p.signature for p in rows if p.signature.gpu == f.gpu}, key=lambda s: s.key):
                taken = {(p.workload, p.knobs.to_json()) for p in rows if p.signature == sig}
                fresh = []
                for w in PAPER_WORKLOADS.values():
                    if w.kind is not JobKind.TRAIN:
                        continue
                    for knobs in cartesian(w.knobs):
                        if (w.name, knobs.to_json()) in taken or train_trace_for(cache, w, knobs) is None:
                            continue
                        est = estimator(w, knobs, gpu)
                        if est is not None:
                            fresh.append(replace(est, signature=sig, source=Source.ESTIMATED,
                                                 provenance=f"{f.provenance}; {est.provenance}"))  # fmt: skip
                done = store.upsert(fresh, where=f"traced calibration of {f.gpu}")
                written += done.written
                problems += [f"{n} (estimate not written)" for n in done.notes()]
    if as_json:
        print_json({**report.to_dict(), "written": written, "efficiency_file": efficiency_file, "quarantined": problems})
        return
    t = Table(title=f"traced estimates against {report.rows} measured configurations (throughput: leave one out)",
              title_justify="left")  # fmt: skip
    for col in ("workload", "knobs", "gpu", "throughput before", "after", "memory traced", "measured", "ratio"):
        t.add_column(col, overflow="fold")
    from elastico_core.model.knobs import Knobs

    for r in report.per_row:
        mem_ratio = float(str(r["memory_traced_mib"])) / float(str(r["memory_measured_mib"]))
        t.add_row(str(r["workload"]), Knobs.from_json(str(r["knobs"])).short(), str(r["gpu"]), f"x{r['throughput_before']:.2f}",
                  f"x{r['throughput_after']:.2f}", f"{float(str(r['memory_traced_mib'])):,.0f}",
                  f"{float(str(r['memory_measured_mib'])):,.0f}", f"{mem_ratio:.2f}")  # fmt: skip
    stdout.print(t)
    stdout.print(f"geometric mean: throughput x{report.before['throughput']:.2f} -> x{report.after['throughput']:.2f} "
                 f"(held out), memory x{report.before['memory']:.2f} (traced, not fitted)"
                 + (f"; efficiencies in {efficiency_file}, {written} calibrated estimates written to {store.root}" if write else ""))  # fmt: skip
    for e in report.fits:
        effs = ", ".join(f"{w} {v:.2f}" for w, v in e.to_dict()["efficiency"].items())  # type: ignore[attr-defined]
        stdout.print(f"{e.gpu}: efficiency {effs}; unmeasured families {e.to_dict()['shared_efficiency']:.2f}")
    for why in [*report.skipped, *problems]:
        stdout.print(f"[yellow]skipped:[/] {why}")


MIB = float(1 << 20)


def _trace_row(t: object, status: str) -> dict[str, object]:
    """One traced configuration as ``profiles trace`` prints it: memory parts in MiB, work per sample."""
    from dataclasses import asdict

    from elastico_core.model.traced import TrainTrace

    raw = asdict(t)  # type: ignore[call-overload]
    raw.pop("work", None)
    row: dict[str, object] = {"status": status}
    for k, v in raw.items():
        row[k.replace("_bytes", "_mib") if k.endswith("_bytes") else k] = round(v / MIB, 1) if k.endswith("_bytes") else v
    if isinstance(t, TrainTrace):
        row["other_mib"] = round(t.other_bytes / MIB, 1)
        row["gflops_per_sample"] = float(f"{t.flops / t.samples / 1e9:.4g}")
    return row


@profiles_app.command("trace")
def trace_cmd(
    workload: Annotated[
        list[str] | None, typer.Option("--workload", help="only this workload (repeatable; default: the whole catalog)")
    ] = None,
    jobs_file: Annotated[
        Path | None, typer.Option("--jobs", help="also trace the custom workloads of this job file that name a model builder")
    ] = None,
    scale: Annotated[str, typer.Option("--scale", help="model size: full (the paper's), small or tiny")] = "full",
    force: Annotated[bool, typer.Option("--force", help="trace again even where the cached trace is current")] = False,
    store_dir: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Trace the workloads' code on the CPU: memory parts and FLOPs per configuration, cached with the code's digest.

    Only configurations without a current trace are traced (a change to a workload's code re-traces it);
    the rest are printed from the cache.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from elastico_core.model.errors import SpecError
    from elastico_core.rst.catalog import PAPER_WORKLOADS
    from elastico_core.rst.traced import TracedCache
    from elastico_core.workloads.scale import parse_scale
    from elastico_core.workloads.tracing.catalogue import Job, jobs, trace_catalogue

    size = parse_scale(scale)
    catalog = dict(PAPER_WORKLOADS)
    if jobs_file is not None:
        from elastico_core.specs.files import load_jobs

        for w in load_jobs(jobs_file)[1].values():
            if w.model:
                catalog[w.name] = w
    for name in workload or []:
        if name not in catalog:
            raise SpecError(f"unknown workload {name!r} (known: {', '.join(catalog)})", field="--workload")
    chosen = [catalog[n] for n in (workload or catalog)]
    cache = TracedCache(store_dir or default_profiles())
    quiet = as_json or not stdout.is_terminal
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stdout, disable=quiet, transient=True) as bar:  # fmt: skip
        task = bar.add_task("tracing", total=None)

        def start(total: int) -> None:
            bar.update(task, total=total)

        def done(job: Job, trace: object) -> None:
            bar.update(task, advance=1, description=f"traced {job.label}")

        result = trace_catalogue(chosen, cache, scale=size, force=force, on_start=start, on_done=done)
    fresh = {id(t) for t in result.traced}
    rows = []
    for job in jobs(chosen):
        name = job.workload.name
        if job.config is None:
            t: object = cache.infer_trace(name)
        else:
            t = cache.train_trace(name, *job.config, scale=size.value)
        if t is not None:
            rows.append(_trace_row(t, "traced" if id(t) in fresh else "cached"))
    summary = {"traced": len(result.traced), "cached": result.current, "seconds": round(result.seconds, 1),
               "cpu_seconds": round(result.cpu_seconds, 1), "cache": str(cache.folder),
               "problems": [str(p) for p in cache.problems]}  # fmt: skip
    if as_json:
        print_json({**summary, "configurations": rows})
        return
    t_ = Table(title=f"traced configurations ({size.value} scale), MiB per GPU", title_justify="left")
    for col in ("workload", "knobs", "state", "activ.", "other", "peak", "reserved", "GFLOP/sample", ""):
        t_.add_column(col, overflow="fold", justify="left" if col in ("workload", "knobs", "") else "right")
    for r in rows:
        if "micro_batch" in r:
            knobs = f"mb={r['micro_batch']}" + (" ck" if r["checkpointing"] else "") + (" amp" if r["amp"] else "")
            state = sum(float(str(r[k])) for k in ("weights_mib", "gradients_mib", "optimizer_mib"))
            t_.add_row(str(r["workload"]), knobs, f"{state:,.0f}", *(f"{float(str(r[k])):,.0f}" for k in
                       ("activations_mib", "other_mib", "peak_allocated_mib", "reserved_mib")),
                       f"{r['gflops_per_sample']:.3g}", str(r["status"]))  # fmt: skip
        else:
            kv_kib = float(str(r["kv_bytes_per_token"])) / 1024
            t_.add_row(str(r["workload"]), f"weights, KV cache {kv_kib:.0f} KiB/token", f"{r['weights_mib']:,.0f}",
                       "", "", "", "", f"{float(str(r['flops_per_token'])) / 1e9:.3g}/token", str(r["status"]))  # fmt: skip
    stdout.print(t_)
    stdout.print(f"{summary['traced']} traced now, {summary['cached']} current in the cache ({cache.folder}); "
                 f"{summary['seconds']} s ({summary['cpu_seconds']} s CPU)")  # fmt: skip
    for problem in cache.problems:
        stdout.print(f"[yellow]skipped:[/] {problem}")


def bench_estimates_command(
    gpu: Annotated[str, typer.Option("--gpu", help="GPU model to estimate for")] = "h200-141gb",
    rounds: Annotated[int, typer.Option("--rounds", help="passes over the catalog per estimator (best is kept)")] = 5,
    store_dir: Annotated[Path | None, typer.Option("--profiles", help="profile store whose traced/ cache to use")] = None,
) -> None:
    """Microseconds per estimate over the whole catalog: parametric against traced, taking turns (JSON)."""
    from elastico_core.model.errors import SpecError
    from elastico_core.model.hardware import gpu_model
    from elastico_core.rst.bench import bench_estimators
    from elastico_core.rst.catalog import PAPER_WORKLOADS

    if rounds < 1:
        raise SpecError(f"must be >= 1, got {rounds}", field="rounds")
    print_json(bench_estimators(store_dir or default_profiles(), PAPER_WORKLOADS, gpu_model(gpu), rounds))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")
    bench.command("estimates")(bench_estimates_command)


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
