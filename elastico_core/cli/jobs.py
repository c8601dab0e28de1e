"""``elastico jobs``, ``elastico controller``, ``elastico state`` and ``elastico bench state``: the planner state.

Every command takes ``--state URL``; without it ``$ELASTICO_STATE_URL``, then the project's setting
(``[tool.elastico] state`` in pyproject.toml), then ``.elastico/state.db`` (``cli.project``). A command
that only reads opens an existing ElastiCo state read-only or fails in one line (``cli.stateopen``).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from elastico_core.cli.common import default_profiles, print_json, stdout
from elastico_core.cli.stateopen import open_reader, open_write_store, open_writer
from elastico_core.model.errors import SpecError
from elastico_core.specs.files import read_text_file
from elastico_core.state.url import ENV_STATE_URL

ENV_FAULT = "ELASTICO_CONTROLLER_FAULT"  # test hook: planned | recording | recorded -> SIGKILL at that stage
MIN_INTERVAL_S = 0.1  # ΔT below this is a busy loop (an idle epoch takes a few ms)

jobs_app = typer.Typer(help="Jobs in the planner state: submit, list, show, cancel, requeue.", no_args_is_help=True)
controller_app = typer.Typer(help="The controller: one planning epoch every ΔT.", no_args_is_help=True)
state_app = typer.Typer(help="The planner state database: where it is, its schema (migrations).", no_args_is_help=True)

StateOpt = Annotated[
    str | None,
    typer.Option("--state", help=f"state database URL or SQLite file (default: ${ENV_STATE_URL}, else [tool.elastico] "
                 "state in the nearest pyproject.toml, else .elastico/state.db)"),
]


# ---- jobs ---------------------------------------------------------------------------------------
SUBMIT_LINES = 50


@jobs_app.command("submit")
def submit(
    spec: Annotated[Path, typer.Option("--spec", help="job YAML (the format of examples/jobs.yaml)")],
    state: StateOpt = None,
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help="refuse jobs that can never run on this cluster (default: the one the controller runs)")] = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder (default profiles/)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the registered jobs as JSON")] = False,
) -> None:
    """Register every job of a job file (all or none); resubmitting the same file changes nothing.

    A job that can never run on the cluster (no configuration fits a GPU's memory, a node's host memory or
    CPU cores, or reaches its floor) refuses the whole file, naming the resource and the largest figure.
    Creates the state if there is none yet (and says so); refuses a file that is not an ElastiCo state."""
    from elastico_core.cli.jobview import brief
    from elastico_core.state.specs import split_document

    docs = split_document(read_text_file(spec), str(spec))  # a bad file is refused before any state is opened
    _probe_writable(state)  # so is a file that is not a state (before a word about the cluster)
    _check_admissible([d.spec for d in docs], state, cluster, profiles, str(spec))
    service, found = open_writer(state, create=True)
    try:
        results = service.submit_parsed(docs)
    finally:
        service.close()
    if as_json:
        print_json([{**brief(r.job), "created": r.created} for r in results])
        return
    new = sum(r.created for r in results)
    for r in results[:SUBMIT_LINES]:  # a bulk file prints a summary, not one line per job
        stdout.print(f"{'registered' if r.created else 'unchanged '} {r.job.id} ({r.job.status.value})", highlight=False)
    if len(results) > SUBMIT_LINES:
        stdout.print(f"... and {len(results) - SUBMIT_LINES} more (--json lists them all)")
    stdout.print(f"{new} new, {len(results) - new} already registered in {found.where}", highlight=False)


def _check_admissible(specs: list[Any], state: str | None, cluster: Path | None, profiles: Path | None,
                      where: str) -> None:
    """Refuse jobs that can never run on ``cluster`` (else the cluster the state's controller runs with)."""
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import parse_cluster
    from elastico_core.specs.admission import check_admissible

    if cluster is not None:
        c = parse_cluster(read_text_file(cluster), str(cluster))
    else:
        c = _recorded_cluster(state)
        if c is None:
            print("note: no cluster recorded in the state yet (the controller has not run): jobs are not checked "
                  "against one (--cluster FILE checks them)", file=sys.stderr)
            return
    check_admissible(specs, c, ProfileStore.open(profiles or default_profiles()), where)


def _recorded_cluster(state: str | None) -> Any:
    """The cluster the controller last ran with, read without writing; None if there is no state or none yet."""
    from elastico_core.cli.stateopen import open_read_store
    from elastico_core.state.clusters import stored_cluster
    from elastico_core.state.probe import NoState

    try:
        store, _ = open_read_store(state)
    except NoState:
        return None
    try:
        found = stored_cluster(store)
    finally:
        store.close()
    return found[0] if found is not None else None


@jobs_app.command("list")
def list_command(
    state: StateOpt = None,
    status: Annotated[list[str] | None, typer.Option("--status", help="only this status (repeatable)")] = None,
    user: Annotated[str | None, typer.Option("--user", help="only jobs of this user (the spec's user)")] = None,
    dag: Annotated[str | None, typer.Option("--dag", help="only jobs of this Airflow DAG")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="only jobs of this queue (the spec's queue)")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="at most this many live jobs and this many ended jobs")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="every job, however many (slow with a long history)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="a JSON list of objects (id, status, config, gpu, progress, ...)")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="each job's whole reason and what would admit it (as jobs show)")] = False,
) -> None:
    """Live jobs (registration order), then the newest ended; running jobs with progress and ETA.

    Filters combine: --user, --dag, --queue and --status select the jobs listed."""
    from elastico_core.cli.jobview import brief, narrow_lines, rows
    from elastico_core.state import JobFilter, JobStatus
    from elastico_core.state.service import ENDED_PAGE, LIVE_PAGE

    try:
        statuses = [JobStatus(s) for s in status] if status else list(JobStatus)
    except ValueError:
        raise SpecError(f"unknown status in {status} (known: {', '.join(s.value for s in JobStatus)})", field="status") from None
    where = JobFilter(user=(user or "").strip(), dag=(dag or "").strip(), queue=(queue or "").strip())
    live = [s for s in statuses if not s.terminal]
    ended = [s for s in statuses if s.terminal]
    service, found = open_reader(state)
    try:
        jobs = service.list_jobs(live, limit=None if show_all else limit or LIVE_PAGE, where=where) if live else ()
        if ended:
            jobs += service.ended_jobs(ended, limit=2**62 if show_all else limit or ENDED_PAGE, where=where)
        counts = service.counts(where)
        positions = _positions(service) if any(j.status is JobStatus.PENDING for j in jobs) else {}
    finally:
        service.close()
    left = sum(counts.get(s, 0) for s in statuses) - len(jobs)
    if left > 0:  # say what was left out, on stderr so that --json stays one document
        print(f"note: {left} more jobs not shown (--limit N or --all)", file=sys.stderr)
    if as_json:
        print_json([brief(j) for j in jobs])
        return
    items = rows(jobs, positions, wide)
    chosen = ", ".join(f"{k} {v}" for k, v in (("user", where.user), ("DAG", where.dag), ("queue", where.queue)) if v)
    title = f"{len(jobs)} jobs{' of ' + chosen if chosen else ''} in {found.where}"
    if not wide and stdout.width < 110:
        hint = " (in full: jobs show ID, --wide)"
        stdout.print(escape(title) + (f"[dim]{escape(hint)}[/dim]" if len(title + hint) <= stdout.width else ""),
                     highlight=False, overflow="fold")
        for i, line in enumerate(narrow_lines(items, stdout.width)):
            text = escape(line)
            stdout.print(f"[bold]{text}[/bold]" if i == 0 else f"[dim]{text}[/dim]" if line.startswith("  ") else text,
                         overflow="fold", highlight=False)
        return
    t = Table(title=title, title_justify="left", caption=None if wide else
              "why in full and what would admit a job: elastico jobs show ID (or --wide)", caption_justify="left")
    teams = any(r["queue"] != "default" for r in items)  # the team queue's column once queues are in use
    cols = [("id", "id"), ("status", "status"), *([("queue", "queue")] if teams else []), ("workload", "workload"),
            ("config", "config"), ("GPU", "gpus"), ("progress", "progress"), ("why (queue position)", "why")]
    for col, _ in cols:
        t.add_column(col, overflow="fold", ratio=1 if col.startswith("why") else None)
    for r in items:
        t.add_row(*(escape(r[k]) for _, k in cols))
    stdout.print(t)


def _positions(service: Any) -> dict[str, int]:
    """Queue positions of every pending job (the controller's order), whatever the listing's filter."""
    from elastico_core.model.explain import queue_positions
    from elastico_core.state import JobStatus

    pending = service.list_jobs([JobStatus.PENDING])
    return queue_positions((j.id, j.priority, j.queued_at or j.created_at) for j in pending)


@jobs_app.command("show")
def show(
    job_id: Annotated[str, typer.Argument(help="job id")],
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole job as JSON")] = False,
) -> None:
    """One job: spec, plan (knobs, GPUs, launch env/args, token), progress, switch target, recent decisions."""
    from elastico_core.cli.jobview import summary

    service, found = open_reader(state)
    try:
        job = service.get(job_id)
        decisions = service.decisions(job_id=job_id, limit=20)
        latest = next((m for m in service.measurements(job_id=job_id, limit=5) if m.throughput), None)
        positions = _positions(service) if job.status.value == "pending" else {}
    finally:
        service.close()
    out = job.to_dict()
    out["decisions"] = [{"epoch": d.epoch, "kind": d.kind.value, "reason": d.reason, "token": d.token} for d in decisions]
    if as_json:
        print_json(out)
        return
    for line in summary(job, decisions, positions.get(job.id), found.where, latest, latest.gpu_model if latest else ""):
        stdout.print(line, highlight=False)


@jobs_app.command("cancel")
def cancel(
    job_id: Annotated[str, typer.Argument(help="job id")],
    state: StateOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="recorded with the job")] = "cancelled from the command line",
) -> None:
    """Cancel a job: its GPUs are released at once and its launcher stops the process."""
    service, _ = open_writer(state)
    try:
        before = service.get(job_id).status
        service.cancel(job_id, reason)
    finally:
        service.close()
    if before.terminal:
        stdout.print(f"{job_id} was already {before.value}", highlight=False)
    else:
        stdout.print(f"{job_id} cancelled (was {before.value})", highlight=False)


@jobs_app.command("requeue")
def requeue(job_id: Annotated[str, typer.Argument(help="job id")], state: StateOpt = None) -> None:
    """Put a failed or cancelled job back into the queue."""
    service, _ = open_writer(state)
    try:
        job = service.requeue(job_id, "requeued from the command line")
    finally:
        service.close()
    stdout.print(f"{job.id} is {job.status.value}", highlight=False)


# ---- controller ---------------------------------------------------------------------------------
@controller_app.command("run")
def controller_run(
    interval: Annotated[float, typer.Option("--interval", min=MIN_INTERVAL_S, max=86400.0,
                                            help="seconds between epochs (ΔT)")] = 5.0,
    once: Annotated[bool, typer.Option("--once", help="run one epoch and exit (errors exit non-zero)")] = False,
    cluster: Annotated[Path | None, typer.Option("--cluster", help="cluster YAML (default: the one the state last ran with)")] = None,
    state: StateOpt = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="profile store folder (default profiles/)")] = None,
    max_pending: Annotated[int, typer.Option("--max-pending", min=1, help="pending jobs planned per epoch")] = 2000,
    epochs: Annotated[int | None, typer.Option("--epochs", min=1, help="stop after this many epochs")] = None,
    lease_ttl: Annotated[float, typer.Option("--lease-ttl", min=0.1, max=86400.0,
                                             help="seconds before a silent controller's lease lapses")] = 30.0,
    as_json: Annotated[bool, typer.Option("--json", help="with --once: print the epoch report as JSON")] = False,
    start_deadline: Annotated[float | None, typer.Option(
        "--start-deadline", min=0.0, max=86400.0 * 365, help="seconds an admitted job may take to start before its GPUs are released "
        "(default: the launch timeout, 120 s, + 3 epochs; 0: never)")] = None,
    predictor: Annotated[str, typer.Option("--predictor", help="interference predictor: auto (the registered "
                                           "elastico-iac@champion, else Table 6's pairs) | champion | table | none")] = "auto",
    mlflow: Annotated[str | None, typer.Option(
        "--mlflow", envvar="MLFLOW_TRACKING_URI", show_envvar=True,
        help="keep each started job's MLflow run up to date here (throughput, plan, switches); none: no runs")] = None,
    airflow_url: Annotated[str | None, typer.Option(
        "--airflow-url", envvar="AIRFLOW__API__BASE_URL", show_envvar=True,
        help="the Airflow UI's address, for each run's link back to its task")] = None,
    champion_check: Annotated[float, typer.Option("--champion-check", min=0.0, help="seconds between asking the registry "
                                                  "for a new champion (auto/champion; 0: never)")] = 60.0,
    rules: Annotated[str, typer.Option("--rules", help="rule set: production, or a variant of pds.rules.VARIANTS "
                                       "(e.g. no-preempt: a running job is never checkpointed for waiting ones)")] = "production",
) -> None:
    """Run Algorithm 1 every ΔT against the state: admit, switch, migrate, hold (with reasons), record prices.

    Exits 0 when every epoch ran, 1 when any failed (the state unavailable, an error while planning): a
    long-running controller retries with backoff instead of exiting, from its very first connection on.
    """
    from elastico_core.cli.plan import PredictorChoice, choose_predictor, watch_champion
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import parse_cluster
    from elastico_core.state.clusters import stored_cluster
    from elastico_core.state.controller import Controller, ControllerConfig, open_with_retry

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        choice = PredictorChoice(predictor.strip().lower())
    except ValueError:
        raise SpecError(f"unknown value {predictor!r} (known: {', '.join(c.value for c in PredictorChoice)})",
                        field="--predictor") from None
    from elastico_core.pds.rules import variant

    ruleset = variant(rules.strip())  # a one-line error before anything is opened
    for value, name in ((interval, "--interval"), (lease_ttl, "--lease-ttl"), (start_deadline, "--start-deadline")):
        if value is not None and not math.isfinite(value):
            raise SpecError(f"must be a finite number of seconds, got {value!r}", field=name)
    slowdown, message = choose_predictor(choice)
    logging.getLogger("elastico.controller").info("%s", message)
    watch = None if once else watch_champion(choice, slowdown, message, champion_check)
    stop = threading.Event()
    if not once:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    opened = open_with_retry(lambda: open_write_store(state, create=True)[0], ControllerConfig(interval_s=interval),
                             stop, tries=1 if once else epochs)  # fmt: skip
    if opened.store is None:  # stopped (or out of --epochs) before the state answered
        raise typer.Exit(1)
    store = opened.store
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
            rules=ruleset,
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
        left = None if epochs is None else epochs - opened.failures
        follower = _start_runs_follower(state, mlflow, airflow_url or "", interval)
        try:
            result = controller.run(stop=stop, max_epochs=left) if left is None or left > 0 else None
        finally:
            if follower is not None:
                follower.stop()
                follower.svc.close()
    finally:
        store.close()
    if opened.failures or result is None or not result.ok:
        raise typer.Exit(1)


def _start_runs_follower(state: str | None, mlflow: str | None, airflow_url: str, interval: float) -> Any:
    """The MLflow mirror beside the controller (its own read-only state connection, its own thread)."""
    if not (mlflow or "").strip():
        return None
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:  # a planning-only install (no `ml` extra)
        logging.getLogger("elastico.controller").warning("MLflow is not installed: no job runs are kept (--mlflow)")
        return None
    from elastico_core.cli.stateopen import open_reader
    from elastico_core.state.tracking import Follower, RunMirror, iac_tags

    service, _ = open_reader(state)
    uri = mlflow.strip()  # type: ignore[union-attr]
    logging.getLogger("elastico.controller").info("MLflow runs of started jobs are kept up to date (every %.0f s)",
                                                  max(2.0, interval))
    return Follower(service, RunMirror(uri, airflow_url, iac_tags(uri)), interval_s=max(2.0, interval)).start()


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
    """Create or migrate the state database to this version's schema (safe to run concurrently).

    Refuses a file that is not an ElastiCo state (a YAML file, another application's database)."""
    from elastico_core.state import migrate
    from elastico_core.state.probe import Found

    before = _probe_writable(state)
    store, found = open_write_store(state, create=True)
    try:
        rev = migrate.current(store.engine)
    finally:
        store.close()
    done = "created" if before.found in (Found.MISSING, Found.EMPTY) else (
        "already" if before.revision == rev else f"migrated from {before.revision} to")
    stdout.print(f"state {found.where}: {done} at schema revision {rev}", highlight=False, markup=False)


def _probe_writable(state: str | None) -> Any:
    from elastico_core.cli.project import resolve_state
    from elastico_core.state.probe import writable_target

    return writable_target(resolve_state(state).url)


@state_app.command("current")
def state_current(state: StateOpt = None) -> None:
    """Print the schema revision of the state and the one this version needs (reads only; creates nothing)."""
    from elastico_core.cli.project import resolve_state
    from elastico_core.state import migrate
    from elastico_core.state.probe import require_state

    found = require_state(resolve_state(state).url)
    stdout.print(f"state {found.where}: at {found.revision or 'no revision'}; this version needs {migrate.head()}",
                 highlight=False, markup=False)


@state_app.command("where")
def state_where(
    state: StateOpt = None,
    url_only: Annotated[bool, typer.Option("--url", help="print only the URL (for scripts; a password is masked)")] = False,
) -> None:
    """Which state a command without --state uses, why, and whether there is one (reads nothing else)."""
    from elastico_core.cli.project import resolve_state
    from elastico_core.state.probe import Found, probe
    from elastico_core.state.url import normalize_state_url, redacted

    setting = resolve_state(state)
    url = normalize_state_url(setting.url)
    if url.get_backend_name() == "sqlite" and url.database and not url.database.startswith("file:"):
        url = url.set(database=str(Path(url.database).absolute()))  # the same file from any working directory
    if url_only:
        print(redacted(url))
        return
    found = probe(url)
    there = {Found.ELASTICO: f"an ElastiCo state at schema revision {found.revision}", Found.MISSING: "nothing yet",
             Found.EMPTY: "an empty database"}.get(found.found) or found.refusal() or found.found.value
    stdout.print(f"{found.where}\n  from   {setting.source}\n  holds  {there}", highlight=False, markup=False)


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
