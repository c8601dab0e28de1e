"""``elastico jobs``, ``elastico controller``, ``elastico state`` and ``elastico bench state``: the planner state.

Every command takes ``--state URL`` (else ``$ELASTICO_STATE_URL``, else ``sqlite:///.elastico/state.db``):
this edge is the only place the variable is read.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from elastico_core.cli.common import default_profiles, print_json, stdout
from elastico_core.model.errors import SpecError
from elastico_core.specs.files import read_text_file
from elastico_core.state.url import ENV_STATE_URL

ENV_FAULT = "ELASTICO_CONTROLLER_FAULT"  # test hook: planned | recording | recorded -> SIGKILL at that stage

jobs_app = typer.Typer(help="Jobs in the planner state: submit, list, show, cancel.", no_args_is_help=True)
controller_app = typer.Typer(help="The controller: one planning epoch every ΔT.", no_args_is_help=True)
state_app = typer.Typer(help="The planner state database (schema migrations).", no_args_is_help=True)

StateOpt = Annotated[
    str | None,
    typer.Option("--state", envvar=ENV_STATE_URL, show_envvar=True,
                 help="state database URL or SQLite file (default sqlite:///.elastico/state.db)"),
]


def _service(url: str | None) -> Any:
    from elastico_core.state import JobService

    return JobService.open(url)


# ---- jobs ---------------------------------------------------------------------------------------
SUBMIT_LINES = 50


@jobs_app.command("submit")
def submit(
    spec: Annotated[Path, typer.Option("--spec", help="job YAML (the format of examples/jobs.yaml)")],
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the registered jobs as JSON")] = False,
) -> None:
    """Register every job of a job file (all or none); resubmitting the same file changes nothing."""
    text = read_text_file(spec)
    service = _service(state)
    try:
        results = service.submit_document(text, str(spec))
    finally:
        service.close()
    if as_json:
        print_json([{**_brief(r.job), "created": r.created} for r in results])
        return
    new = sum(r.created for r in results)
    for r in results[:SUBMIT_LINES]:  # a bulk file prints a summary, not one line per job
        stdout.print(f"{'registered' if r.created else 'unchanged '} {r.job.id} ({r.job.status.value})")
    if len(results) > SUBMIT_LINES:
        stdout.print(f"... and {len(results) - SUBMIT_LINES} more (--json lists them all)")
    stdout.print(f"{new} new, {len(results) - new} already registered")


@jobs_app.command("list")
def list_command(
    state: StateOpt = None,
    status: Annotated[list[str] | None, typer.Option("--status", help="only this status (repeatable)")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="at most this many live jobs and this many ended jobs")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="every job, however many (slow with a long history)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="a JSON list of objects (id, status, config, gpu, ...)")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="each job's whole reason and what would admit it (as jobs show)")] = False,
) -> None:
    """Live jobs in registration order, then the most recently ended (newest end time first)."""
    from elastico_core.state import JobStatus
    from elastico_core.state.service import ENDED_PAGE, LIVE_PAGE

    try:
        statuses = [JobStatus(s) for s in status] if status else list(JobStatus)
    except ValueError:
        raise SpecError(f"unknown status in {status} (known: {', '.join(s.value for s in JobStatus)})", field="status") from None
    live = [s for s in statuses if not s.terminal]
    ended = [s for s in statuses if s.terminal]
    service = _service(state)
    try:
        jobs = service.list_jobs(live, limit=None if show_all else limit or LIVE_PAGE) if live else ()
        if ended:
            jobs += service.ended_jobs(ended, limit=2**62 if show_all else limit or ENDED_PAGE)
        counts = service.counts()
    finally:
        service.close()
    left = sum(counts.get(s, 0) for s in statuses) - len(jobs)
    if left > 0:  # say what was left out, on stderr so that --json stays one document
        print(f"note: {left} more jobs not shown (--limit N or --all)", file=sys.stderr)
    if as_json:
        print_json([_brief(j) for j in jobs])
        return
    positions = _positions(service_url=state) if any(j.status is JobStatus.PENDING for j in jobs) else {}
    rows = [(j.id, j.status.value, j.workload, j.plan.knobs.short() if j.plan else "-", ",".join(j.gpus) or "-",
             _why(j, positions.get(j.id), wide)) for j in jobs]
    if not wide and stdout.width < 110:
        _print_narrow(rows, stdout.width)
        return
    t = Table(title=f"{len(jobs)} jobs", title_justify="left", caption=None if wide else
              "why in full and what would admit a job: elastico jobs show ID (or --wide)", caption_justify="left")
    for col in ("id", "status", "workload", "config", "GPU", "why (queue position)"):
        t.add_column(col, overflow="fold", ratio=1 if col.startswith("why") else None)
    for row in rows:
        t.add_row(*row)
    stdout.print(t)


def _print_narrow(rows: Sequence[tuple[str, ...]], width: int) -> None:
    """``kubectl get``-like: a line per job in aligned columns, its reason indented on the next line(s), so
    that an 80-column terminal shows each job in two or three lines instead of a table folded into fifteen."""
    import textwrap

    from rich.markup import escape

    heads = ("ID", "STATUS", "WORKLOAD", "CONFIG", "GPU")
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    stdout.print(f"{len(rows)} jobs (the whole reason, what would admit a job: jobs show ID or --wide)")
    stdout.print("[bold]" + escape("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()) + "[/bold]",
                 overflow="fold")
    for row in rows:
        stdout.print(escape("  ".join(c.ljust(w) for c, w in zip(row[:5], widths, strict=True)).rstrip()), overflow="fold")
        for line in textwrap.wrap(row[5], width=max(20, width - 4)):
            stdout.print("  [dim]" + escape(line) + "[/dim]", overflow="fold")


def _positions(service_url: str | None) -> dict[str, int]:
    """Queue positions of every pending job (the controller's order), whatever the listing's filter."""
    from elastico_core.model.explain import queue_positions
    from elastico_core.state import JobStatus

    service = _service(service_url)
    try:
        pending = service.list_jobs([JobStatus.PENDING])
    finally:
        service.close()
    return queue_positions((j.id, j.priority, j.created_at) for j in pending)


def _why(job: Any, position: int | None, wide: bool = True) -> str:
    """The job's latest word in the user's terms: for a queued job its position and what it lacks; for a
    placed one (unless ``wide``) only what its row does not show already — predicted rate, floor, partners."""
    from elastico_core.model.explain import explain_wait, rate, strip_code, unit_of_kind
    from elastico_core.state import JobStatus

    unit = unit_of_kind(job.kind)
    if job.status is JobStatus.PENDING:
        why = explain_wait(job.queue_code, job.reason, job.shortfall, unit=unit, position=position)
        return (f"#{position}: " if position else "") + (why.text() if wide else why.headline)
    plan = job.plan
    if wide or plan is None or job.status.terminal:
        return strip_code(job.reason, job.queue_code) or "-"
    beside = f"beside {', '.join(plan.partners)} ({plan.predicted_slowdown:.2f}x)" if plan.partners else "alone"
    return f"{rate(plan.throughput, unit)} (floor {rate(plan.floor, '').strip()}), {beside}"


@jobs_app.command("show")
def show(
    job_id: Annotated[str, typer.Argument(help="job id")],
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole job as JSON")] = False,
) -> None:
    """One job: spec, plan (knobs, GPUs, launch env/args, token), switch target, recent decisions."""
    service = _service(state)
    try:
        job = service.get(job_id)
        decisions = service.decisions(job_id=job_id, limit=20)
    finally:
        service.close()
    out = job.to_dict()
    out["decisions"] = [{"epoch": d.epoch, "kind": d.kind.value, "reason": d.reason, "token": d.token} for d in decisions]
    if as_json:
        print_json(out)
        return
    positions = _positions(state) if job.status.value == "pending" else {}
    for line in job_summary(job, decisions, positions.get(job.id)):
        stdout.print(line, highlight=False)


def job_summary(job: Any, decisions: Any, position: int | None) -> list[str]:
    """``jobs show`` as a person reads it: what runs where, against which floor, why it waits, what happened."""
    from elastico_core.model.explain import gib, rate, strip_code, unit_of_kind

    unit = unit_of_kind(job.kind)
    ident = job.identity
    lines = [f"[bold]{job.id}[/]  {job.status.value}  ({job.kind}: {job.workload}, priority {job.priority})"]
    if ident.dag_id:
        mapped = f"[{ident.map_index}]" if ident.map_index >= 0 else ""
        lines.append(f"  Airflow task  {ident.dag_id} / {ident.run_id} / {ident.task_id}{mapped}"
                     + (f", try {job.last_try}" if job.last_try else ""))
    plan = job.plan
    if plan is not None:
        shares = f", sharing with {', '.join(plan.partners)}" if plan.partners else ", alone"
        lines.append(f"  runs          {plan.knobs.short()} on {', '.join(plan.gpus)}{shares}")
        lines.append(f"  holds         {gib(plan.memory_mib)} GPU memory and {100 * plan.sm:.0f}% of the SMs per GPU")
        lines.append(f"  throughput    predicted {rate(plan.throughput / plan.predicted_slowdown, unit)} "
                     f"(slowdown {plan.predicted_slowdown:.2f}x, profile {plan.source}), floor {rate(plan.floor, unit)}")
    if job.measured_throughput is not None:
        lines.append(f"  measured      {rate(job.measured_throughput, unit)}")
    if job.target is not None:
        lines.append(f"  switching to  {job.target.knobs.short()} on {', '.join(job.target.gpus)}"
                     f" ({job.pending_action.value if job.pending_action else 'switch'})")
    if job.status.value == "pending":
        lines.append(f"  waits         {_why(job, position)}")
    elif job.reason:
        lines.append(f"  last word     {strip_code(job.reason, job.queue_code)}")
    lines.append(f"  attempts      {job.attempts} admissions, {job.oom_kills} out-of-memory kills")
    when = [f"registered {job.created_at:%Y-%m-%d %H:%M:%S}"]
    if job.started_at:
        when.append(f"started {job.started_at:%H:%M:%S}")
    if job.finished_at:
        when.append(f"ended {job.finished_at:%H:%M:%S}")
    lines.append(f"  when          {', '.join(when)}")
    if decisions:
        lines.append("  decisions (newest first):")
        for d in decisions[:10]:
            lines.append(f"    epoch {d.epoch:<5} {d.kind.value:<8} {strip_code(d.reason, d.code)}")
    lines.append("  (the whole record: --json)")
    return lines


@jobs_app.command("cancel")
def cancel(
    job_id: Annotated[str, typer.Argument(help="job id")],
    state: StateOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="recorded with the job")] = "cancelled from the command line",
) -> None:
    """Cancel a job: its GPUs are released at once and its launcher stops the process."""
    service = _service(state)
    try:
        before = service.get(job_id).status
        service.cancel(job_id, reason)
    finally:
        service.close()
    if before.terminal:
        stdout.print(f"{job_id} was already {before.value}")
    else:
        stdout.print(f"{job_id} cancelled (was {before.value})")


@jobs_app.command("requeue")
def requeue(job_id: Annotated[str, typer.Argument(help="job id")], state: StateOpt = None) -> None:
    """Put a failed or cancelled job back into the queue."""
    service = _service(state)
    try:
        job = service.requeue(job_id, "requeued from the command line")
    finally:
        service.close()
    stdout.print(f"{job.id} is {job.status.value}")


def _brief(job: Any) -> dict[str, Any]:
    d = job.to_dict()
    keep = ("id", "status", "config", "gpu", "gpus", "workload", "kind", "token", "pending_action", "attempts",
            "oom_kills", "reason", "queue_code", "shortfall", "measured_throughput", "version", "created_at")
    return {k: d[k] for k in keep}


# ---- controller ---------------------------------------------------------------------------------
@controller_app.command("run")
def controller_run(
    interval: Annotated[float, typer.Option("--interval", min=0.0, help="seconds between epochs (ΔT)")] = 5.0,
    once: Annotated[bool, typer.Option("--once", help="run one epoch and exit (errors exit non-zero)")] = False,
    cluster: Annotated[Path | None, typer.Option("--cluster", help="cluster YAML (default: the one the state last ran with)")] = None,
    state: StateOpt = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder (default profiles/)")] = None,
    max_pending: Annotated[int, typer.Option("--max-pending", min=1, help="pending jobs planned per epoch")] = 2000,
    epochs: Annotated[int | None, typer.Option("--epochs", min=1, help="stop after this many epochs")] = None,
    lease_ttl: Annotated[float, typer.Option("--lease-ttl", min=0.1, help="seconds before a silent controller's lease lapses")] = 30.0,
    as_json: Annotated[bool, typer.Option("--json", help="with --once: print the epoch report as JSON")] = False,
    start_deadline: Annotated[float | None, typer.Option(
        "--start-deadline", min=0.0, help="seconds an admitted job may take to start before its GPUs are released "
        "(default: the launch timeout, 120 s, + 3 epochs; 0: never)")] = None,
    predictor: Annotated[str, typer.Option("--predictor", help="interference predictor: auto (the registered "
                                           "elastico-iac@champion, else Table 6's pairs) | champion | table | none")] = "auto",
    champion_check: Annotated[float, typer.Option("--champion-check", min=0.0, help="seconds between asking the registry "
                                                  "for a new champion (auto/champion; 0: never)")] = 60.0,
) -> None:
    """Run Algorithm 1 every ΔT against the state: admit, switch, migrate, hold (with reasons), record prices."""
    from elastico_core.cli.plan import PredictorChoice, choose_predictor, watch_champion
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import parse_cluster
    from elastico_core.state import StateStore
    from elastico_core.state.clusters import stored_cluster
    from elastico_core.state.controller import Controller, ControllerConfig

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        choice = PredictorChoice(predictor.strip().lower())
    except ValueError:
        raise SpecError(f"unknown value {predictor!r} (known: {', '.join(c.value for c in PredictorChoice)})",
                        field="--predictor") from None
    slowdown, message = choose_predictor(choice)
    logging.getLogger("elastico.controller").info("%s", message)
    watch = None if once else watch_champion(choice, slowdown, message, champion_check)
    store = StateStore.open(state)
    try:
        if cluster is not None:
            text = read_text_file(cluster)
            c = parse_cluster(text, str(cluster))
        else:
            found = stored_cluster(store)
            if found is None:
                raise SpecError("no cluster recorded in the state yet: pass --cluster CLUSTER.yaml", field="cluster")
            c, text = found
        config = ControllerConfig(interval_s=interval, max_pending=max_pending, lease_ttl_s=lease_ttl,
                                  start_deadline_s=start_deadline)
        controller = Controller(
            store, c, ProfileStore.open(profiles or default_profiles()), config=config, hook=_fault_hook(), cluster_yaml=text,
            predictor=slowdown, predictor_source=None if watch is None else watch.current,  # type: ignore[attr-defined]
        )
        logging.getLogger("elastico.controller").info("controller %s on %s, cluster %r (%d GPUs)",
                                                      controller.holder, store.url, c.name, len(c.gpus))
        if once:
            try:
                report = controller.run_epoch()
            finally:
                controller.close()
            if as_json:
                print_json({"recorded": report.recorded, "epoch": report.epoch, "skipped": report.skipped,
                            "planned": report.planned, "pending_total": report.pending_total, "placed": report.placed,
                            "queued": report.queued, "counts": dict(report.counts), "fed": report.fed,
                            "timings_ms": dict(report.timings_ms)})
            else:
                stdout.print(report.summary())
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        controller.run(stop=stop, max_epochs=epochs)
    finally:
        store.close()


def _fault_hook() -> Any:
    """Test-only: ``ELASTICO_CONTROLLER_FAULT=<stage>`` kills the controller (SIGKILL) when it reaches that stage."""
    stage = os.environ.get(ENV_FAULT, "").strip()
    if not stage:
        return None
    from elastico_core.state.recorder import Stage

    try:
        wanted = Stage(stage)
    except ValueError:
        raise SpecError(f"unknown stage {stage!r} (known: {', '.join(s.value for s in Stage)})", field=ENV_FAULT) from None

    def hook(at: Stage) -> None:
        if at is wanted:
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


# ---- state --------------------------------------------------------------------------------------
@state_app.command("upgrade")
def state_upgrade(state: StateOpt = None) -> None:
    """Create or migrate the state database to this version's schema (safe to run concurrently)."""
    from elastico_core.state import redacted, upgrade_state
    from elastico_core.state.url import normalize_state_url

    rev = upgrade_state(state)
    stdout.print(f"state {redacted(normalize_state_url(state))} is at schema revision {rev}")


@state_app.command("current")
def state_current(state: StateOpt = None) -> None:
    """Print the schema revision of the state database and the one this version needs."""
    from elastico_core.state import migrate
    from elastico_core.state.db import make_engine
    from elastico_core.state.url import normalize_state_url

    engine = make_engine(normalize_state_url(state))
    try:
        stdout.print(f"at {migrate.current(engine) or 'nothing (not initialised)'}; this version needs {migrate.head()}")
    finally:
        engine.dispose()


# ---- bench --------------------------------------------------------------------------------------
def bench_state_command(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="queued jobs to register")] = 10_000,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs in the cluster")] = 4096,
    per_job: Annotated[int, typer.Option("--per-job", min=0, help="of those, registered one call each (the rest in bulk)")] = 1000,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="controller epochs to time")] = 3,
    max_pending: Annotated[int, typer.Option("--max-pending", min=1, help="the controller's planning window")] = 2000,
    state: Annotated[str | None, typer.Option("--state", help="state URL (default: a fresh SQLite file in a temp dir)")] = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder")] = None,
    seed: Annotated[int, typer.Option("--seed", help="instance seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (the default output)")] = True,
) -> None:
    """Registration latency, controller epoch latency and memory for a large queue (prints one JSON object)."""
    from elastico_core.state.bench import bench_state

    print_json(bench_state(jobs=jobs, gpus=gpus, per_job=per_job, epochs=epochs, max_pending=max_pending, url=state,
                           profiles=profiles or default_profiles(), seed=seed))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add the jobs/controller/state groups to the main app and ``state`` to the bench group."""
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(controller_app, name="controller")
    app.add_typer(state_app, name="state")
    bench.command("state")(bench_state_command)
