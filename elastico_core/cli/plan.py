"""``elastico plan`` and ``elastico bench planner``."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from elastico_core.cli.common import default_profiles, print_json, stderr, stdout
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.errors import SpecError
from elastico_core.model.plan import Plan, QueueCode


def _unplannable(plan: Plan, jobs_file: Path) -> None:
    """Jobs no configuration of which can ever run on this cluster are input errors (exit 2)."""
    for q in plan.queued:
        if q.code is QueueCode.FLOOR_UNREACHABLE:
            raise SpecError(q.reason, where=f"{jobs_file}: job {q.job_id!r}", field="floor")
        if q.code is QueueCode.NO_FEASIBLE_CONFIG:
            raise SpecError(q.reason, where=f"{jobs_file}: job {q.job_id!r}", field="knobs")


class PredictorChoice(StrEnum):
    AUTO = "auto"
    CHAMPION = "champion"
    TABLE = "table"
    NONE = "none"


def choose_predictor(choice: PredictorChoice) -> tuple[SlowdownPredictor, str]:
    """The slowdown predictor for planning and the line that says which one (never fails).

    ``auto`` loads the MLflow champion when a tracking store or a cached champion exists, else uses
    Table 6's pairs; ``champion`` always tries MLflow (then the cache, then Table 6).
    """
    from elastico_core.iac.predictor import NoInterference
    from elastico_core.iac.table6 import table6_predictor

    if choice is PredictorChoice.NONE:
        return NoInterference(), "IAC: no interference predictor (co-location checked on capacity only)"
    if choice is PredictorChoice.TABLE:
        return table6_predictor(), "IAC: Table 6 pair lookup"
    known_store = bool(os.environ.get("MLFLOW_TRACKING_URI")) or Path(".elastico/mlflow.db").exists()
    cached = Path(".elastico/iac-cache/elastico-iac/current.json").exists()
    if choice is PredictorChoice.AUTO and not (known_store or cached):
        return table6_predictor(), "IAC: no trained model registered; using Table 6's pairs (train one: elastico iac train --register)"
    from elastico_core.iac.champion import load_champion

    loaded = load_champion(fallback=table6_predictor())
    return loaded.predictor, loaded.message


def plan_command(
    cluster: Annotated[Path, typer.Option("--cluster", help="cluster YAML")],
    jobs: Annotated[Path, typer.Option("--jobs", help="job YAML (may declare custom workloads)")],
    running: Annotated[Path | None, typer.Option("--running", help="running-state JSON: what runs where now")] = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    predictor: Annotated[PredictorChoice, typer.Option("--predictor", help="interference predictor")] = PredictorChoice.AUTO,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
) -> None:
    """Plan one epoch: a configuration and GPU for every job that can be admitted, and why others wait."""
    from elastico_core.pds.budgets import plan_launch_settings
    from elastico_core.pds.planner import Planner, PlanningInput
    from elastico_core.pds.rules import PRODUCTION
    from elastico_core.pds.serialize import plan_dict
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import load_cluster, load_jobs, load_running

    c = load_cluster(cluster)
    specs, _ = load_jobs(jobs)
    current, prices = load_running(running, specs, c) if running else ({}, None)
    slowdown, message = choose_predictor(predictor)
    # the controller's rules, so a plan printed here is the plan the controller would make
    planner = Planner(ProfileStore.open(profiles or default_profiles()), slowdown, PRODUCTION.planner)
    plan = planner.plan(PlanningInput(PRODUCTION.planning_cluster(c), specs, running=current, prices=prices))
    _unplannable(plan, jobs)
    by_id = {s.id: s for s in specs}
    launch = plan_launch_settings(plan, {p.job_id: by_id[p.job_id].workload for p in plan.placements}, c)
    if as_json:
        out = plan_dict(plan, launch)
        out["predictor"] = {"name": slowdown.name, "message": message}
        print_json(out)
        return
    stderr.print(f"[dim]{message}[/]")
    _print_plan(plan, by_id)


def _print_plan(plan: Plan, by_id: dict) -> None:  # type: ignore[type-arg]
    t = Table(title="Plan", title_justify="left")
    for col in ("job", "workload", "knobs", "GPU", "memory", "SM", "throughput / floor", "slowdown", "shares with"):
        t.add_column(col, overflow="fold")
    for p in plan.placements:
        spec = by_id[p.job_id]
        ok = "[green]" if p.effective_throughput >= p.floor else "[red]"
        t.add_row(
            p.job_id,
            spec.workload.name,
            p.knobs.short(),
            ",".join(p.gpus),
            f"{p.resources.gpu_mem_mib / 1024:.1f} GiB",
            f"{p.resources.sm:.2f}",
            f"{ok}{p.effective_throughput:,.4g}[/] / {p.floor:,.4g} {spec.workload.unit}",
            f"{p.predicted_slowdown:.2f}",
            ", ".join(p.partners) or "-",
        )
    stdout.print(t)
    if plan.queued:
        q = Table(title="Queued", title_justify="left")
        for col in ("job", "why", "detail"):
            q.add_column(col, overflow="fold")
        for item in plan.queued:
            q.add_row(item.job_id, item.code.value, item.reason)
        stdout.print(q)
    changes = [a for a in plan.actions if a.kind.value in ("switch", "migrate", "preempt")]
    if changes:
        a = Table(title="Changes to running jobs", title_justify="left")
        for col in ("job", "action", "reason"):
            a.add_column(col, overflow="fold")
        for act in changes:
            a.add_row(act.job_id, act.kind.value + (f" ({act.change.label})" if act.change else ""), act.reason)
        stdout.print(a)
    pr = Table(title="Shadow prices (score units per GPU's worth)", title_justify="left")
    pr.add_column("good")
    pr.add_column("price", justify="right")
    for good, value in plan.prices.items:
        pr.add_row(good, f"{value:.4f}")
    stdout.print(pr)
    stdout.print(
        f"objective {plan.objective:.3f} (sum of w*T/T_max/S) | {len(plan.placements)} placed, "
        f"{len(plan.queued)} queued | {len(plan.rounds)} ESP-IAC rounds, {plan.iterations} price iterations"
    )
    for note in plan.notes:
        stdout.print(f"[yellow]note:[/] {note}")


def bench_planner_command(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="jobs in the instance")] = 30,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs in the cluster")] = 64,
    seed: Annotated[int, typer.Option("--seed", help="instance seed")] = 0,
    epochs: Annotated[int, typer.Option("--epochs", min=20, help="measured planning epochs (>= 20)")] = 20,
    milp: Annotated[bool, typer.Option("--milp", help="also solve the first epoch exactly with HiGHS")] = False,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="repeat over this many seeds (seed, seed+1, ...)")] = 1,
    time_limit: Annotated[float, typer.Option("--milp-time-limit", help="HiGHS time limit, seconds")] = 120.0,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (the default output)")] = True,
) -> None:
    """Epoch latency (p50/p99) on a realistic random instance; with --milp, the gap to the optimum."""
    import numpy as np

    from elastico_core.bench.planner_bench import bench_planner

    runs = [
        bench_planner(jobs, gpus, s, epochs=epochs, milp=milp, milp_time_limit_s=time_limit, profiles=profiles or default_profiles())
        for s in range(seed, seed + seeds)
    ]
    if seeds == 1:
        print_json(runs[0])
        return
    out = dict(runs[0])
    out["seeds"] = [r["seed"] for r in runs]
    lat = [r["latency_ms"] for r in runs]
    out["latency_ms"] = {k: float(np.median([x[k] for x in lat])) for k in ("p50", "p99", "max")}  # type: ignore[index]
    if milp:
        gaps = [float(r["gap"]) for r in runs]  # type: ignore[arg-type]
        out["gap"] = float(np.median(gaps))
        out["gaps"] = gaps
        out["gap_max"] = max(gaps)
        out["objective"] = float(np.median([float(r["objective"]) for r in runs]))  # type: ignore[arg-type]
        out["milp_objective"] = float(np.median([float(r["milp_objective"]) for r in runs]))  # type: ignore[arg-type]
        out["milp_seconds"] = float(np.median([float(r["milp_seconds"]) for r in runs]))  # type: ignore[arg-type]
        out["milp_all_optimal"] = all(bool(r["milp_optimal"]) for r in runs)
    print_json(out)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("plan")(plan_command)
    bench.command("planner")(bench_planner_command)
    from elastico_core.cli import profiles

    profiles.register(app, bench)
