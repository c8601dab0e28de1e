"""Each job as an MLflow run, kept up to date from the planner state: started when the job starts, its
throughput a time series, its plan and every switch as events, and a link back to its Airflow task.

The mirror reads only the state (``JobService``) and writes only MLflow, so it runs wherever the state can
be read — beside the controller (``elastico controller run`` starts it when an MLflow tracking URI is set),
or once from a DAG's last task (``sync_jobs``), which also fills in a run the controller's mirror missed.
It is idempotent: a job's run is found by its ``elastico.job_id`` tag (created if missing), and a run
remembers the last measurement and decision it logged (tags ``elastico.sync.*``), so a restart neither
duplicates points nor loses them.

What a run holds:

* start time = the job's start, end time and status = the job's end (``FINISHED``/``FAILED``/``KILLED``);
* params: workload, kind, floor, weight, the knob space it allows, the first plan's knobs and GPUs;
* metrics, by wall-clock time and step: ``throughput`` (each launcher report, the workload's unit/s),
  ``predicted_throughput`` (what the plan predicted beside its partner), ``progress`` (0..1) and
  ``steps``, ``plan_changes`` (a step up at each switch or migration);
* events: ``elastico/events.json`` (every admit, switch, migrate, preempt with its epoch, time, knobs, GPUs
  and reason) and the tag ``elastico.plan`` (the plan now);
* links: tags ``airflow.dag_id``/``run_id``/``task_id``/``map_index``, and a run description
  (``mlflow.note.content``) linking the Airflow task instance and the job on the status page.

This is the ``state`` layer's one MLflow door (``tracking.py``), imported only where MLflow is installed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elastico_core.state import DecisionView, JobService, JobView, MeasurementView

log = logging.getLogger("elastico.tracking")

JOB_TAG = "elastico.job_id"
SYNC_MEASUREMENT = "elastico.sync.measurement"
SYNC_DECISION = "elastico.sync.decision"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
WORKFLOW_QUERY = "workflowType=machine_learning"
EVENT_KINDS = ("admit", "switch", "migrate", "preempt", "narrow", "fail")
PLAN_CHANGES = ("switch", "migrate")
END_STATUS = {"finished": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}


def experiment_name(job: JobView) -> str:
    """``elastico/<dag_id>`` for an Airflow job, ``elastico/jobs`` for one submitted on the command line."""
    return f"elastico/{job.identity.dag_id}" if job.identity.dag_id else "elastico/jobs"


def run_url(ui_url: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI page of one run (on MLflow's Model training view)."""
    q = urllib.parse.quote
    return f"{ui_url.rstrip('/')}/#/experiments/{q(experiment_id)}/runs/{q(run_id)}?{WORKFLOW_QUERY}"


def airflow_task_url(airflow_url: str, job: JobView) -> str:
    """The Airflow UI page of the task instance that runs ``job`` ('' for a job without one)."""
    ident = job.identity
    if not (airflow_url and ident.dag_id and ident.run_id and ident.task_id):
        return ""
    q = urllib.parse.quote
    url = f"{airflow_url.rstrip('/')}/dags/{q(ident.dag_id)}/runs/{q(ident.run_id, safe='')}/tasks/{q(ident.task_id)}"
    return url + (f"/mapped/{ident.map_index}" if ident.map_index >= 0 else "")


def status_url(airflow_url: str, job_id: str) -> str:
    """The job on the status page (the page filtered to it)."""
    if not airflow_url:
        return ""
    return f"{airflow_url.rstrip('/')}/elastico/status?job={urllib.parse.quote(job_id)}"


def _ms(value: Any) -> int:
    return int(value.timestamp() * 1000)


def _space(job: JobView) -> dict[str, str]:
    jobs = job.spec.get("jobs") or [{}]
    knobs = jobs[0].get("knobs") if isinstance(jobs[0], Mapping) else None
    return {f"space.{k}": json.dumps(v)[:500] for k, v in sorted((knobs or {}).items())}


@dataclass
class RunMirror:
    """Mirrors jobs of a state into MLflow runs (see the module docstring). One per process; thread-safe
    enough for one follower thread (it is not shared)."""

    tracking_uri: str
    airflow_url: str = ""
    iac_tags: Mapping[str, str] = field(default_factory=dict)
    _client: Any = None
    _experiments: dict[str, str] = field(default_factory=dict)
    _runs: dict[str, tuple[str, str]] = field(default_factory=dict)  # job id -> (run id, experiment id)
    _synced: dict[str, tuple[int, int]] = field(default_factory=dict)  # job id -> (measurement id, decision id)
    _ended: set[str] = field(default_factory=set)

    @property
    def client(self) -> Any:
        if self._client is None:
            import mlflow

            self._client = mlflow.MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
        return self._client

    def experiment(self, name: str) -> str:
        """The experiment's id, created if missing, tagged so MLflow's UI treats it as model training."""
        if name in self._experiments:
            return self._experiments[name]
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                experiment_id = str(self.client.create_experiment(
                    name, artifact_location=artifact_location(self.tracking_uri), tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING}))
            except Exception:  # created meanwhile by another mirror (a DAG's last task): use that one
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
                experiment_id = str(exp.experiment_id)
        else:
            experiment_id = str(exp.experiment_id)
            if exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
                self.client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        self._experiments[name] = experiment_id
        return experiment_id

    def run_of(self, job: JobView) -> tuple[str, str] | None:
        """(run id, experiment id) of the job's run, found by its tag; None if it has none yet."""
        if job.id in self._runs:
            return self._runs[job.id]
        experiment_id = self.experiment(experiment_name(job))
        found = self.client.search_runs([experiment_id], filter_string=f"tags.`{JOB_TAG}` = '{_quote(job.id)}'",
                                        order_by=["attributes.start_time ASC"], max_results=1)
        if not found:
            return None
        run = found[0]
        self._runs[job.id] = (run.info.run_id, experiment_id)
        tags = run.data.tags
        self._synced[job.id] = (int(tags.get(SYNC_MEASUREMENT, 0) or 0), int(tags.get(SYNC_DECISION, 0) or 0))
        if run.info.status in END_STATUS.values():
            self._ended.add(job.id)
        return self._runs[job.id]

    def _create(self, job: JobView, decisions: Sequence[DecisionView]) -> tuple[str, str]:
        experiment_id = self.experiment(experiment_name(job))
        started = job.started_at or next((d.at for d in reversed(decisions) if d.kind.value == "admit"), None)
        ident = job.identity
        tags = {JOB_TAG: job.id, "elastico.queue": job.queue, **self.iac_tags}
        if job.user:
            tags["elastico.user"] = job.user
        if ident.dag_id:
            tags.update({"airflow.dag_id": ident.dag_id, "airflow.run_id": ident.run_id, "airflow.task_id": ident.task_id,
                         "airflow.map_index": str(ident.map_index)})
        note = [f"ElastiCo job `{job.id}` ({job.kind}: {job.workload})."]
        if (task := airflow_task_url(self.airflow_url, job)):
            note.append(f"Airflow task instance: [{ident.dag_id} / {ident.task_id}]({task})")
        if (page := status_url(self.airflow_url, job.id)):
            note.append(f"Scheduling status: [{job.id}]({page})")
        tags["mlflow.note.content"] = "\n\n".join(note)
        run = self.client.create_run(experiment_id, start_time=_ms(started) if started else None, tags=tags,
                                     run_name=job.id)
        run_id = run.info.run_id
        params = {"workload": job.workload, "kind": job.kind, "queue": job.queue, **_space(job)}
        spec = (job.spec.get("jobs") or [{}])[0]
        for key in ("floor", "weight", "work", "gpus", "priority"):
            if isinstance(spec, Mapping) and spec.get(key) is not None:
                params[key] = str(spec[key])
        from mlflow.entities import Param

        self.client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        self._runs[job.id] = (run_id, experiment_id)
        self._synced[job.id] = (0, 0)
        return run_id, experiment_id

    def sync(self, job: JobView, measurements: Sequence[MeasurementView], decisions: Sequence[DecisionView]) -> str:
        """Bring one job's run up to date (creating it once the job has started); returns its run id.

        ``measurements`` and ``decisions``: the job's, any order (only those not logged yet are sent).
        """
        from mlflow.entities import Metric, Param, RunTag

        found = self.run_of(job) or self._create(job, decisions)
        run_id = found[0]
        if job.id in self._ended and not job.status.terminal:  # a failed try requeued and started again
            self.client.update_run(run_id, status="RUNNING")
            self._ended.discard(job.id)
        last_m, last_d = self._synced.get(job.id, (0, 0))
        metrics: list[Metric] = []
        tags: list[RunTag] = []
        params: list[Param] = []
        new_m = sorted((m for m in measurements if m.id > last_m and m.throughput), key=lambda m: m.id)
        for i, m in enumerate(new_m):
            at = _ms(m.at)
            step = last_m + i + 1
            metrics.append(Metric("throughput", float(m.throughput or 0.0), at, step))
            if m.predicted_throughput:
                predicted = float(m.predicted_throughput) / float(m.predicted_slowdown or 1.0)
                metrics.append(Metric("predicted_throughput", predicted, at, step))
        if job.progress is not None:
            p = job.progress
            eta = p.eta(job.work, p.at)
            step = p.steps
            metrics.append(Metric("steps", float(p.steps), _ms(p.at), step))
            if eta.fraction is not None:
                metrics.append(Metric("progress", float(eta.fraction), _ms(p.at), step))
        new_d = sorted((d for d in decisions if d.id > last_d and d.kind.value in EVENT_KINDS), key=lambda d: d.id)
        if new_d:
            changes = sum(1 for d in decisions if d.kind.value in PLAN_CHANGES)
            metrics.append(Metric("plan_changes", float(changes), _ms(new_d[-1].at), len(decisions)))
            if last_d == 0:
                first = next((d for d in new_d if d.kind.value == "admit" and d.to_knobs is not None), None)
                if first is not None:
                    params += [Param(f"plan.{k}", str(v)) for k, v in first.to_knobs.items]  # type: ignore[union-attr]
                    params.append(Param("plan.gpus", ",".join(first.to_gpus) or "-"))
            self._log_events(run_id, decisions)
        if job.plan is not None:
            tags.append(RunTag("elastico.plan", f"{job.plan.knobs.short()} on {','.join(job.plan.gpus)}"))
        top_m = max([last_m, *(m.id for m in new_m)])
        top_d = max([last_d, *(d.id for d in new_d)])
        tags += [RunTag(SYNC_MEASUREMENT, str(top_m)), RunTag(SYNC_DECISION, str(top_d))]
        if job.measured_throughput:
            tags.append(RunTag("elastico.measured_throughput", f"{job.measured_throughput:.6g}"))
        self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        self._synced[job.id] = (top_m, top_d)
        if job.status.terminal and job.id not in self._ended:
            end = job.finished_at or job.updated_at
            self.client.set_terminated(run_id, status=END_STATUS.get(job.status.value, "FINISHED"), end_time=_ms(end))
            self._ended.add(job.id)
        return run_id

    def _log_events(self, run_id: str, decisions: Sequence[DecisionView]) -> None:
        """The job's plan and every change of it, oldest first, as one JSON artifact (rewritten when it grows)."""
        events = [
            {"epoch": d.epoch, "at": d.at.isoformat(), "kind": d.kind.value,
             "from": d.from_knobs.short() if d.from_knobs else None, "to": d.to_knobs.short() if d.to_knobs else None,
             "from_gpus": list(d.from_gpus), "to_gpus": list(d.to_gpus), "reason": d.reason}
            for d in sorted(decisions, key=lambda d: d.id) if d.kind.value in EVENT_KINDS
        ]
        self.client.log_dict(run_id, {"events": events}, "elastico/events.json")


def artifact_location(tracking_uri: str) -> str | None:
    """Beside a SQLite store (``mlartifacts/``, as the project's embedded default); the server's otherwise."""
    if tracking_uri.startswith("sqlite:///"):
        from pathlib import Path

        return (Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts").absolute().as_uri()
    return None


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def iac_tags(tracking_uri: str) -> dict[str, str]:
    """Which interference model planned the jobs: the registered ``elastico-iac@champion``, or none."""
    try:
        import mlflow

        mv = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri).get_model_version_by_alias(
            "elastico-iac", "champion")
    except Exception:  # no model registered (or no registry): the planner used Table 6's pairs
        return {"elastico.iac.model": "table6 (no registered model)"}
    return {"elastico.iac.model": "elastico-iac", "elastico.iac.version": str(mv.version), "elastico.iac.alias": "champion",
            "elastico.iac.run_id": str(mv.run_id or "")}


def sync_jobs(svc: JobService, mirror: RunMirror, job_ids: Iterable[str]) -> dict[str, str]:
    """Bring the runs of ``job_ids`` up to date (jobs that never started get none); job id -> run id."""
    out = {}
    for job in svc.get_many(job_ids).values():
        if job.started_at is None:
            continue
        out[job.id] = mirror.sync(job, svc.measurements(job_id=job.id, limit=10_000), svc.decisions(job_id=job.id, limit=1000))
    return out


class Follower:
    """Keeps the runs of started jobs up to date every ``interval_s`` (a daemon thread beside the controller).

    Each round reads the jobs that run now and those that ended since the last round; MLflow being down
    costs a logged warning per round, never the controller's planning.
    """

    def __init__(self, svc: JobService, mirror: RunMirror, interval_s: float = 5.0) -> None:
        self.svc, self.mirror, self.interval_s = svc, mirror, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="elastico-mlflow", daemon=True)
        self._seen_ended: set[str] = set()

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def round(self) -> int:
        """One pass; returns how many runs it touched."""
        from elastico_core.state import JobStatus

        live = self.svc.list_jobs([JobStatus.RUNNING, JobStatus.SWITCHING, JobStatus.ADMITTED])
        ended = [j for j in self.svc.ended_jobs(limit=200) if j.id not in self._seen_ended]
        touched = 0
        for job in [*live, *ended]:
            if job.started_at is None:
                continue
            self.mirror.sync(job, self.svc.measurements(job_id=job.id, limit=10_000),
                             self.svc.decisions(job_id=job.id, limit=1000))
            touched += 1
        self._seen_ended.update(j.id for j in ended)
        return touched

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.round()
            except Exception as exc:  # MLflow or the state away for a moment: say so, try again next round
                log.warning("MLflow runs not updated this round: %s: %s", type(exc).__name__, str(exc)[:300])
            self._stop.wait(max(0.5, self.interval_s - (time.monotonic() - t0)))
