"""``ElasticoJobOperator``: a KubernetesPodOperator whose GPU request, knobs and placement come from ElastiCo.

A DAG author declares a job — a workload, the part of its knob grid it allows, a throughput floor, a
weight, an amount of work, at most how many GPUs — instead of a fixed GPU request. The operator:

1. checks the DAG-supplied inputs (pod overrides and entrypoint arguments against their allow-lists);
2. registers the job with the planner state, idempotently per dag_id/run_id/task_id/map_index (a retry
   finds the job its earlier try registered);
3. defers on ``ElasticoAdmissionTrigger`` until the controller admits it (no worker slot while queued);
4. launches the admitted plan — a pod built by KPO (``launcher="kubernetes"``) or a local process
   (``launcher="local"``) with the same env and args — and watches the state while it runs: a switch or
   migration is honoured by checkpoint -> relaunch with the target plan -> resume; a cancel stops it;
5. reports the outcome: finished (GPUs released, measured throughput fed back), OOM (re-planned at lower
   memory: the task defers again), or failed.

Every KPO feature stays: pod templates, reattach on retry (``reattach_on_restart``), log streaming, the
XCom sidecar and cleanup all run inside ``execute_sync`` for each launch. The pod is KPO's own
``build_pod_request_obj`` patched with the launch's plan (``podplan.PodPlan``, held for that launch only).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.exceptions import AirflowException
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk.exceptions import AirflowFailException
from kubernetes.client import models as k8s

from elastico_airflow.allowlist import DEFAULT_POLICY, PodOverrideError, PodOverrides, check_pod_overrides
from elastico_airflow.hooks import ElasticoHook
from elastico_airflow.launchspec import (
    EntryArgsError,
    LaunchSpec,
    check_entry_args,
    launch_spec,
    local_paths,
    local_run_dir,
    pod_paths,
)
from elastico_airflow.local import LocalProcess
from elastico_airflow.pod_resources import PlacementError
from elastico_airflow.podplan import PodPlan, patch_pod, pod_plan
from elastico_airflow.podspec import control_command
from elastico_airflow.settings import ElasticoSettings, Launcher, SettingsError, has_password
from elastico_airflow.supervise import (
    Action,
    Outcome,
    Summary,
    failure_reason,
    outcome,
    read_events,
    summarize,
    watch_action,
)
from elastico_airflow.triggers import ElasticoAdmissionTrigger
from elastico_core.state.values import JobStatus

if TYPE_CHECKING:
    from elastico_core.state import JobService, JobView, PlanView


@dataclass(frozen=True, slots=True)
class Segment:
    """How one launch (one plan token) ended."""

    token: str
    outcome: Outcome
    summary: Summary
    requested: Action  # what the operator had asked of it (CONTINUE: nothing)
    exit_code: int | None
    reason: str = ""


def _job_summary(job: JobView, segment: Segment | None = None, svc: JobService | None = None) -> dict[str, Any]:
    """The task's return value (XCom): small, and free of URLs and secrets. With ``svc``, on a cluster with
    queues, its queue's state after the last epoch and how often the job was reclaimed (MLflow tags)."""
    plan = job.plan
    out: dict[str, Any] = {
        "job_id": job.id,
        "status": job.status.value,
        "queue": job.queue,
        "workload": job.workload,
        "kind": job.kind,
        "knobs": plan.knobs.as_dict() if plan else None,
        "gpus": list(plan.gpus) if plan else [],
        "partners": list(plan.partners) if plan else [],
        "memory_mib": plan.memory_mib if plan else None,
        "predicted_throughput": plan.throughput if plan else None,
        "predicted_slowdown": plan.predicted_slowdown if plan else None,
        "measured_throughput": job.measured_throughput,
        "attempts": job.attempts,
        "reason": job.reason,
    }
    if segment is not None:
        out["steps"] = segment.summary.steps
        out["samples"] = segment.summary.samples
        out["launches"] = segment.summary.starts
    if svc is not None:
        state = {q.name: q for q in svc.queues()}.get(job.queue)
        if state is not None:
            out["queue_state"] = {"nominal_gpus": state.nominal_gpus, "used_gpus": round(state.used_gpus, 3),
                                  "borrowed_gpus": round(state.borrowed_gpus, 3), "lent_gpus": round(state.lent_gpus, 3)}
            out["reclaims"] = sum(d.code == "reclaimed" for d in svc.decisions(job_id=job.id, limit=1000))
    return out


class ElasticoJobOperator(KubernetesPodOperator):
    """Run one ElastiCo job: registered, admitted by the controller, launched with the planned knobs and GPU.

    :param workload: a Table-2 workload (``resnet50``, ``bert``, ..., ``qwen-1.7b``, ``llama-3-7b``). (templated)
    :param knobs: the knob space the job allows: knob name -> allowed values (a subset of the workload's
        grid), e.g. ``{"micro_batch": [32, 64], "amp": [true]}``; omitted knobs keep the whole grid. (templated)
    :param floor: the throughput floor L_j (samples/s or tokens/s, whole job). (templated)
    :param weight: the job's weight w_j in the planner's objective. (templated)
    :param work: the amount of work (workload unit x seconds); None: unbounded. (templated)
    :param gpus: at most this many GPUs (data-parallel degree cap). (templated)
    :param priority: queue priority (higher first). (templated)
    :param elastico_queue: the ElastiCo queue the job is charged to (a team's quota, ``docs/queues.md``); not
        Airflow's ``queue`` (executor queue) nor ``pool``. None or '': the connection's extra ``queue``, else
        ``default``. (templated)
    :param entry_args: entrypoint arguments, allow-listed per kind (training: ``--steps``, ``--max-seconds``,
        ``--seed``; inference: ``--input``, ``--output``, ``--max-tokens``, ...). (templated)
    :param pod_overrides: allow-listed pod changes from a DAG param (``allowlist``). (templated)
    :param launcher: ``"kubernetes"`` or ``"local"``; None: the connection's (default ``local``). (templated)
    :param arrive_after_s: wait this long (deferred, no slot held) before registering: a trace's arrival
        time in a replayed workload; retries register at once. (templated)
    :param queue_timeout_s: fail the task (and cancel the job) if it is still queued after this long; None:
        wait as long as it takes.
    :param admission_grace_s: after registering, wait this long in the worker for the controller's next
        epoch before deferring (a deferral and its resume cost two task starts; most jobs are admitted or
        held within one epoch).
    :param elastico_conn_id: the connection locating the planner state.
    :param poll_interval: seconds between state reads while queued (in the triggerer).
    :param watch_interval: seconds between state reads while the job runs (switch and cancel requests).
    :param report_interval: seconds between throughput reports while the job runs.
    :param switch_grace_s: how long a process may take to checkpoint after a switch request before SIGTERM.
    :param max_relaunches: relaunches of one plan that stopped without being asked, before the job fails.

    Every other argument is a ``KubernetesPodOperator`` argument (pod templates, volumes, secrets, ...).
    ``image`` and ``namespace`` default to the connection's; ``cmds``/``arguments`` are ElastiCo's.
    """

    template_fields: Sequence[str] = (
        *KubernetesPodOperator.template_fields,
        "workload",
        "knobs",
        "floor",
        "weight",
        "work",
        "gpus",
        "priority",
        "elastico_queue",
        "entry_args",
        "pod_overrides",
        "launcher",
        "arrive_after_s",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **KubernetesPodOperator.template_fields_renderers,
        "knobs": "json",
        "pod_overrides": "json",
    }
    ui_color = "#e4f0e8"
    _pod_plan: PodPlan | None = None  # the plan of the pod KPO builds, set only while a launch runs

    def __init__(
        self,
        *,
        workload: str,
        knobs: Mapping[str, Any] | None = None,
        floor: float = 0.0,
        weight: float = 1.0,
        work: float | None = None,
        gpus: int = 1,
        priority: int = 0,
        elastico_queue: str | None = None,
        entry_args: Sequence[str] = (),
        pod_overrides: Mapping[str, Any] | None = None,
        launcher: str | None = None,
        arrive_after_s: float = 0.0,
        queue_timeout_s: float | None = None,
        admission_grace_s: float = 6.0,
        elastico_conn_id: str = ElasticoHook.default_conn_name,
        poll_interval: float = 2.0,
        watch_interval: float = 1.0,
        report_interval: float = 15.0,
        switch_grace_s: float = 120.0,
        max_relaunches: int = 3,
        **kwargs: Any,
    ) -> None:
        kwargs["deferrable"] = False  # the operator defers for admission itself; KPO's own async mode is off
        kwargs.setdefault("do_xcom_push", True)  # the job summary is the task's XCom (and the pod's sidecar)
        super().__init__(**kwargs)
        self.workload = workload
        self.knobs = knobs
        self.floor = floor
        self.weight = weight
        self.work = work
        self.gpus = gpus
        self.priority = priority
        self.elastico_queue = elastico_queue
        self.entry_args = entry_args
        self.pod_overrides = pod_overrides
        self.launcher = launcher
        self.arrive_after_s = arrive_after_s
        self.queue_timeout_s = queue_timeout_s
        self.admission_grace_s = admission_grace_s
        self.elastico_conn_id = elastico_conn_id
        self.poll_interval = poll_interval
        self.watch_interval = watch_interval
        self.report_interval = report_interval
        self.switch_grace_s = switch_grace_s
        self.max_relaunches = max_relaunches

    # ---- inputs -------------------------------------------------------------------------------
    def job_document(self, default_queue: str = "") -> dict[str, Any]:
        """The job in the job-YAML format the state validates (the same as ``elastico jobs submit``);
        ``default_queue``: the connection's, for a task that names no queue."""
        doc: dict[str, Any] = {
            "workload": self.workload,
            "floor": self.floor,
            "weight": self.weight,
            "gpus": self.gpus,
            "priority": self.priority,
        }
        queue = str(self.elastico_queue or "").strip() or default_queue
        if queue:
            doc["queue"] = queue
        if self.work is not None:
            doc["work"] = self.work
        if self.knobs:
            doc["knobs"] = dict(self.knobs)
        return doc

    def job_kind(self) -> str:
        from elastico_core.rst.catalog import PAPER_WORKLOADS

        wl = PAPER_WORKLOADS.get(str(self.workload).strip().lower())
        if wl is None:
            known = ", ".join(sorted(PAPER_WORKLOADS))
            raise AirflowFailException(f"task {self.task_id}: unknown workload {self.workload!r} (known: {known})")
        return wl.kind.value

    def checked_inputs(self, settings: ElasticoSettings | None = None) -> tuple[str, tuple[str, ...], PodOverrides]:
        """Kind, entry args and pod overrides after the allow-lists; a clear, non-retriable error otherwise."""
        kind = self.job_kind()
        try:
            overrides = check_pod_overrides(self.pod_overrides, settings.override_policy if settings else DEFAULT_POLICY)
            args = check_entry_args(kind, [str(a) for a in (self.entry_args or ())])
        except (PodOverrideError, EntryArgsError) as exc:
            raise AirflowFailException(f"task {self.task_id}: {exc}") from None
        if self.cmds or self.arguments:
            raise AirflowFailException(f"task {self.task_id}: cmds/arguments are ElastiCo's; use entry_args")
        return kind, args, overrides

    def settings(self) -> ElasticoSettings:
        try:
            return ElasticoHook(self.elastico_conn_id).get_settings()
        except SettingsError as exc:
            raise AirflowFailException(f"connection {self.elastico_conn_id!r}: {exc}") from None

    def launcher_of(self, settings: ElasticoSettings) -> Launcher:
        """The connection's launcher; an operator (or a run's conf) may ask for a pod, never leave one."""
        if not self.launcher:
            return settings.launcher
        try:
            wanted = Launcher(str(self.launcher).strip().lower())
        except ValueError:
            raise AirflowFailException(
                f"task {self.task_id}: launcher {self.launcher!r} is not 'kubernetes' or 'local'"
            ) from None
        if wanted is Launcher.LOCAL and settings.launcher is Launcher.KUBERNETES:
            raise AirflowFailException(
                f"task {self.task_id}: launcher 'local' refused: connection {self.elastico_conn_id!r} runs jobs in "
                "pods, and a task cannot move its workload into the Airflow worker"
            )
        return wanted

    # ---- execute: register, then wait (deferred) or launch ------------------------------------------
    def execute(self, context: Any) -> Any:
        self.checked_inputs(self.settings())
        delay = float(self.arrive_after_s or 0.0)
        if delay > 0 and int(context["ti"].try_number or 1) <= 1:
            from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

            self.log.info("the job arrives in %.1f s", delay)
            self.defer(trigger=TimeDeltaTrigger(dt.timedelta(seconds=delay)), method_name="execute_arrived")
        return self.execute_arrived(context)

    def execute_arrived(self, context: Any, event: Any = None) -> Any:
        """Register the job (idempotently) and wait for admission or launch it."""
        from elastico_core.model.errors import SpecError
        from elastico_core.state import ExternalIdentity, StateConflict

        settings = self.settings()
        self.checked_inputs(settings)
        self.launcher_of(settings)
        ti = context["ti"]
        map_index = ti.map_index if ti.map_index is not None else -1
        identity = ExternalIdentity.airflow(ti.dag_id, ti.run_id, ti.task_id, int(map_index))
        svc = ElasticoHook.open_service(settings)
        try:
            try:
                result = svc.register(self.job_document(settings.default_queue), identity, try_number=ti.try_number)
            except SpecError as exc:
                raise AirflowFailException(f"task {self.task_id}: invalid job spec: {exc}") from None
            except StateConflict as exc:
                raise AirflowFailException(f"task {self.task_id}: {exc}") from None
            job = result.job
            if result.created:
                self.log.info(
                    "registered job %s (%s, floor %s) in %s",
                    job.id,
                    job.workload,
                    self.floor,
                    settings.state_url_redacted,
                )
            else:
                self.log.info(
                    "try %s reattaches to job %s (%s: %s)", ti.try_number, job.id, job.status.value, job.reason
                )
            if job.status is JobStatus.FAILED:
                job = svc.requeue(job.id, f"requeued by Airflow try {ti.try_number}")
                self.log.info("job %s failed earlier; requeued", job.id)
            job = self._await_epoch(svc, job)
            return self._dispatch(context, svc, settings, job)
        finally:
            svc.close()

    def execute_admitted(self, context: Any, event: Mapping[str, Any] | None = None, job_id: str | None = None) -> Any:
        """Resume after the trigger fired: launch the admitted plan (or end, if the job ended meanwhile)."""
        job_id = job_id or (event or {}).get("job_id")
        if not job_id:
            raise AirflowException("resumed without a job id")
        settings = self.settings()
        self.checked_inputs(settings)
        svc = ElasticoHook.open_service(settings)
        try:
            job = svc.get(job_id)
            if (event or {}).get("status") == "timeout" and job.status is JobStatus.PENDING:
                job = svc.cancel(job.id, f"still queued after {self.queue_timeout_s} s: {job.reason}")
                raise AirflowFailException(f"job {job.id} was not admitted in time: {job.reason}")
            self.log.info("job %s is %s: %s", job.id, job.status.value, job.reason)
            if job.status is JobStatus.FAILED:
                raise AirflowFailException(f"job {job.id} failed: {job.reason}")
            return self._dispatch(context, svc, settings, job)
        finally:
            svc.close()

    def _await_epoch(self, svc: JobService, job: JobView) -> JobView:
        """A pending job, re-read until the controller has looked at it once (or the grace is over)."""
        deadline = time.monotonic() + float(self.admission_grace_s or 0.0)
        while job.status is JobStatus.PENDING and job.queue_code is None and time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            job = svc.get(job.id)
        return job

    def _dispatch(self, context: Any, svc: JobService, settings: ElasticoSettings, job: JobView) -> Any:
        status = job.status
        if status is JobStatus.PENDING:
            self.log.info("job %s waits for admission: %s", job.id, job.reason)
            self.defer(
                trigger=ElasticoAdmissionTrigger(
                    job.id, self.elastico_conn_id, self.poll_interval, float(self.queue_timeout_s or 0.0)
                ),
                method_name="execute_admitted",
                kwargs={"job_id": job.id},
            )
        if status is JobStatus.FINISHED:
            self.log.info("job %s already finished (measured %s): nothing to launch", job.id, job.measured_throughput)
            return _job_summary(job, svc=svc)
        if status is JobStatus.CANCELLED:
            raise AirflowFailException(f"job {job.id} was cancelled: {job.reason}")
        if status is JobStatus.FAILED:
            raise AirflowFailException(f"job {job.id} failed: {job.reason}")
        return self._run(context, svc, settings, job)

    # ---- the launch loop ------------------------------------------------------------------------
    def _run(self, context: Any, svc: JobService, settings: ElasticoSettings, job: JobView) -> Any:
        kind, entry_args, overrides = self.checked_inputs(settings)
        launcher = self.launcher_of(settings)
        relaunches = 0
        while True:
            job = svc.get(job.id)
            plan = job.target or job.plan
            if job.status is JobStatus.PENDING or plan is None:
                return self._dispatch(context, svc, settings, job)
            if job.status.terminal:
                return self._dispatch(context, svc, settings, job)
            self._log_plan(job, plan)
            if launcher is Launcher.LOCAL:
                seg = self._run_local(svc, settings, job, plan, kind, entry_args, overrides)
            else:
                seg = self._run_pod(context, svc, settings, job, plan, kind, entry_args, overrides)
            self.log.info("launch %s ended: %s (asked: %s)", seg.token, seg.outcome.value, seg.requested.value)
            if seg.outcome is Outcome.DONE:
                finished = self._report(
                    svc.report_finished,
                    job.id,
                    seg.token,
                    self._fed(seg.summary, settings),
                    peak_mem_mib=self._gpu_peak(seg.summary),
                    measured_on=measured_on(seg.summary, settings),
                )
                self.log.info(
                    "job %s finished: measured %s (predicted %.4g) after %d steps",
                    job.id,
                    seg.summary.throughput,
                    plan.throughput,
                    seg.summary.steps,
                )
                return _job_summary(finished or svc.get(job.id), seg, svc)
            if seg.outcome is Outcome.OOM:
                self._report(svc.report_oom, job.id, seg.token, self._gpu_peak(seg.summary))
                self.log.warning(
                    "job %s ran out of memory at %s: re-planned at lower memory", job.id, plan.knobs.short()
                )
                return self._dispatch(context, svc, settings, svc.get(job.id))
            if seg.outcome is Outcome.FAILED:
                reason = seg.reason or failure_reason(seg.summary, seg.exit_code)
                self._report(svc.report_failed, job.id, seg.token, reason)
                raise AirflowException(f"job {job.id} failed: {reason}")
            # checkpointed or stopped
            if seg.requested is Action.STOP:
                latest = svc.get(job.id)
                raise AirflowFailException(f"job {job.id} was stopped: {latest.status.value}: {latest.reason}")
            if seg.requested in (Action.SWITCH, Action.REQUEUE):
                continue  # the next round runs the switch target, or defers until re-admitted
            relaunches += 1
            if relaunches > self.max_relaunches:
                reason = f"stopped {relaunches} times without being asked ({seg.outcome.value})"
                self._report(svc.report_failed, job.id, seg.token, reason)
                raise AirflowException(f"job {job.id}: {reason}")
            self.log.info(
                "job %s %s without a request: relaunching its plan (%d/%d)",
                job.id,
                seg.outcome.value,
                relaunches,
                self.max_relaunches,
            )

    def _report(self, method: Any, *args: Any, **kwargs: Any) -> JobView | None:
        from elastico_core.state import StateConflict

        try:
            return method(*args, **kwargs)  # type: ignore[no-any-return]
        except StateConflict as exc:  # the controller moved on (e.g. cancelled meanwhile): say so, carry on
            self.log.warning("state refused the report: %s", exc)
            return None

    def _fed(self, summary: Summary, settings: ElasticoSettings) -> float | None:
        """The throughput the state (and the profile store) gets: only a GPU's, unless the platform opts in
        (then it is stored under the CPU signature it was measured on: ``measured_on``)."""
        if on_gpu(summary) or settings.report_cpu_throughput:
            return summary.throughput
        if summary.throughput:
            self.log.info(
                "measured %.4g on %s: not fed back as a GPU profile (connection extra report_cpu_throughput)",
                summary.throughput,
                summary.device or "cpu",
            )
        return None

    @staticmethod
    def _gpu_peak(summary: Summary) -> float | None:
        """Peak device memory, only when measured on a GPU (a CPU run's RSS is not a GPU profile)."""
        return summary.peak_mem_mib if summary.device.startswith("cuda") and summary.peak_mem_mib else None

    def _log_plan(self, job: JobView, plan: PlanView) -> None:
        where = ",".join(plan.gpus)
        beside = f" beside {', '.join(plan.partners)}" if plan.partners else " alone"
        self.log.info(
            "plan %s for job %s: %s on %s%s, %.0f MiB, predicted %.4g (floor %.4g, slowdown %.2f, %s profile)",
            plan.token,
            job.id,
            plan.knobs.short(),
            where,
            beside,
            plan.memory_mib,
            plan.throughput,
            plan.floor,
            plan.predicted_slowdown,
            plan.source,
        )

    def _spec(
        self,
        settings: ElasticoSettings,
        job: JobView,
        plan: PlanView,
        kind: str,
        entry_args: tuple[str, ...],
        overrides: PodOverrides,
        *,
        pod: bool,
    ) -> LaunchSpec:
        paths = pod_paths(job.id) if pod else local_paths(settings.workdir, job.id)
        url = None if has_password(settings.state_url) else settings.state_url
        return launch_spec(
            job.id,
            kind,
            plan.token,
            plan.launch.env_dict(),
            plan.launch.args,
            paths,
            entry_args=entry_args,
            workload_env=dict(settings.workload_env),
            user_env=dict(overrides.env),
            state_url=None if pod else url,
        )

    # ---- local launcher ---------------------------------------------------------------------------
    def _run_local(
        self,
        svc: JobService,
        settings: ElasticoSettings,
        job: JobView,
        plan: PlanView,
        kind: str,
        entry_args: tuple[str, ...],
        overrides: PodOverrides,
    ) -> Segment:
        from elastico_core.state import StateConflict

        run_dir = local_run_dir(settings.workdir, job.id)
        spec = self._spec(settings, job, plan, kind, entry_args, overrides, pod=False)
        progress = Path(spec.paths.progress_file)
        proc = LocalProcess.attach(run_dir)
        if proc is not None:
            self.log.info(
                "reattached to the running process %d of %s (started by an earlier try)", proc.pid, proc.token
            )
        else:
            finished = self._ended_unwatched(run_dir, progress, plan.token)
            if finished is not None:
                return finished
            proc = LocalProcess.start(spec, run_dir, cwd=Path.cwd(), python=sys.executable)
            self.log.info("started %s (pid %d) for %s", " ".join(spec.argv("python")), proc.pid, spec.token)
        self._local: LocalProcess | None = proc
        self._running = (job.id, proc.token)
        offset = proc.progress_offset
        try:
            svc.report_started(job.id, proc.token)
        except StateConflict as exc:
            self.log.warning("%s", exc)
        requested, deadline = Action.CONTINUE, math.inf
        next_watch = next_report = time.monotonic()
        while True:
            alive, code = proc.poll()
            for line in proc.new_log_lines():
                self.log.info("[%s] %s", job.id, line)
            if not alive:
                break
            now = time.monotonic()
            if now >= next_watch:
                next_watch = now + self.watch_interval
                current = svc.get(job.id)
                action = watch_action(current.status, proc.token, current.token)
                if action is not Action.CONTINUE and requested is Action.CONTINUE:
                    requested = action
                    what = "stop" if action is Action.STOP else "checkpoint"
                    self.log.info(
                        "job %s is %s (%s): asking the process to %s",
                        job.id,
                        current.status.value,
                        current.reason,
                        what,
                    )
                    proc.request(spec.paths.control_file, what)
                    deadline = now + self.switch_grace_s
            if now >= deadline:
                self.log.warning("process %d did not stop within %.0f s: SIGTERM", proc.pid, self.switch_grace_s)
                proc.terminate(grace_s=30.0)
                deadline = math.inf
            if now >= next_report and requested is Action.CONTINUE:
                next_report = now + self.report_interval
                self._report_progress(svc, settings, job.id, proc.token, read_events(progress)[offset:])
            time.sleep(0.25)
        for line in proc.new_log_lines(limit=10_000):
            self.log.info("[%s] %s", job.id, line)
        summary = summarize(read_events(progress)[offset:])
        self._local = None
        return Segment(proc.token, outcome(summary, code), summary, requested, code)

    def _ended_unwatched(self, run_dir: Path, progress: Path, token: str) -> Segment | None:
        """A process of ``token`` that ended while no task watched it (its worker died): its outcome, if final."""

        if LocalProcess.recorded_token(run_dir) != token:
            return None
        summary = summarize(read_events(progress)[LocalProcess.recorded_offset(run_dir) :])
        if summary.last_event == "done":
            self.log.info("the process of %s finished while no task watched it", token)
            return Segment(token, Outcome.DONE, summary, Action.CONTINUE, None)
        if summary.last_event == "error":
            return Segment(token, outcome(summary, None), summary, Action.CONTINUE, None)
        return None  # checkpointed or killed mid-way: relaunch resumes it

    def _report_progress(
        self, svc: JobService, settings: ElasticoSettings, job_id: str, token: str, events: list[dict[str, Any]]
    ) -> None:
        summary = summarize(events)
        tp = self._fed(summary, settings)
        if tp:
            self._report(svc.report_throughput, job_id, token, tp, measured_on=measured_on(summary, settings))

    def on_kill(self) -> None:
        """The task was killed: stop the job's process or pod and release its GPUs (a retry requeues it)."""
        proc = getattr(self, "_local", None)
        if proc is not None:
            proc.terminate(grace_s=30.0)
        else:
            super().on_kill()
        job_id, token = getattr(self, "_running", (None, None))
        if job_id and token:
            try:
                svc = ElasticoHook.open_service(self.settings())
                try:
                    self._report(svc.report_failed, job_id, token, "the Airflow task was killed")
                finally:
                    svc.close()
            except Exception:
                self.log.exception("could not release job %s", job_id)

    # ---- Kubernetes launcher ----------------------------------------------------------------------
    def build_pod_request_obj(self, context: Any = None, *, dry_run: bool = False) -> k8s.V1Pod:
        """KPO's pod (the author's arguments and templates, secrets, XCom sidecar, task labels, cluster
        policy), patched with this launch's plan (``podplan``); outside a launch, KPO's pod as it is."""
        pod = super().build_pod_request_obj(context, dry_run=dry_run)
        if self._pod_plan is None:
            return pod
        return patch_pod(pod, self._pod_plan, self.base_container_name)

    @contextlib.contextmanager
    def _launching(self, settings: ElasticoSettings, pod_plan: PodPlan) -> Iterator[None]:
        """``pod_plan`` is the plan of the pod KPO builds inside this block only, and KPO's pod state is new.

        ``namespace`` is resolved here because KPO reads it before the patch; it is the connection's default
        of KPO's own argument (the same for every launch), not a field of the plan.
        """
        self.namespace = self.namespace or settings.namespace
        self.pod_request_obj, self.pod, self.remote_pod = None, None, None
        self._pod_plan = pod_plan
        try:
            yield
        finally:
            self._pod_plan = None

    def _pod_plan_of(
        self,
        settings: ElasticoSettings,
        job: JobView,
        plan: PlanView,
        kind: str,
        entry_args: tuple[str, ...],
        overrides: PodOverrides,
    ) -> PodPlan:
        spec = self._spec(settings, job, plan, kind, entry_args, overrides, pod=True)
        try:
            return pod_plan(settings, plan, spec, overrides)
        except PlacementError as exc:
            raise AirflowFailException(f"job {job.id}: {exc}") from None

    def build_plan_pod(
        self,
        settings: ElasticoSettings,
        job: JobView,
        plan: PlanView,
        kind: str,
        entry_args: tuple[str, ...],
        overrides: PodOverrides,
        context: Any = None,
        *,
        dry_run: bool = False,
    ) -> k8s.V1Pod:
        """The V1Pod of ``plan`` (what ``execute_sync`` creates; ``dry_run`` needs no cluster)."""
        with self._launching(settings, self._pod_plan_of(settings, job, plan, kind, entry_args, overrides)):
            return self.build_pod_request_obj(context, dry_run=dry_run)

    def _run_pod(
        self,
        context: Any,
        svc: JobService,
        settings: ElasticoSettings,
        job: JobView,
        plan: PlanView,
        kind: str,
        entry_args: tuple[str, ...],
        overrides: PodOverrides,
    ) -> Segment:
        launch = self._pod_plan_of(settings, job, plan, kind, entry_args, overrides)
        self._watch: _PodWatch | None = _PodWatch(self, svc, job.id, plan.token)
        self._xcom_result: Any = None
        failed: Exception | None = None
        with self._launching(settings, launch):
            try:
                self.execute_sync(context)
            except AirflowException as exc:
                failed = exc
            finally:
                watch, self._watch = self._watch, None
        result: dict[str, Any] = self._xcom_result if isinstance(self._xcom_result, dict) else {}
        summary = summarize(result.get("events") or [])
        code = result.get("exit_code")
        oom = _container_oom(self.remote_pod, self.base_container_name)
        if failed is not None and not result and not oom:
            return Segment(plan.token, Outcome.FAILED, summary, watch.requested, None, str(failed)[:500])
        return Segment(
            plan.token,
            outcome(summary, code if isinstance(code, int) else None, oom_killed=oom),
            summary,
            watch.requested,
            code if isinstance(code, int) else None,
        )

    def get_or_create_pod(self, pod_request_obj: k8s.V1Pod, context: Any) -> k8s.V1Pod:
        pod = super().get_or_create_pod(pod_request_obj, context)
        watch = getattr(self, "_watch", None)
        if watch is not None:
            watch.started()
        return pod

    def extract_xcom(self, pod: k8s.V1Pod, *, ignore_kill_failure: bool = True) -> dict[Any, Any] | None:
        result = super().extract_xcom(pod, ignore_kill_failure=ignore_kill_failure)
        self._xcom_result = result
        return result

    def await_pod_completion(self, pod: k8s.V1Pod) -> None:  # type: ignore[override]
        """KPO's wait (log streaming included) in a thread, while this thread watches the job's state."""
        watch = getattr(self, "_watch", None)
        if watch is None:
            return super().await_pod_completion(pod)
        error: list[BaseException] = []

        def wait() -> None:
            try:
                KubernetesPodOperator.await_pod_completion(self, pod)
            except BaseException as exc:
                error.append(exc)

        waiter = threading.Thread(target=wait, name="kpo-await", daemon=True)
        waiter.start()
        while waiter.is_alive():
            waiter.join(self.watch_interval)
            if waiter.is_alive():
                watch.check(pod)
        if error:
            raise error[0]
        return None

    def exec_in_pod(self, pod: k8s.V1Pod, command: list[str]) -> None:
        from kubernetes.stream import stream

        stream(
            self.client.connect_get_namespaced_pod_exec,
            pod.metadata.name,
            pod.metadata.namespace,
            container=self.base_container_name,
            command=command,
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )


class _PodWatch:
    """The state watcher of one pod launch: switch -> exec a checkpoint request; cancel -> stop, then delete."""

    def __init__(self, op: ElasticoJobOperator, svc: JobService, job_id: str, token: str) -> None:
        self.op, self.svc, self.job_id, self.token = op, svc, job_id, token
        self.requested = Action.CONTINUE
        self.deadline = math.inf

    def started(self) -> None:
        from elastico_core.state import StateConflict

        self.op._running = (self.job_id, self.token)
        try:
            self.svc.report_started(self.job_id, self.token)
        except StateConflict as exc:
            self.op.log.warning("%s", exc)

    def check(self, pod: k8s.V1Pod) -> None:
        job = self.svc.get(self.job_id)
        action = watch_action(job.status, self.token, job.token)
        if action is not Action.CONTINUE and self.requested is Action.CONTINUE:
            self.requested = action
            what = "stop" if action is Action.STOP else "checkpoint"
            self.op.log.info(
                "job %s is %s (%s): asking pod %s to %s",
                self.job_id,
                job.status.value,
                job.reason,
                pod.metadata.name,
                what,
            )
            try:
                self.op.exec_in_pod(pod, control_command(what))
            except Exception as exc:  # no exec rights or the container is gone: SIGTERM also checkpoints
                self.op.log.warning(
                    "exec into %s failed (%s): deleting it (SIGTERM checkpoints)", pod.metadata.name, exc
                )
                self.deadline = 0.0
            else:
                self.deadline = time.monotonic() + self.op.switch_grace_s
        if time.monotonic() >= self.deadline:
            self.deadline = math.inf
            self.op.client.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=int(self.op.switch_grace_s)
            )


def _container_oom(remote_pod: Any, container: str) -> bool:
    try:
        for status in remote_pod.status.container_statuses or []:
            term = status.state.terminated if status.state else None
            if status.name == container and term is not None and (term.reason or "") == "OOMKilled":
                return True
    except AttributeError:
        return False
    return False


def on_gpu(summary: Summary) -> bool:
    """Whether a run's throughput was measured on a GPU (a CUDA device or a vLLM engine)."""
    return summary.device.startswith("cuda") or summary.device == "vllm"


def measured_on(summary: Summary, settings: ElasticoSettings) -> str | None:
    """The signature key of a CPU run (``cpu-<model>_<host MiB>_<n>c_<framework>``); None on a GPU.

    A local run's throughput on CPU cores is no measurement of the plan's GPU: the state and the profile
    store keep it under the CPU it ran on, so it never steers planning on a GPU signature.
    """
    if on_gpu(summary):
        return None
    from elastico_core.profiling.signature import cpu_signature

    threads = dict(settings.workload_env).get("ELASTICO_TORCH_THREADS", "1")
    try:
        cores = max(1, int(threads))
    except ValueError:
        cores = 1
    return cpu_signature(cores).key
