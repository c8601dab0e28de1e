"""``elastico simulate`` (and ``simulate sweep``) and ``elastico bench sim``: the trace-driven evaluation."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from elastico_core.cli.common import default_profiles, print_json, stderr
from elastico_core.model.errors import SpecError
from elastico_core.sim import BUILTIN

if TYPE_CHECKING:
    from elastico_core.sim.runner import SeedOutcome

DEFAULT_TRACKING_URI = "sqlite:///.elastico/mlflow.db"
DEFAULT_ARTIFACTS = Path(".elastico") / "mlartifacts"
E = TypeVar("E", bound=StrEnum)

sim_app = typer.Typer(
    help="Replay a trace through ElastiCo and the baselines on a simulated cluster (§5).",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _enum(cls: type[E], raw: str, option: str) -> E:
    try:
        return cls(raw.strip().lower())
    except ValueError:
        known = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        raise SpecError(f"unknown value {raw!r} (known: {known})", field=option) from None


def _positive(option: str, value: float, *, upper: float | None = None) -> None:
    """An out-of-range number is the user's mistake: one line naming the option (never a nan table)."""
    if not math.isfinite(value) or value <= 0 or (upper is not None and value > upper):
        bound = f"in (0, {upper:g}]" if upper is not None else "> 0"
        raise SpecError(f"must be a number {bound}, got {value:g}", field=option)


def _ints(raw: str, option: str) -> list[int]:
    try:
        out = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"expected comma-separated integers, got {raw!r}", field=option) from None
    if not out:
        raise SpecError("empty list", field=option)
    return out


def _tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` when set, else the embedded SQLite store under ``.elastico/``."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    Path(".elastico").mkdir(exist_ok=True)
    return DEFAULT_TRACKING_URI


@contextmanager
def _progress(enabled: bool, total_s: float) -> Iterator[Callable[[object], Callable[[float], None] | None]]:
    """A rich progress bar on stderr, one task per simulation, advanced in simulated time."""
    if not enabled:
        yield lambda _kind: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description:<22}"), BarColumn(), TextColumn("{task.fields[sim_h]:>7.1f} h simulated"),
        TimeElapsedColumn(), console=stderr, transient=False,
    ) as bar:

        def factory(kind: object) -> Callable[[float], None]:
            total = max(total_s, 1.0)
            task = bar.add_task(str(getattr(kind, "value", kind)), total=total, sim_h=0.0)
            last = [0.0]

            def tick(t: float) -> None:
                if t - last[0] >= total / 200:
                    last[0] = t
                    bar.update(task, completed=min(t, total), sim_h=t / 3600.0)

            return tick

        yield factory


def simulate_main(
    ctx: typer.Context,
    trace: Annotated[str, typer.Option("--trace", help=f"trace CSV, {BUILTIN}, or philly:PATH (Philly's philly.csv)")] = BUILTIN,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs of the simulated cluster (A100-40GB, 8 per node)")] = 64,
    policies: Annotated[str, typer.Option("--policies", help="comma-separated policies")] = "volcano,lucid,elastico",
    seed: Annotated[int, typer.Option("--seed", help="seed of the trace, the mapping and the ground truth")] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="write metrics.json, report.md/.html and plots here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")] = False,
    hours: Annotated[float, typer.Option("--hours", help="length of the generated or imported trace")] = 24.0,
    load: Annotated[float, typer.Option("--load", help="arrival-rate multiplier of builtin:paper-mix (philly: fraction of jobs kept)")] = 1.0,
    truth: Annotated[str, typer.Option("--truth", help="interference ground truth: contention | table6 | none")] = "contention",
    predictor: Annotated[str, typer.Option("--predictor", help="predictor the policies use: contention | table6 | none")] = "contention",
    epoch_s: Annotated[float, typer.Option("--epoch-s", help="planning epoch ΔT, seconds")] = 5.0,
    replan_s: Annotated[float, typer.Option("--replan-s", help="re-plan period while jobs wait (non-event-driven policies)")] = 5.0,
    every_epoch: Annotated[bool, typer.Option("--every-epoch", help="call the policy every epoch (reference mode)")] = False,
    floor_frac: Annotated[float, typer.Option("--floor-frac", help="throughput floor as a fraction of the default configuration's")] = 0.5,
    data: Annotated[Path, typer.Option("--data", help="public data folder (request sizes for paper-mix)")] = Path("../shared/data"),
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log the run to MLflow")] = False,
    save_trace: Annotated[Path | None, typer.Option("--save-trace", help="also write the trace used as CSV")] = None,
    seeds: Annotated[str | None, typer.Option("--seeds", help="several seeds (0-7, or 0,3,5): means over seeds, their range, and on how many seeds each ordering holds; replaces --seed")] = None,
    workers: Annotated[int, typer.Option("--workers", help="with --seeds: seeds simulated at once, one process each (decision latencies then share the cores)")] = 1,
) -> None:
    """Simulate each policy over the trace; ``--json`` prints the comparison, ``--out`` writes the report."""
    if ctx.invoked_subcommand is not None:
        return
    from elastico_core.rst.store import ProfileStore
    from elastico_core.sim.policy import parse_policies
    from elastico_core.sim.runner import (
        RunSpec,
        SeedTask,
        TraceSource,
        baseline_of,
        cluster_for,
        comparison,
        full_metrics,
        run_policies,
        summarize_all,
    )
    from elastico_core.sim.seeds import parse_seeds
    from elastico_core.sim.simulator import SimConfig
    from elastico_core.sim.trace import write_trace
    from elastico_core.sim.truth import PredictorKind, TruthKind, make_predictor

    _positive("--hours", hours)
    _positive("--load", load)
    _positive("--floor-frac", floor_frac, upper=1.0)
    kinds = parse_policies(policies)
    truth_kind = _enum(TruthKind, truth, "truth")
    pred_kind = _enum(PredictorKind, predictor, "predictor")
    cluster_for(gpus)  # --gpus 0: one clear error before any work
    if epoch_s <= 0 or replan_s < epoch_s:
        raise SpecError("need --epoch-s > 0 and --replan-s >= --epoch-s", field="epoch_s")
    seed_list = parse_seeds(seeds) if seeds is not None else (seed,)
    if len(seed_list) > 1 and save_trace is not None:
        raise SpecError("--save-trace writes one seed's trace; with several --seeds, --out holds trace-seed<S>.csv for each", field="save_trace")
    if workers < 1:
        raise SpecError(f"need at least one worker, got {workers}", field="workers")
    source = TraceSource(trace, gpus, hours, load, data if data.is_dir() else None)
    config = SimConfig(epoch_s=epoch_s, replan_s=replan_s, every_epoch=every_epoch, floor_frac=floor_frac)
    if len(seed_list) > 1:
        tasks = [
            SeedTask(source, tuple(kinds), RunSpec(gpus, s, truth=truth_kind, config=config), profiles or default_profiles(),
                     pred_kind, keep_results=i == 0)
            for i, s in enumerate(seed_list)
        ]
        meta = {"trace": trace, "gpus": gpus, "seeds": list(seed_list), "hours": hours, "load": load,
                "truth": truth_kind.value, "predictor": pred_kind.value, "epoch_s": epoch_s, "replan_s": replan_s,
                "every_epoch": every_epoch, "floor_frac": floor_frac, "workers": workers}
        _simulate_seeds(tasks, workers, out=out, as_json=as_json, no_mlflow=no_mlflow, meta=meta)
        return
    seed = seed_list[0]
    store = ProfileStore.open(profiles or default_profiles())
    tr = source.trace(seed, store)
    if save_trace is not None:
        write_trace(tr, save_trace)
    spec = RunSpec(gpus, seed, truth=truth_kind, config=config)
    with _progress(True, tr.span_s) as progress:
        results = run_policies(tr, kinds, spec, store=store, predictor=make_predictor(pred_kind), progress=progress)
    metrics = summarize_all(results)
    baseline = baseline_of(kinds)
    meta = {
        "trace": trace, "trace_jobs": len(tr), "gpus": gpus, "seed": seed, "hours": hours, "load": load,
        "truth": truth_kind.value, "predictor": pred_kind.value, "epoch_s": epoch_s, "replan_s": replan_s,
        "every_epoch": every_epoch, "floor_frac": floor_frac, "notes": list(tr.notes),
    }
    doc = full_metrics(metrics, baseline, meta)
    if out is not None or not no_mlflow:
        with _report_dir(out) as folder:
            paths = _write_outputs(folder, results, metrics, baseline, doc, tr, meta)
            if not no_mlflow:
                _log(meta, metrics, list(paths), f"simulate {trace} {gpus} GPUs")
    if as_json:
        print_json(comparison(metrics, baseline))
    else:
        _print_table(metrics, baseline)


@contextmanager
def _seed_progress(seeds: Sequence[int], n_policies: int) -> Iterator[Callable[[SeedOutcome], None]]:
    """A bar per seed on stderr for seeds run in worker processes: pulsing while it runs, full when done."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<22}"), BarColumn(), TextColumn("{task.fields[state]}"),
                  TimeElapsedColumn(), console=stderr, transient=False) as bar:
        ids = {s: bar.add_task(f"seed {s}", total=None, state=f"{n_policies} policies") for s in seeds}

        def done(o: SeedOutcome) -> None:
            bar.update(ids[o.seed], total=1, completed=1, state=f"{o.trace.span_s / 3600:.1f} h simulated")

        yield done


def _simulate_seeds(tasks, workers: int, *, out, as_json, no_mlflow, meta) -> None:  # type: ignore[no-untyped-def]
    """The comparison once per seed (a fresh trace, mapping and ground truth each), reported together."""
    from elastico_core.sim.policy import PolicyKind
    from elastico_core.sim.runner import baseline_of, full_metrics, run_seeds
    from elastico_core.sim.seeds import SeedSummary

    kinds = tasks[0].kinds
    baseline = baseline_of(kinds)
    if workers > 1:
        with _seed_progress([t.spec.seed for t in tasks], len(kinds)) as done:
            outcomes = run_seeds(tasks, workers, done=done)
    else:
        from elastico_core.rst.store import ProfileStore

        span = tasks[0].source.span_hint_s(ProfileStore.open(tasks[0].profiles))
        with _progress(True, span) as progress:

            def per_seed_bars(seed: int) -> Callable[[PolicyKind], Callable[[float], None] | None]:
                return lambda kind: progress(f"{kind.value} seed {seed}")

            outcomes = run_seeds(tasks, 1, progress=per_seed_bars)
    per_seed = {o.seed: o.metrics for o in outcomes}
    first = outcomes[0].results or {}
    summary = SeedSummary(tuple(per_seed), baseline.value, {s: {k.value: m for k, m in ms.items()} for s, ms in per_seed.items()})
    doc = {
        "baseline": baseline.value,
        "run": {**meta, "trace_jobs": {str(o.seed): len(o.trace) for o in outcomes}},
        "summary": summary.as_json(),
        "per_seed": {str(s): full_metrics(ms, baseline, {"seed": s}) for s, ms in per_seed.items()},
    }
    if out is not None or not no_mlflow:
        with _report_dir(out) as folder:
            paths = _write_seed_outputs(folder, summary, first, doc, {o.seed: o.trace for o in outcomes}, meta)
            if not no_mlflow:
                _log_seeds(meta, summary, paths)
    if as_json:
        print_json(summary.as_json())
    else:
        from elastico_core.cli.common import stdout
        from elastico_core.sim.report import claims_table, seeds_table, table4_seeds, table5_seeds

        for t in (table4_seeds(summary), table5_seeds(summary), claims_table(summary), seeds_table(summary)):
            if t is not None:
                stdout.print(t.to_md(), soft_wrap=True)


def _write_seed_outputs(folder, summary, first, doc, traces, meta) -> list[Path]:  # type: ignore[no-untyped-def]
    from elastico_core.sim.plots import all_plots, ratio_by_seed
    from elastico_core.sim.report import (
        Report,
        claims_table,
        detail_table,
        label,
        seeds_table,
        table4_seeds,
        table5_seeds,
        write_report,
    )
    from elastico_core.sim.trace import write_trace

    s0 = summary.seeds[0]
    labels = {k.value: label(k.value) for k in first}
    plots = all_plots({k.value: r for k, r in first.items()}, folder, labels)
    ratios = {p: summary.ratios(p, "avg_jct") for p in summary.policies}
    plots["jct_by_seed"] = ratio_by_seed(ratios, folder / "jct_by_seed.png", labels,
                                         f"average JCT over {label(summary.baseline)}'s, per seed", label(summary.baseline))
    tables = [t for t in (table4_seeds(summary), table5_seeds(summary), claims_table(summary)) if t is not None]
    first_detail = detail_table(summary.per_seed[s0])
    tables += [seeds_table(summary), replace(first_detail, title=f"All metrics, seed {s0}")]
    intro = (
        f"Trace {meta['trace']}, {meta['gpus']} GPUs, seeds {', '.join(map(str, summary.seeds))} (each seed draws the trace, "
        f"the workload mapping and the ground truth's noise), ground truth {meta['truth']}, predictor {meta['predictor']}, "
        f"ΔT {meta['epoch_s']:g} s. Plots over time are of seed {s0}.",
    )
    report = Report("ElastiCo simulation report", intro, tuple(tables), {
        "Average JCT per seed": plots["jct_by_seed"].name,
        f"JCT CDF (seed {s0})": plots["jct_cdf"].name, f"Queueing delay by arrival order (seed {s0})": plots["queue_by_arrival"].name,
        f"SM utilisation over time (seed {s0})": plots["sm_util"].name, f"GPU occupancy over time (seed {s0})": plots["gpu_occupancy"].name,
    })
    paths = write_report(folder, report, doc)
    traces_out = [write_trace(tr, folder / f"trace-seed{s}.csv") for s, tr in traces.items()]
    return [*paths.values(), *plots.values(), *traces_out]


def _log_seeds(meta: dict[str, object], summary, artifacts: Sequence[Path]) -> None:  # type: ignore[no-untyped-def]
    """Means over seeds as metrics, each seed's value as a step of the same metric (step = seed)."""
    from elastico_core.sim.tracking import log_run

    metrics: dict[str, float] = {}
    steps: dict[str, list[tuple[int, float]]] = {}
    for p in summary.policies:
        for key in summary.per_seed[summary.seeds[0]][p].as_json():
            metrics[f"{p}.{key}"] = summary.metric(p, key).mean
            steps[f"{p}.{key}"] = [(s, float(getattr(summary.per_seed[s][p], key))) for s in summary.seeds]
    params = dict(meta)
    params["policies"] = ",".join(summary.policies)
    run_id = log_run(tracking_uri=_tracking_uri(), artifact_root=DEFAULT_ARTIFACTS,
                     run_name=f"simulate {meta['trace']} {meta['gpus']} GPUs, {len(summary.seeds)} seeds",
                     params=params, metrics=metrics, artifacts=artifacts, steps=steps)
    stderr.print(f"[dim]logged to MLflow run {run_id}[/]")


@contextmanager
def _report_dir(out: Path | None) -> Iterator[Path]:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="elastico-sim-") as tmp:
        yield Path(tmp)


def _write_outputs(folder, results, metrics, baseline, doc, tr, meta) -> list[Path]:  # type: ignore[no-untyped-def]
    from elastico_core.sim.plots import all_plots
    from elastico_core.sim.report import Report, detail_table, label, table4, table5, write_report
    from elastico_core.sim.trace import write_trace

    named = {k.value: r for k, r in results.items()}
    labels = {k.value: label(k.value) for k in results}
    plots = all_plots(named, folder, labels)
    by_name = {k.value: m for k, m in metrics.items()}
    tables = [t for t in (table4(by_name, baseline.value), table5(by_name)) if t is not None] + [detail_table(by_name)]
    intro = (
        f"Trace {meta['trace']} ({meta['trace_jobs']} jobs), {meta['gpus']} GPUs, seed {meta['seed']}, ground truth "
        f"{meta['truth']}, predictor {meta['predictor']}, ΔT {meta['epoch_s']:g} s.",
        *(str(n) for n in meta["notes"]),
    )
    report = Report("ElastiCo simulation report", intro, tuple(tables), {
        "JCT CDF": plots["jct_cdf"].name, "Queueing delay by arrival order": plots["queue_by_arrival"].name,
        "SM utilisation over time": plots["sm_util"].name, "GPU occupancy over time": plots["gpu_occupancy"].name,
    })
    paths = write_report(folder, report, doc)
    trace_path = write_trace(tr, folder / "trace.csv")
    return [*paths.values(), *plots.values(), trace_path]


def _log(meta: dict[str, object], metrics, artifacts: Sequence[Path], name: str) -> None:  # type: ignore[no-untyped-def]
    from elastico_core.sim.tracking import log_run

    flat = {f"{k.value}.{key}": float(v) for k, m in metrics.items() for key, v in m.as_json().items()}
    params = {k: v for k, v in meta.items() if k != "notes"}
    params["policies"] = ",".join(k.value for k in metrics)
    run_id = log_run(tracking_uri=_tracking_uri(), artifact_root=DEFAULT_ARTIFACTS, run_name=name, params=params,
                     metrics=flat, artifacts=artifacts)
    stderr.print(f"[dim]logged to MLflow run {run_id}[/]")


def _print_table(metrics, baseline) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from elastico_core.cli.common import stdout
    from elastico_core.sim.metrics import normalised
    from elastico_core.sim.report import label

    base = metrics[baseline]
    t = Table(title=f"normalised to {label(baseline.value)}", title_justify="left")
    for col in ("policy", "finished", "avg JCT (h)", "x", "p95 JCT (h)", "throughput", "x", "SM %", "mem %", "attain. %", "sched p50 ms"):
        t.add_column(col, justify="right")
    for k, m in metrics.items():
        n = normalised(m, base)
        t.add_row(label(k.value), f"{m.jobs_finished}/{m.jobs_total}", f"{m.avg_jct_s / 3600:.2f}", f"{n['avg_jct']:.2f}",
                  f"{m.p95_jct_s / 3600:.2f}", f"{m.throughput:.1f}", f"{n['throughput']:.2f}", f"{100 * m.sm_util:.1f}",
                  f"{100 * m.mem_util:.1f}", f"{100 * m.attainment:.1f}", f"{m.sched_latency_ms_p50:.2f}")
    stdout.print(t)


@sim_app.command("sweep")
def sweep_command(
    trace: Annotated[str, typer.Option("--trace", help=f"trace CSV or {BUILTIN}")] = BUILTIN,
    gpus: Annotated[str, typer.Option("--gpus", help="cluster sizes for the scaling table (Table 8)")] = "64,128,256,512",
    loads: Annotated[str, typer.Option("--loads", help="arrival rates in percent for the load sweep ('' to skip)")] = "50,100,150",
    load_gpus: Annotated[int, typer.Option("--load-gpus", help="cluster size of the load sweep")] = 128,
    policies: Annotated[str, typer.Option("--policies", help="comma-separated policies (the first or volcano is the baseline)")] = "volcano,elastico",
    capacity: Annotated[bool, typer.Option("--capacity", help="also search the GPUs each policy needs (first --gpus value's trace)")] = False,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    hours: Annotated[float, typer.Option("--hours")] = 24.0,
    out: Annotated[Path | None, typer.Option("--out", help="write sweep.json and sweep.md/.html here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the sweep as JSON")] = False,
    data: Annotated[Path, typer.Option("--data")] = Path("../shared/data"),
    profiles: Annotated[Path | None, typer.Option("--profiles")] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow")] = False,
) -> None:
    """Table 8 (scale), the §5.6 load sweep and, with --capacity, the GPUs each policy needs."""
    from elastico_core.rst.store import ProfileStore
    from elastico_core.sim.policy import parse_policies
    from elastico_core.sim.report import Report, gpus_needed_table, load_table, table8, write_report
    from elastico_core.sim.runner import RunSpec
    from elastico_core.sim.sweep import ServeTarget, builtin_factory, file_factory, gpus_needed, load_sweep, scale_sweep
    from elastico_core.sim.trace import load_trace

    _positive("--hours", hours)
    kinds = parse_policies(policies)
    sizes = _ints(gpus, "gpus")
    for g in sizes:
        from elastico_core.sim.runner import cluster_for

        cluster_for(g)
    load_list = [x / 100.0 for x in _ints(loads, "loads")] if loads.strip() else []
    store = ProfileStore.open(profiles or default_profiles())
    data_dir = data if data.is_dir() else None
    if trace == BUILTIN:
        factory = builtin_factory(seed, store, data_dir, hours)
    else:
        factory = file_factory(load_trace(Path(trace), seed=seed))
    spec = RunSpec(sizes[0], seed)
    with _progress(True, hours * 3600.0) as progress:
        scale = scale_sweep(factory, sizes, kinds, spec, store=store, progress=progress)
        load_rows = load_sweep(factory, load_gpus, load_list, kinds, spec, store=store, progress=progress) if load_list else []
        needed: dict[str, int | None] = {}
        target = ServeTarget()
        if capacity:
            base_trace = factory(sizes[0], 1.0)
            lo = max(8, (sizes[0] // 2) // 8 * 8)
            cands = list(range(lo, sizes[0] + sizes[0] // 2 + 1, 8))  # 0.5x .. 1.5x the trace's cluster
            for k in kinds:
                needed[k.value] = gpus_needed(base_trace, k, spec, store=store, candidates=cands, target=target, progress=progress)
    tables = [table8(scale)]
    if load_rows:
        tables.append(load_table(load_rows))
    if capacity:
        tables.append(gpus_needed_table(needed, sizes[0], target.describe()))
    doc: dict[str, object] = {
        "scale": [{"gpus": r.gpus, **{k: m.headline() for k, m in r.metrics.items()}} for r in scale],
        "load": [{"gpus": r.gpus, "load": r.load, **{k: m.headline() for k, m in r.metrics.items()}} for r in load_rows],
        "gpus_needed": needed,
        "baseline": scale[0].baseline.policy,
    }
    if out is not None:
        rep = Report("ElastiCo simulation sweep", (f"Trace {trace}, seed {seed}, policies {policies}.",), tuple(tables))
        paths = write_report(out, rep, doc)
        (out / "sweep.md").write_text(paths["markdown"].read_text())
        if not no_mlflow:
            from elastico_core.sim.tracking import log_run

            log_run(tracking_uri=_tracking_uri(), artifact_root=DEFAULT_ARTIFACTS, run_name=f"sweep {trace}",
                    params={"trace": trace, "gpus": gpus, "loads": loads, "policies": policies, "seed": seed},
                    metrics={}, artifacts=list(paths.values()))
    if as_json:
        print_json(doc)
    else:
        from elastico_core.cli.common import stdout

        for t in tables:
            stdout.print(t.to_md())


@sim_app.command("learn")
def learn_command(
    trace: Annotated[str, typer.Option("--trace", help=f"trace CSV, {BUILTIN}, or philly:PATH")] = BUILTIN,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs of the simulated cluster (A100-40GB, 8 per node)")] = 64,
    seed: Annotated[int, typer.Option("--seed", help="seed of the trace, the ground truth, the measurements and the models")] = 0,
    hours: Annotated[float, typer.Option("--hours", help="length of the generated or imported trace")] = 24.0,
    load: Annotated[float, typer.Option("--load", help="arrival-rate multiplier of builtin:paper-mix")] = 1.0,
    truth: Annotated[str, typer.Option("--truth", help="interference ground truth: contention | table6")] = "contention",
    predictor: Annotated[str, typer.Option("--predictor", help="the model the day starts with: table6 | shipped (cf on the training rows) | champion (elastico-iac@champion) | contention | none")] = "table6",
    policy: Annotated[str, typer.Option("--policy", help="an ElastiCo policy (elastico, elastico-bounded, ...)")] = "elastico",
    rules: Annotated[str | None, typer.Option("--rules", help="plan by these named rules instead of the policy's: production or a variant of pds.rules.VARIANTS (no-explore, explore-1.0, ...)")] = None,
    retrain_every_h: Annotated[float, typer.Option("--retrain-every-h", help="simulated hours between retrainings")] = 3.0,
    data: Annotated[list[str] | None, typer.Option("--data", help="training rows besides the runtime ones (repeat; contract file or Gavel .json); default: the profile store's colocation/*.parquet, as the iac_retrain DAG")] = None,
    model: Annotated[str, typer.Option("--model", help="challenger kind: cf | lightgbm | mlp | linear")] = "cf",
    min_window_s: Annotated[float, typer.Option("--min-window-s", help="shortest co-location that makes a runtime row")] = 60.0,
    measure_sigma: Annotated[float, typer.Option("--measure-sigma", help="log-normal error of a measured window")] = 0.02,
    out: Annotated[Path | None, typer.Option("--out", help="write learning.json, report.md/.html, the error plot and the runtime pairs here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")] = False,
    public: Annotated[Path, typer.Option("--public-data", help="public data folder (request sizes for paper-mix)")] = Path("../shared/data"),
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="for --predictor champion (default: $MLFLOW_TRACKING_URI, else the embedded store)")] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log the comparison to MLflow")] = False,
) -> None:
    """A simulated day whose interference model learns from the runtime pairs it measures, against the same day frozen."""
    from elastico_core.cli.iac import _torch_threads, load_data, parse_models
    from elastico_core.pds.rules import variant
    from elastico_core.rst.store import ProfileStore
    from elastico_core.sim.learning import LearnConfig, StartModel, compare_learning, start_predictor
    from elastico_core.sim.policy import parse_policies
    from elastico_core.sim.runner import TraceSource, cluster_for
    from elastico_core.sim.truth import TruthKind, make_truth

    _positive("--hours", hours)
    _positive("--load", load)
    _positive("--retrain-every-h", retrain_every_h)
    if not math.isfinite(min_window_s) or min_window_s < 0:
        raise SpecError(f"must be a number >= 0, got {min_window_s:g}", field="--min-window-s")
    if not math.isfinite(measure_sigma) or measure_sigma < 0:
        raise SpecError(f"must be a number >= 0, got {measure_sigma:g}", field="--measure-sigma")
    kinds = parse_policies(policy)
    if len(kinds) != 1:
        raise SpecError("give one policy", field="policy")
    chosen = None if rules is None else variant(rules)
    truth_kind = _enum(TruthKind, truth, "truth")
    if truth_kind is TruthKind.NONE:
        raise SpecError("with no interference there is nothing to learn: use contention or table6", field="truth")
    start = _enum(StartModel, predictor, "predictor")
    kind = parse_models(model)[0]
    cluster = cluster_for(gpus)
    folder = profiles or default_profiles()
    store = ProfileStore.open(folder)
    files = list(data) if data else sorted(str(p) for p in (folder / "colocation").glob("*.parquet"))
    base = load_data(files, seed) if files else None
    if base is None:
        stderr.print("note: no training rows besides the runtime ones (no --data, no colocation/*.parquet in the profile store)")
    _torch_threads()
    initial = start_predictor(start, base, kind=kind, seed=seed, tracking_uri=tracking_uri)
    learn = LearnConfig(retrain_every_s=retrain_every_h * 3600.0, min_window_s=min_window_s, measure_sigma=measure_sigma, kind=kind)
    source = TraceSource(trace, gpus, hours, load, public if public.is_dir() else None)
    tr = source.trace(seed, store)
    with _progress(not as_json, tr.span_s) as progress:
        cmp = compare_learning(tr, cluster, seed, store=store, truth=lambda s: make_truth(truth_kind, s), predictor=initial,
                               base=base, learn=learn, kind=kinds[0], progress=progress, rules=chosen)
    doc = cmp.as_dict()
    meta: dict[str, object] = {"trace": trace, "trace_jobs": len(tr), "gpus": gpus, "seed": seed, "hours": hours, "load": load,
                               "truth": truth_kind.value, "predictor": start.value, "policy": kinds[0].value, "rules": rules,
                               "retrain_every_h": retrain_every_h, "data": files, "model": kind.value,
                               "min_window_s": min_window_s, "measure_sigma": measure_sigma}
    doc = {"run": meta, **doc}
    if out is not None or not no_mlflow:
        with _report_dir(out) as report_dir:
            paths = _write_learning(report_dir, cmp, doc)
            if not no_mlflow:
                from elastico_core.sim.tracking import log_run

                flat = {f"{k}.{m}": float(v) for k in ("frozen", "learning") for m, v in _learn_metrics(doc[k]).items()}  # type: ignore[arg-type]
                run_id = log_run(tracking_uri=_tracking_uri(), artifact_root=DEFAULT_ARTIFACTS, run_name=f"simulate learn {trace} {gpus} GPUs",
                                 params={k: v for k, v in meta.items()}, metrics=flat, artifacts=list(paths))
                stderr.print(f"[dim]logged to MLflow run {run_id}[/]")
    if as_json:
        print_json(doc)
    else:
        _print_learning(doc)


def _learn_metrics(run: dict[str, object]) -> dict[str, float]:
    err = run["error"]
    assert isinstance(err, dict)
    out = {k: float(run[k]) for k in ("attainment", "avg_jct_s", "p95_jct_s", "throughput")}  # type: ignore[arg-type]
    if err.get("mape") is not None:
        out["prediction_mape"] = float(err["mape"])
    return out


def _write_learning(folder: Path, cmp, doc: dict[str, object]) -> list[Path]:  # type: ignore[no-untyped-def]
    from elastico_core.iac.dataset import write_dataset
    from elastico_core.sim.learning import learning_report
    from elastico_core.sim.plots import error_over_day
    from elastico_core.sim.report import write_report

    folder.mkdir(parents=True, exist_ok=True)
    plot = error_over_day(cmp.series(3600.0), [r.at_s / 3600 for r in cmp.learning.retrainings if r.promoted],
                          folder / "prediction_error.png")
    paths = write_report(folder, learning_report(cmp, doc, {"prediction error over the day": plot.name}), doc)
    (folder / "learning.json").write_text(paths["metrics"].read_text())
    out = [*paths.values(), plot, folder / "learning.json"]
    rows = cmp.learning_pairs()
    if rows is not None:
        out.append(write_dataset(rows, folder / "runtime-pairs.parquet"))
    return out


def _print_learning(doc: dict[str, object]) -> None:
    from rich.table import Table

    from elastico_core.cli.common import stdout

    t = Table(title="frozen model vs learning from runtime pairs (same trace, seed, ground truth)")
    for col in ("run", "prediction MAPE %", "after 1st promotion %", "windows", "attainment %", "avg JCT h", "p95 JCT h", "promotions"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for name in ("frozen", "learning"):
        r = doc[name]
        assert isinstance(r, dict)
        after = r["error_after_first_promotion"]
        promos = sum(1 for x in r["retrainings"] if x["promoted"])
        t.add_row(name, _fmt(r["error"]["mape"]), _fmt(after["mape"] if after else None), str(r["windows"]),
                  f"{100 * r['attainment']:.2f}", f"{r['avg_jct_s'] / 3600:.3f}", f"{r['p95_jct_s'] / 3600:.3f}", str(promos))
    stdout.print(t)
    same = doc["final_model_on_frozen_windows"]
    assert isinstance(same, dict)
    stdout.print(f"error ratio (learning / frozen) {doc['error_ratio']}; attainment {doc['attainment_gain']:+.4f}; "
                 f"avg JCT x{doc['avg_jct_ratio']}; the final model on the frozen run's windows: {_fmt(same['mape'])} % MAPE")


def _fmt(v: object) -> str:
    return "-" if v is None else f"{float(v):.2f}"  # type: ignore[arg-type]


@sim_app.command("import-philly")
def import_philly_command(
    path: Annotated[Path, typer.Argument(help="Philly's philly.csv (petuum/adaptdl, branch osdi21-artifact, simulator/traces/)")],
    out: Annotated[Path, typer.Option("--out", help="trace CSV to write")],
    start_h: Annotated[float, typer.Option("--start-h", help="window start, hours after the first submission")] = 37 * 24.0,
    hours: Annotated[float, typer.Option("--hours", help="window length")] = 24.0,
    sample: Annotated[float, typer.Option("--sample", help="fraction of the window's jobs kept (seeded)")] = 1.0,
    vc: Annotated[str | None, typer.Option("--vc", help="keep one virtual cluster")] = None,
    seed: Annotated[int, typer.Option("--seed", help="seed of the sampling and the workload mapping")] = 0,
) -> None:
    """Convert a window of the Philly trace into the trace CSV contract."""
    from elastico_core.sim.philly import import_philly
    from elastico_core.sim.trace import write_trace

    tr = import_philly(path, seed=seed, hours=hours, start_h=start_h, sample=sample, vc=vc)
    write_trace(tr, out)
    print_json({"out": str(out), "jobs": len(tr), "notes": list(tr.notes)})


@sim_app.command("queues")
def queues_command(
    philly: Annotated[Path, typer.Option("--philly", help="Philly's philly.csv (its virtual clusters become the queues)")] = Path(
        "../shared/data/philly-pollux/philly.csv"),
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs of the shared cluster (the queues' nominal quotas add up to it)")] = 32,
    hours: Annotated[float, typer.Option("--hours", help="window length")] = 24.0,
    start_h: Annotated[float, typer.Option("--start-h", help="window start, hours after the trace's first submission")] = 37 * 24.0,
    sample: Annotated[float, typer.Option("--sample", help="fraction of the window's jobs kept (seeded)")] = 0.1,
    reclaim_epochs: Annotated[int, typer.Option("--reclaim-epochs", help="epochs within which lent quota comes back")] = 3,
    policies: Annotated[str, typer.Option("--policies", help="comma-separated policies")] = "volcano,lucid,greedy,elastico",
    seed: Annotated[int, typer.Option("--seed", help="seed of the sampling, the mapping and the ground truth")] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="write queues.json, queues.md and queues.png here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the study as one JSON object")] = False,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
) -> None:
    """Teams sharing a cluster: Philly's virtual clusters as queues (quotas by GPU-hours), each policy with and
    without them: JCT, guarantee-violation time, Jain's index, GPU busy, reclaims and their cost."""
    from elastico_core.rst.store import ProfileStore
    from elastico_core.sim.policy import parse_policies
    from elastico_core.sim.queue_study import QueueStudy, plot_queues, queue_study, study_markdown
    from elastico_core.sim.runner import cluster_for

    _positive("--hours", hours)
    _positive("--sample", sample, upper=1.0)
    if start_h < 0 or not math.isfinite(start_h):
        raise SpecError(f"must be a number >= 0, got {start_h:g}", field="start-h")
    if not 1 <= reclaim_epochs <= 1000:
        raise SpecError(f"must be an integer in 1..1000, got {reclaim_epochs}", field="reclaim-epochs")
    if not philly.is_file():
        raise SpecError("no such file (get philly.csv as the README's data section says)", where=str(philly))
    cluster_for(gpus)
    kinds = parse_policies(policies)
    store = ProfileStore.open(profiles or default_profiles())
    spec = QueueStudy(philly, gpus, hours, start_h, sample, seed, reclaim_epochs, kinds)
    with _progress(not as_json, hours * 3600.0) as progress:
        doc, results = queue_study(spec, store, progress)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "queues.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
        (out / "queues.md").write_text(study_markdown(doc) + "\n")
        plot_queues(results, kinds, out / "queues.png")
    if as_json:
        print_json(doc)
    else:
        from elastico_core.cli.common import stdout

        stdout.print(study_markdown(doc))


def bench_sim_command(
    gpus: Annotated[int, typer.Option("--gpus", help="cluster size")] = 512,
    hours: Annotated[float, typer.Option("--hours", help="trace length (builtin:paper-mix)")] = 24.0,
    policies: Annotated[str, typer.Option("--policies")] = "volcano,lucid,greedy,elastico",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    load: Annotated[float, typer.Option("--load", help="arrival-rate multiplier (above 1: a contended day)")] = 1.0,
    data: Annotated[Path, typer.Option("--data")] = Path("../shared/data"),
    profiles: Annotated[Path | None, typer.Option("--profiles")] = None,
) -> None:
    """Wall-clock speed of the simulator per policy on builtin:paper-mix (events/s, ratio to Volcano-like); prints JSON."""
    from elastico_core.rst.store import ProfileStore
    from elastico_core.sim.bench import bench_sim
    from elastico_core.sim.policy import parse_policies

    _positive("--hours", hours)
    _positive("--load", load)
    store = ProfileStore.open(profiles or default_profiles())
    print_json(bench_sim(gpus, hours, parse_policies(policies), seed, store=store, data_dir=data if data.is_dir() else None, load=load))


def bench_replay_command(
    gpus: Annotated[int, typer.Option("--gpus", help="cluster size")] = 512,
    hours: Annotated[float, typer.Option("--hours", help="trace length (builtin:paper-mix)")] = 8.0,
    start: Annotated[int, typer.Option("--from", help="first timed planner call (0-based)")] = 2500,
    calls: Annotated[int, typer.Option("--calls", help="timed calls")] = 150,
    warmup: Annotated[int, typer.Option("--warmup", help="untimed calls replayed before them")] = 200,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    callgrind: Annotated[bool, typer.Option("--callgrind", help="count instructions of the timed calls only (run under callgrind --instr-atstart=no)")] = False,
    data: Annotated[Path, typer.Option("--data")] = Path("../shared/data"),
    profiles: Annotated[Path | None, typer.Option("--profiles")] = None,
) -> None:
    """The planner alone on the inputs of a window of ElastiCo's simulated day (per-stage us per call); prints JSON."""
    from elastico_core.rst.store import ProfileStore
    from elastico_core.sim.replay import ReplayWindow, record, replay

    _positive("--hours", hours)
    window = ReplayWindow(gpus, hours, start, calls, warmup, seed)
    store = ProfileStore.open(profiles or default_profiles())
    rec = record(window, store, data if data.is_dir() else None)
    print_json(replay(rec, window, callgrind=callgrind))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this area's commands to the main app and the `bench` group."""
    sim_app.callback(invoke_without_command=True)(simulate_main)
    from elastico_core.cli import rules

    rules.register(sim_app)
    app.add_typer(sim_app, name="simulate")
    bench.command("sim")(bench_sim_command)
    bench.command("replay")(bench_replay_command)
