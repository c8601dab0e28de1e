"""``elastico profile``: measure profiles (§4.1) and co-located pairs (§3.3.2), with MLflow lineage."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from elastico_core.cli.common import default_profiles, print_json, stderr, stdout

if TYPE_CHECKING:  # the heavy modules load inside the commands, so `elastico --help` stays fast
    from rich.progress import Progress

    from elastico_core.model.knobs import Knobs
    from elastico_core.profiling.pairs import Candidate
    from elastico_core.profiling.profiler import ProfilerConfig, SweepResult

profile_app = typer.Typer(help="Measure profiles and co-location pairs (TDOP-style profiler).", no_args_is_help=True)

WarmupS = Annotated[
    float, typer.Option("--warmup-s", help="warm-up budget in seconds (ends earlier at --warmup-iters)")
]
WarmupIters = Annotated[int, typer.Option("--warmup-iters", help="warm-up budget in iterations")]
MeasureS = Annotated[float, typer.Option("--measure-s", help="measurement window in seconds (1 s sampling)")]
Scale_ = Annotated[
    str | None, typer.Option("--scale", help="model size: tiny | small | full (default: full on GPU, tiny on CPU)")
]
Cpus = Annotated[str, typer.Option("--cpus", help="CPU device: auto (the idlest core) or cores, e.g. 0 or 0-3")]
Gpu = Annotated[str, typer.Option("--gpu", help="auto | none | GPU index")]
Threads = Annotated[int | None, typer.Option("--threads", help="torch threads per job (default: the device's cores)")]
Model = Annotated[Path | None, typer.Option("--model", help="inference model folder (default: built on first use)")]
Store = Annotated[Path | None, typer.Option("--profiles", help="profile store folder")]
Force = Annotated[bool, typer.Option("--force", help="measure even if the store has this configuration")]
NoMlflow = Annotated[bool, typer.Option("--no-mlflow", help="do not record MLflow lineage")]
Seed = Annotated[int, typer.Option("--seed")]
Retries = Annotated[int, typer.Option("--retries", help="CPU: re-measure windows disturbed by other processes")]
AsJson = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
WindowS = Annotated[
    float, typer.Option("--measure-s", help="length of each window of the interleaved protocol, in seconds")
]
Repeats = Annotated[int, typer.Option("--repeats", help="rounds of a alone, b alone, a+b (at least 3 for a label)")]


def _config(
    warmup_s: float, warmup_iters: int, measure_s: float, scale: str | None, cpus: str, gpu: str,
    threads: int | None, model: Path | None, seed: int, force: bool, retries: int, repeats: int = 3,
) -> ProfilerConfig:  # fmt: skip
    from elastico_core.profiling.configs import check_scale
    from elastico_core.profiling.device import pick_device
    from elastico_core.profiling.measure import Windows
    from elastico_core.profiling.profiler import ProfilerConfig

    device = pick_device(cpus, gpu)
    chosen = check_scale(scale) if scale else ("full" if device.gpu is not None else "tiny")
    return ProfilerConfig(
        windows=Windows(warmup_s=warmup_s, warmup_iters=warmup_iters, measure_s=measure_s),
        scale=chosen,
        device=device,
        threads=threads or (len(device.cpus) if device.gpu is None else 4),
        model=model.resolve() if model else None,
        seed=seed,
        force=force,
        retries=retries,
        auto_cpus=cpus == "auto" and device.gpu is None,
        repeats=_positive(repeats, "repeats"),
    )


def _positive(value: int, name: str) -> int:
    from elastico_core.model.errors import SpecError

    if value < 1:
        raise SpecError(f"must be >= 1, got {value}", field=name)
    return value


def _json(obj: object) -> None:
    """JSON without NaN or inf (unknown counters print as null, which every JSON reader accepts)."""
    from elastico_core.profiling.records import finite_or_none

    print_json(finite_or_none(obj))


def _print_sweep(result: SweepResult, as_json: bool) -> None:
    from rich.table import Table

    rows = result.frame()
    if as_json:
        measured = {r.profile.knobs.to_json(): r.measurement for r in result.results}
        out = []
        for row in rows.to_dicts():  # what the engine itself reported, for configurations measured now
            m = measured.get(str(row["knobs"]))
            out.append({**row, "engine": m.engine if m else None, "prefix_hit_rate": m.prefix_hit_rate if m else None})
        _json({"workload": result.workload, "signature": result.signature.key, "mlflow_run_id": result.run_id,
               "measured": result.measured, "rows": out})  # fmt: skip
        return
    t = Table(
        title=f"{result.workload} on {result.signature.key} (MLflow run {result.run_id or '-'})", title_justify="left"
    )
    for col in ("knobs", "throughput", "memory MiB", "SM/CPU share", "source", "mlflow run"):
        t.add_column(col, overflow="fold")
    for r, row in zip(result.results, rows.iter_rows(named=True), strict=False):
        t.add_row(row["knobs"], f"{row['throughput']:,.4g} {row['unit']}", f"{row['gpu_mem_mib']:.1f}", f"{row['sm']:.2f}",
                  "cached" if r.cached else "measured", row["mlflow_run_id"] or "-")  # fmt: skip
    stdout.print(t)


def _interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every launched job is stopped before the profiler exits."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _progress() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


def _sweep(
    workload_name: str,
    configs: list[Knobs],
    grid: dict[str, object] | None,
    cfg: ProfilerConfig,
    store_dir: Path | None,
    no_mlflow: bool,
    as_json: bool,
) -> None:
    from elastico_core.model.workload import JobKind
    from elastico_core.profiling.lineage import open_lineage
    from elastico_core.profiling.profiler import sweep
    from elastico_core.rst.store import ProfileStore
    from elastico_core.workloads.contract import find_workload

    workload = find_workload(workload_name)
    assert workload.kind in (JobKind.TRAIN, JobKind.INFER)
    store = ProfileStore.open(store_dir or default_profiles())
    _interrupt_on_sigterm()
    with _progress() as bar:
        task = bar.add_task(f"profiling {workload.name}", total=len(configs))

        def on_config(i: int, n: int, knobs: Knobs, status: str) -> None:
            bar.update(
                task, description=f"{workload.name} {knobs.short()}: {status}", completed=i + (status != "measuring")
            )

        lineage = open_lineage(not no_mlflow)
        name = f"{'run' if len(configs) == 1 and grid is None else 'sweep'}-{workload.name}"
        result = sweep(workload, configs, cfg, store, lineage, grid=grid, on_config=on_config, name=name)
    _print_sweep(result, as_json)


@profile_app.command("run")
def run(
    workload: Annotated[str, typer.Option("--workload", help="a workload of the catalog")],
    knobs: Annotated[str, typer.Option("--knobs", help="JSON object; unspecified knobs take the workload's defaults")] = "{}",
    warmup_s: WarmupS = 30.0, warmup_iters: WarmupIters = 50, measure_s: MeasureS = 60.0, scale: Scale_ = None,
    cpus: Cpus = "auto", gpu: Gpu = "auto", threads: Threads = None, model: Model = None, store_dir: Store = None,
    force: Force = False, no_mlflow: NoMlflow = False, seed: Seed = 0, retries: Retries = 2, as_json: AsJson = False,
) -> None:  # fmt: skip
    """Profile one configuration in an isolated process and write its measured row."""
    from elastico_core.model.knobs import Knobs
    from elastico_core.workloads.contract import find_workload, resolve_knobs

    w = find_workload(workload)
    config = resolve_knobs(w, Knobs.from_json(knobs))
    cfg = _config(warmup_s, warmup_iters, measure_s, scale, cpus, gpu, threads, model, seed, force, retries)
    _sweep(w.name, [config], None, cfg, store_dir, no_mlflow, as_json)


@profile_app.command("sweep")
def sweep_cmd(
    workload: Annotated[str, typer.Option("--workload", help="a workload of the catalog")],
    grid: Annotated[str | None, typer.Option("--grid", help='narrow the grid: {"micro_batch": [32, 128], "dp": [1]}')] = None,
    max_configs: Annotated[int, typer.Option("--max-configs", help="profile a seeded sample of this many configurations")] = 0,
    warmup_s: WarmupS = 30.0, warmup_iters: WarmupIters = 50, measure_s: MeasureS = 60.0, scale: Scale_ = None,
    cpus: Cpus = "auto", gpu: Gpu = "auto", threads: Threads = None, model: Model = None, store_dir: Store = None,
    force: Force = False, no_mlflow: NoMlflow = False, seed: Seed = 0, retries: Retries = 2, as_json: AsJson = False,
) -> None:  # fmt: skip
    """Profile the Cartesian grid of a workload's knobs (or a sample of it), as one MLflow run."""
    from elastico_core.profiling.configs import parse_grid, sweep_configs
    from elastico_core.workloads.contract import find_workload

    w = find_workload(workload)
    narrowed = parse_grid(grid)
    configs = sweep_configs(w, narrowed, max_configs, seed)
    cfg = _config(warmup_s, warmup_iters, measure_s, scale, cpus, gpu, threads, model, seed, force, retries)
    _sweep(w.name, configs, narrowed, cfg, store_dir, no_mlflow, as_json)


def _dataset_path(out: Path | None, store_dir: Path | None, cfg: ProfilerConfig) -> Path:
    if out is not None:
        return out
    from elastico_core.profiling.gpu_probe import open_probe

    probe = open_probe(cfg.device.gpu) if cfg.device.gpu is not None else None
    sig = cfg.signature(probe)
    if probe is not None:
        probe.close()
    return (store_dir or default_profiles()) / "colocation" / f"{sig.slug()}.parquet"


def _colocation(
    pairs: list[tuple[Candidate, Candidate]],
    cfg: ProfilerConfig,
    store_dir: Path | None,
    out: Path | None,
    no_mlflow: bool,
    name: str,
    as_json: bool,
) -> None:
    from rich.table import Table

    from elastico_core.model.knobs import Knobs
    from elastico_core.profiling.colocate import colocation_run
    from elastico_core.profiling.lineage import open_lineage
    from elastico_core.rst.store import ProfileStore

    store = ProfileStore.open(store_dir or default_profiles())
    path = _dataset_path(out, store_dir, cfg)
    _interrupt_on_sigterm()
    with _progress() as bar:
        task = bar.add_task("co-locating", total=len(pairs))

        def on_pair(i: int, n: int, a: Candidate, b: Candidate, status: str) -> None:
            bar.update(
                task,
                description=f"{a.workload.name} + {b.workload.name}: {status}",
                completed=i + (status != "measuring"),
            )

        result = colocation_run(pairs, cfg, store, open_lineage(not no_mlflow), path, name=name, on_pair=on_pair)
    if as_json:
        _json({"mlflow_run_id": result.run_id, "dataset": str(result.dataset), "rows": [r.row for r in result.results],
               "suspect": sum(r.row.get("source") == "suspect" for r in result.results)})  # fmt: skip
        return
    t = Table(
        title=f"{len(result.results)} pairs appended to {result.dataset} (MLflow run {result.run_id or '-'})",
        title_justify="left",
    )
    for col in ("type", "a", "b", "slowdown a [min-max]", "slowdown b [min-max]", "repeats", "row"):
        t.add_column(col, overflow="fold")
    for r in result.results:
        sa, sb = r.slowdowns
        row = r.row

        def spread(x: str, s: float, row: dict[str, object] = row, fitted: bool = r.fitted) -> str:
            lo, hi = row.get(f"slowdown_min_{x}"), row.get(f"slowdown_max_{x}")
            if not fitted:
                return "did not fit"
            return f"{s:.2f} [{lo:.2f}-{hi:.2f}]" if isinstance(lo, float) and isinstance(hi, float) else f"{s:.2f}"

        t.add_row(r.stratum, f"{row['workload_a']} {Knobs.from_json(str(row['knobs_a'])).short()}",
                  f"{row['workload_b']} {Knobs.from_json(str(row['knobs_b'])).short()}", spread("a", sa), spread("b", sb),
                  f"{row.get('repeats_a')}/{row.get('repeats_b')}", str(row.get("source")))  # fmt: skip
    stdout.print(t)


@profile_app.command("colocate")
def colocate(
    a: Annotated[str, typer.Option("--a", help='side a: WORKLOAD or WORKLOAD:{"knob": value}')],
    b: Annotated[str, typer.Option("--b", help="side b, same form")],
    out: Annotated[Path | None, typer.Option("--out", help="co-location dataset (.parquet or .csv) to append to")] = None,
    warmup_s: WarmupS = 30.0, warmup_iters: WarmupIters = 50, measure_s: WindowS = 5.0, repeats: Repeats = 3,
    scale: Scale_ = None, cpus: Cpus = "auto", gpu: Gpu = "auto", threads: Threads = None, model: Model = None,
    store_dir: Store = None, force: Force = False, no_mlflow: NoMlflow = False, seed: Seed = 0, retries: Retries = 2,
    as_json: AsJson = False,
) -> None:  # fmt: skip
    """Measure a pair alone and together, interleaved (a alone, b alone, a+b, repeated); append a dataset row."""
    from elastico_core.profiling.colocate import parse_side

    pair = (parse_side(a), parse_side(b))
    cfg = _config(warmup_s, warmup_iters, measure_s, scale, cpus, gpu, threads, model, seed, force, retries, repeats)
    _colocation(
        [pair], cfg, store_dir, out, no_mlflow, f"colocate-{pair[0].workload.name}+{pair[1].workload.name}", as_json
    )


@profile_app.command("colocate-sweep")
def colocate_sweep(
    workloads: Annotated[str | None, typer.Option("--workloads", help="comma-separated (default: all 12)")] = None,
    configs_per_workload: Annotated[int, typer.Option("--configs-per-workload", help="default config + seeded others")] = 1,
    fraction: Annotated[float, typer.Option("--fraction", help="share of each stratum's pairs (paper: 0.2-0.3)")] = 0.25,
    max_pairs: Annotated[int, typer.Option("--max-pairs", help="cap on pairs (0: none)")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the sampled pairs and stop")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="co-location dataset (.parquet or .csv) to append to")] = None,
    warmup_s: WarmupS = 30.0, warmup_iters: WarmupIters = 50, measure_s: WindowS = 5.0, repeats: Repeats = 3,
    scale: Scale_ = None, cpus: Cpus = "auto", gpu: Gpu = "auto", threads: Threads = None, model: Model = None,
    store_dir: Store = None, force: Force = False, no_mlflow: NoMlflow = False, seed: Seed = 0, retries: Retries = 2,
    as_json: AsJson = False,
) -> None:  # fmt: skip
    """Co-locate a stratified sample (T+T, T+I, I+I) of candidate pairs, each measured interleaved."""
    from elastico_core.profiling.pairs import candidates, sample_pairs, stratum
    from elastico_core.rst.catalog import PAPER_WORKLOADS
    from elastico_core.workloads.contract import find_workload

    chosen = (
        [find_workload(n) for n in workloads.split(",") if n.strip()] if workloads else list(PAPER_WORKLOADS.values())
    )
    pairs = sample_pairs(candidates(chosen, configs_per_workload, seed), fraction, seed, max_pairs)
    if dry_run:
        plan = [{"type": stratum(a, b), "a": a.label, "b": b.label} for a, b in pairs]
        if as_json:
            _json(plan)
        else:
            for p in plan:
                stdout.print(f"{p['type']}  {p['a']}  +  {p['b']}")
        return
    cfg = _config(warmup_s, warmup_iters, measure_s, scale, cpus, gpu, threads, model, seed, force, retries, repeats)
    _colocation(pairs, cfg, store_dir, out, no_mlflow, "colocate-sweep", as_json)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add ``elastico profile`` to the main app."""
    app.add_typer(profile_app, name="profile")
