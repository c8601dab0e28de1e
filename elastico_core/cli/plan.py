"""``elastico plan`` and ``elastico bench planner``."""

from __future__ import annotations

import os
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from elastico_core.cli.common import default_profiles, print_json, stdout
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


LOOKUP_TTL_S = 300.0  # --predictor auto trusts the registry's last answer this long while the store is unchanged


class PredictorChoice(StrEnum):
    AUTO = "auto"
    CHAMPION = "champion"
    TABLE = "table"
    NONE = "none"


def choose_predictor(choice: PredictorChoice) -> tuple[SlowdownPredictor, str]:
    """The slowdown predictor for planning and the line that says which one (never fails).

    ``auto`` loads the MLflow champion when a tracking store or a cached champion exists, else uses
    Table 6's pairs; ``champion`` always asks MLflow (then the cache, then Table 6). ``auto`` reuses the registry's
    answer of the last ``LOOKUP_TTL_S`` seconds while the store file is unchanged: asking costs seconds.
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

    ttl = LOOKUP_TTL_S if choice is PredictorChoice.AUTO else 0.0
    loaded = load_champion(fallback=table6_predictor(), lookup_ttl_s=ttl)
    return loaded.predictor, loaded.message


def watch_champion(choice: PredictorChoice, predictor: SlowdownPredictor, message: str, interval_s: float) -> object | None:
    """For a long-running controller: a ``ChampionWatch`` that swaps in a newly promoted champion (None for table/none)."""
    if choice in (PredictorChoice.NONE, PredictorChoice.TABLE) or interval_s <= 0:
        return None
    from elastico_core.iac.champion import ChampionLoad, ChampionWatch
    from elastico_core.iac.table6 import table6_predictor

    return ChampionWatch(ChampionLoad(predictor, "given", None, message), interval_s=interval_s, fallback=table6_predictor())


def plan_command(
    cluster: Annotated[Path, typer.Option("--cluster", help="cluster YAML")],
    jobs: Annotated[Path, typer.Option("--jobs", help="job YAML (may declare custom workloads)")],
    running: Annotated[Path | None, typer.Option("--running", help="running-state JSON: what runs where now")] = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    predictor: Annotated[PredictorChoice, typer.Option("--predictor", help="interference predictor")] = PredictorChoice.AUTO,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
) -> None:
    """Plan one epoch: a configuration and GPU for every job that can be admitted, and why others wait."""
    from elastico_core.model.planning import PlanningInput
    from elastico_core.pds.budgets import plan_launch_settings
    from elastico_core.pds.planner import Planner
    from elastico_core.pds.rules import PRODUCTION
    from elastico_core.pds.serialize import plan_dict
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import load_cluster, load_jobs, load_running

    c = load_cluster(cluster)
    specs, _ = load_jobs(jobs)
    if c.queues:  # a job its queue can never admit is a mistake in the file: one line, as at submit
        from elastico_core.pds.quota_admission import queue_problem
        from elastico_core.pds.rules import PRODUCTION

        seen = PRODUCTION.planning_cluster(c)  # the GPUs as the planner sees them (less the memory margin)
        for spec in specs:
            problem = queue_problem(seen, spec)
            if problem is not None:
                raise SpecError(problem, where=f"{jobs}: job {spec.id!r}", field="queue")
    current, prices = load_running(running, specs, c) if running else ({}, None)
    slowdown, message = choose_predictor(predictor)
    # the controller's rules, so a plan printed here is the plan the controller would make
    planner = Planner(ProfileStore.open(profiles or default_profiles()), PRODUCTION.iac_view(slowdown), PRODUCTION.planner)
    plan = planner.plan(PlanningInput(PRODUCTION.planning_cluster(c), specs, running=current, prices=prices))
    cold = PRODUCTION.cold_start_note(slowdown, (s.workload.name for s in specs))
    if cold is not None:  # as the controller notes it
        plan = replace(plan, notes=(*plan.notes, cold))
    _unplannable(plan, jobs)
    by_id = {s.id: s for s in specs}
    launch = plan_launch_settings(plan, {p.job_id: by_id[p.job_id].workload for p in plan.placements}, c)
    if as_json:
        out = plan_dict(plan, launch)
        out["predictor"] = {"name": slowdown.name, "message": message}
        print_json(out)
        return
    _print_plan(plan, by_id, message)


UNIT_SHORT = {"samples/s": "smp/s", "tokens/s": "tok/s"}


def gpu_aliases(gpu_ids: list[str]) -> dict[str, str]:
    """Short GPU ids for an 80-column table: ``n0/1`` for the second GPU of the first node (legend printed)."""
    nodes = list(dict.fromkeys(g.rsplit("/", 1)[0] for g in gpu_ids))
    index = {n: i for i, n in enumerate(nodes)}
    return {g: f"n{index[g.rsplit('/', 1)[0]]}/{g.rsplit('/', 1)[1]}" if "/" in g else g for g in gpu_ids}


def knob_legend(names: set[str]) -> str:
    """``mb = micro_batch, ck = activation checkpointing, …`` for the knobs a table shows."""
    from elastico_core.model.knobs import knob_legend as legend

    return legend(names)


def _print_plan(plan: Plan, by_id: dict, message: str) -> None:  # type: ignore[type-arg]
    from rich import box

    from elastico_core.model.explain import explain_wait, gib

    gpus = sorted({g for p in plan.placements for g in p.gpus})
    alias = gpu_aliases(gpus)
    t = Table(title=f"Plan: {len(plan.placements)} placed, {len(plan.queued)} queued", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    t.add_column("job", no_wrap=True, overflow="ellipsis", max_width=20)
    t.add_column("GPU", no_wrap=True)
    t.add_column("knobs", overflow="fold", ratio=1)
    t.add_column("mem", justify="right", no_wrap=True)
    t.add_column("rate / floor", justify="right", no_wrap=True)
    t.add_column("S", justify="right", no_wrap=True)
    knob_names: set[str] = set()
    for p in sorted(plan.placements, key=lambda p: (p.gpus, p.job_id)):
        spec = by_id[p.job_id]
        knob_names.update(k for k, v in p.knobs.items if v is not False and not (k == "dp" and v == 1))
        ok = "green" if p.effective_throughput >= p.floor else "red"
        unit = UNIT_SHORT.get(spec.workload.unit, spec.workload.unit)
        t.add_row(
            p.job_id,
            ",".join(alias[g] for g in p.gpus),
            p.knobs.short(),
            gib(p.resources.gpu_mem_mib).replace(" GiB", "G"),
            f"[{ok}]{_figure(p.effective_throughput)}[/]/{_figure(p.floor)} {unit}",
            f"{p.predicted_slowdown:.2f}x" if p.partners else "-",
        )
    stdout.print(t)
    if alias:
        stdout.print(f"[dim]GPU: node/index ({'; '.join(_nodes(alias))}); rows on one GPU share it under MPS. "
                     f"mem: GPU memory per GPU. rate: predicted throughput beside its partner vs its floor "
                     f"(smp/s = samples/s, tok/s = tokens/s). S: predicted slowdown from sharing.[/]")
    if knob_names:
        stdout.print(f"[dim]knobs: {knob_legend(knob_names)}.[/]")
    splits = [(r.round, v) for r in plan.rounds for v in r.violations]
    if splits:
        s = Table(title="Pairs kept apart (predicted slowdown above its tolerance)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
        for col in ("round", "GPU", "pair", "slowdown", "tolerance"):
            s.add_column(col, overflow="fold")
        for rnd, v in splits:
            s.add_row(str(rnd), v.gpu, f"{v.job_a} + {v.job_b}", f"{v.slowdown_a:.2f}x / {v.slowdown_b:.2f}x",
                      f"{v.tau_a:.2f}x / {v.tau_b:.2f}x")
        stdout.print(s)
    if plan.queued:
        q = Table(title="Queued (in queue order)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1))
        q.add_column("pos", justify="right", no_wrap=True)
        q.add_column("job", no_wrap=True, overflow="ellipsis", max_width=22)
        q.add_column("why it waits, and what would admit it", overflow="fold", ratio=1)
        for pos, item in enumerate(plan.queued, start=1):
            spec = by_id.get(item.job_id)
            unit = spec.workload.unit if spec is not None else ""
            why = explain_wait(item.code, item.reason, item.shortfall, unit=unit, position=pos)
            q.add_row(str(pos), item.job_id, why.text())
        stdout.print(q)
    changes = [a for a in plan.actions if a.kind.value in ("switch", "migrate", "preempt")]
    if changes:
        a = Table(title="Changes to running jobs", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1))
        a.add_column("job", no_wrap=True, overflow="ellipsis", max_width=22)
        a.add_column("action", no_wrap=True)
        a.add_column("what changes", overflow="fold", ratio=1)
        for act in changes:
            label = act.change.label if act.change else ""
            a.add_row(act.job_id, act.kind.value, strip_label(act.reason, label) + (f" ({label})" if label else ""))
        stdout.print(a)
    if plan.queues:
        qt = Table(title="Queues (GPUs' worth: a shared GPU is charged by the larger of its SM and memory shares)",
                   title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
        for col in ("queue", "nominal", "in use", "borrowed", "lent", "pending", "fair share"):
            qt.add_column(col, justify="left" if col == "queue" else "right", no_wrap=True)
        for st in plan.queues:
            qt.add_row(st.name, f"{st.nominal_gpus:g}", f"{st.used_gpus:.2f}", f"{st.borrowed_gpus:.2f}", f"{st.lent_gpus:.2f}",
                       str(st.pending), f"{st.fair_share_gpus:.2f}")
        stdout.print(qt)
    prices = [(good, value) for good, value in plan.prices.items if value > 0]
    if prices:
        stdout.print("[dim]shadow prices (share of the score a job gives up per whole unit it takes): "
                     + ", ".join(f"{g} {v:.3f}" for g, v in prices) + "[/]")
    else:
        stdout.print("[dim]shadow prices: all zero (nothing is scarce this epoch)[/]")
    stdout.print(
        f"objective {plan.objective:.3f} (sum over placed jobs of weight x throughput/best x 1/slowdown) | "
        f"{len(plan.rounds)} ESP-IAC rounds, {plan.iterations} price iterations | {message}"
    )
    for note in plan.notes:
        stdout.print(f"[yellow]note:[/] {note}")


def strip_label(reason: str, label: str) -> str:
    """A change's reason without its kind repeated in front (``checkpoint-resume: amp …`` → ``amp …``)."""
    return reason[len(label) + 2:] if label and reason.startswith(f"{label}: ") else reason


def _figure(value: float) -> str:
    """A throughput figure short enough for one cell: 596, 8.6k, 531k."""
    if abs(value) >= 10_000:
        return f"{value / 1000:.0f}k"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def _nodes(alias: dict[str, str]) -> list[str]:
    seen: dict[str, str] = {}
    for g, a in alias.items():
        seen.setdefault(a.split("/", 1)[0], g.rsplit("/", 1)[0])
    return [f"{k} = {v}" for k, v in seen.items()]


def bench_planner_command(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="jobs in the instance")] = 30,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs in the cluster")] = 64,
    seed: Annotated[int, typer.Option("--seed", help="instance seed")] = 0,
    epochs: Annotated[int, typer.Option("--epochs", min=20, help="measured planning epochs (>= 20)")] = 20,
    milp: Annotated[bool, typer.Option("--milp", help="also solve the first epoch exactly with HiGHS")] = False,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="repeat over this many seeds (seed, seed+1, ...)")] = 1,
    time_limit: Annotated[float, typer.Option("--milp-time-limit", help="HiGHS time limit, seconds")] = 120.0,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    rules: Annotated[str, typer.Option("--rules", help="rule set: production or a variant of pds.rules.VARIANTS")] = "production",
    predictor: Annotated[str, typer.Option("--predictor", help="interference predictor: table6 | contention | none (--milp: none)")] = "table6",
    load: Annotated[float | None, typer.Option("--load", help="jobs = load x the cluster's job slots (GPUs x jobs per GPU); replaces --jobs")] = None,
    queues: Annotated[int, typer.Option("--queues", min=0, max=1000, help="queues sharing the cluster (one cohort; 0: none)")] = 0,
    callgrind: Annotated[bool, typer.Option("--callgrind", help="count instructions of the measured epochs only (run under valgrind --tool=callgrind --instr-atstart=no): repeatable where times are not")] = False,
    compare_queues: Annotated[bool, typer.Option("--compare-queues", help="with --queues N: plan each instance without and with the queues in turn, --repeats times, and print the CPU time per epoch of both and their ratio")] = False,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="--compare-queues: runs per seed and setting (the least disturbed counts)")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (the default output)")] = True,
) -> None:
    """Epoch latency (p50/p99) of the production planner on a realistic random instance, contended with
    more jobs than the cluster holds (--load 1.5, or --jobs above 2 x --gpus); with --milp, the gap to
    the optimum (capacity alone: the MILP knows no interference)."""
    import numpy as np

    from elastico_core.bench.planner_bench import bench_planner
    from elastico_core.iac.predictor import NoInterference
    from elastico_core.pds.rules import variant
    from elastico_core.sim.truth import PredictorKind, make_predictor

    chosen = variant(rules)
    if predictor not in {k.value for k in PredictorKind}:
        raise SpecError(f"unknown predictor {predictor!r} (table6 | contention | none)", field="predictor")
    pred = NoInterference() if milp else make_predictor(PredictorKind(predictor))
    if load is not None:
        if not 0 < load <= 100:
            raise SpecError(f"must be in (0, 100], got {load:g}", field="load")
        jobs = max(1, round(load * gpus * 2))  # the bench clusters hold two jobs per GPU
    if callgrind and (compare_queues or milp):
        raise SpecError("--callgrind counts one setting: run --queues 0 and --queues N apart, without --milp", field="callgrind")
    if compare_queues:
        if not queues or milp:
            raise SpecError("--compare-queues needs --queues N (N >= 1) and no --milp", field="compare-queues")
        from elastico_core.bench.planner_bench import queue_overhead

        print_json(queue_overhead(jobs, gpus, queues, range(seed, seed + seeds), repeats, epochs,
                                  predictor=lambda: make_predictor(PredictorKind(predictor)),
                                  profiles=profiles or default_profiles(), rules=chosen))
        return
    runs = [
        bench_planner(jobs, gpus, s, epochs=epochs, milp=milp, milp_time_limit_s=time_limit, profiles=profiles or default_profiles(),
                      predictor=pred, rules=chosen, queues=queues, callgrind=callgrind)
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
