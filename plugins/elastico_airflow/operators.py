"""``ElasticoJobOperator``: a KubernetesPodOperator whose GPU request, knobs and placement come from ElastiCo.

A DAG author declares a job — a workload, the part of its knob grid it allows, a throughput floor, a
weight, an amount of work, at most how many GPUs — instead of a fixed GPU request. The task holds no
worker slot from registration to the job's end; it runs only to act:

1. ``execute``: check the inputs (allow-lists), register the job — idempotently per
   dag_id/run_id/task_id/map_index, so a retry finds its job — and defer on ``ElasticoAdmissionTrigger``;
2. ``execute_admitted``: launch the admitted plan — a pod built by KPO or a local process, the same env and
   args — report it started, and defer on ``ElasticoLaunchTrigger``, which watches the workload and the
   job's state from the triggerer (``watch.supervise``: checkpoint on a switch, stop on a cancel);
3. ``execute_launched``: read how the launch ended (``outcomes``) and act: finished (GPUs released,
   measured throughput fed back), relaunched with the next plan after a checkpoint, re-planned after an
   OOM (deferred again), or failed.

The pod path is KPO's own deferrable path: ``execute_async`` builds (``build_pod_request_obj`` patched
with the plan: ``podplan``), creates or reattaches to the pod and calls ``invoke_defer_method``, which
subclasses redefine to defer on their trigger; on resume the pod's logs, XCom and cleanup run as in
``trigger_reentry``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.exceptions import AirflowException
from airflow.providers.cncf.kubernetes.callbacks import ExecutionMode
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk.exceptions import AirflowFailException
from kubernetes.client import models as k8s

from elastico_airflow import local
from elastico_airflow.allowlist import DEFAULT_POLICY, PodOverrideError, PodOverrides, check_pod_overrides
from elastico_airflow.hooks import ElasticoHook
from elastico_airflow.launch import Ended, LaunchRef
from elastico_airflow.launchspec import (
    EntryArgsError,
    LaunchSpec,
    check_entry_args,
    launch_spec,
    local_paths,
    local_run_dir,
    pod_paths,
)
from elastico_airflow.links import ElasticoJobLink, MlflowRunLink
from elastico_airflow.outcomes import Step, fed_throughput, gpu_peak, job_summary, measured_on, next_step
from elastico_airflow.pod_resources import PlacementError
from elastico_airflow.podlaunch import container_oom, kpo_where
from elastico_airflow.podplan import PodPlan, patch_pod, pod_plan
from elastico_airflow.settings import ElasticoSettings, Launcher, SettingsError, has_password
from elastico_airflow.supervise import Action, summarize
from elastico_airflow.triggers import ElasticoAdmissionTrigger, ElasticoLaunchTrigger
from elastico_airflow.watch import WatchPolicy
from elastico_core.state.values import JobStatus

if TYPE_CHECKING:
    from elastico_core.state import JobService, JobView, PlanView

MAX_REDEFER = 3  # watch errors before a launch is given up (KPO's MAX_REDEFER_ATTEMPTS)


@dataclass(frozen=True, slots=True)
class _PodLaunching:
    """The launch KPO builds and defers inside ``_launching``: its plan's pod, and what the trigger watches."""

    plan: PodPlan
    job_id: str
    relaunches: int
    svc: JobService | None = None  # where the launch is reported started (None: only building the pod)


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
    :param entry_args: entrypoint arguments, allow-listed per entrypoint (training: ``--steps``,
        ``--max-seconds``, ``--seed``; inference: ``--input``, ``--output``, ``--max-tokens``, ...). (templated)
    :param entrypoint: ``"sleep"`` runs the load-test workload (progress events for a set time, nothing
        heavy imported) instead of the workload's own entrypoint; None: the workload's. (templated)
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
    :param watch_interval: seconds between looks at the running workload and its job (in the triggerer).
    :param report_interval: seconds between throughput reports while the job runs.
    :param switch_grace_s: how long a workload may take to checkpoint after a switch request before SIGTERM.
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
        "entrypoint",
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
    operator_extra_links = (ElasticoJobLink(), MlflowRunLink())  # the job on the status page, its MLflow run
    _launch: _PodLaunching | None = None  # the pod launch KPO builds and defers, set only inside ``_launching``
    _started: LaunchRef | None = None  # a launch this task process started (``on_kill`` stops it)

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
        entrypoint: str | None = None,
        pod_overrides: Mapping[str, Any] | None = None,
        launcher: str | None = None,
        arrive_after_s: float = 0.0,
        queue_timeout_s: float | None = None,
        admission_grace_s: float = 6.0,
        elastico_conn_id: str = ElasticoHook.default_conn_name,
        poll_interval: float = 2.0,
        watch_interval: float = 2.0,
        report_interval: float = 15.0,
        switch_grace_s: float = 120.0,
        max_relaunches: int = 3,
        **kwargs: Any,
    ) -> None:
        kwargs["deferrable"] = (
            False  # the operator defers on its own triggers (KPO's own trigger would not see the job)
        )
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
        self.entrypoint = entrypoint
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
        """Entrypoint, entry args and pod overrides after the allow-lists; a clear, non-retriable error otherwise."""
        kind = self.job_kind()
        entry = str(self.entrypoint).strip().lower() if self.entrypoint else kind
        try:
            overrides = check_pod_overrides(
                self.pod_overrides, settings.override_policy if settings else DEFAULT_POLICY
            )
            args = check_entry_args(entry, [str(a) for a in (self.entry_args or ())])
        except (PodOverrideError, EntryArgsError) as exc:
            raise AirflowFailException(f"task {self.task_id}: {exc}") from None
        if self.cmds or self.arguments:
            raise AirflowFailException(f"task {self.task_id}: cmds/arguments are ElastiCo's; use entry_args")
        return entry, args, overrides

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

    def watch_policy(self) -> WatchPolicy:
        return WatchPolicy(
            poll_s=float(self.watch_interval), grace_s=float(self.switch_grace_s), report_s=float(self.report_interval)
        )

    @contextlib.contextmanager
    def _service(self, settings: ElasticoSettings) -> Iterator[JobService]:
        svc = ElasticoHook.open_service(settings)
        try:
            yield svc
        finally:
            svc.close()

    # ---- execute: register, then wait for admission -------------------------------------------------
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
        with self._service(settings) as svc:
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
            return self._dispatch(context, svc, settings, self._await_epoch(svc, job))

    def execute_admitted(self, context: Any, event: Mapping[str, Any] | None = None, job_id: str | None = None) -> Any:
        """Resume after admission: launch the admitted plan (or end, if the job ended meanwhile)."""
        job_id = job_id or (event or {}).get("job_id")
        if not job_id:
            raise AirflowException("resumed without a job id")
        settings = self.settings()
        self.checked_inputs(settings)
        with self._service(settings) as svc:
            job = svc.get(job_id)
            if (event or {}).get("status") == "timeout" and job.status is JobStatus.PENDING:
                job = svc.cancel(job.id, f"still queued after {self.queue_timeout_s} s: {job.reason}")
                raise AirflowFailException(f"job {job.id} was not admitted in time: {job.reason}")
            self.log.info("job %s is %s: %s", job.id, job.status.value, job.reason)
            return self._dispatch(context, svc, settings, job)

    def _await_epoch(self, svc: JobService, job: JobView) -> JobView:
        """A pending job, re-read until the controller has looked at it once (or the grace is over)."""
        deadline = time.monotonic() + float(self.admission_grace_s or 0.0)
        while job.status is JobStatus.PENDING and job.queue_code is None and time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            job = svc.get(job.id)
        return job

    def _dispatch(
        self, context: Any, svc: JobService, settings: ElasticoSettings, job: JobView, relaunches: int = 0
    ) -> Any:
        """Defer while the job waits, launch its plan when it has one, end the task when it has ended."""
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
            return job_summary(job)
        if status is JobStatus.CANCELLED:
            raise AirflowFailException(f"job {job.id} was cancelled: {job.reason}")
        if status is JobStatus.FAILED:
            raise AirflowFailException(f"job {job.id} failed: {job.reason}")
        plan = job.target or job.plan
        if plan is None:
            raise AirflowException(f"job {job.id} is {status.value} without a plan")
        return self._start(context, svc, settings, job, plan, relaunches)

    # ---- launch, then watch (deferred) ----------------------------------------------------------------
    def _start(
        self, context: Any, svc: JobService, settings: ElasticoSettings, job: JobView, plan: PlanView, relaunches: int
    ) -> Any:
        """Start the plan's workload — or find the launch an earlier try started — and defer on its watch."""
        entry, args, overrides = self.checked_inputs(settings)
        self._log_plan(job, plan)
        if self.launcher_of(settings) is Launcher.KUBERNETES:
            launching = _PodLaunching(
                self._pod_plan_of(settings, job, plan, entry, args, overrides), job.id, relaunches, svc
            )
            with self._launching(settings, launching):
                self.execute_async(context)  # KPO: build, create or reattach, then our invoke_defer_method
            raise AirflowException("KubernetesPodOperator.execute_async returned without deferring")
        run_dir = local_run_dir(settings.workdir, job.id)
        ref = local.find_launch(job.id, run_dir, plan.token)
        if ref is not None:
            self.log.info("found the launch of %s (pid %s) an earlier try started", ref.token, ref.where["pid"])
        else:
            spec = self._spec(settings, job, plan, entry, args, overrides, pod=False)
            ref = local.start(spec, run_dir, cwd=Path.cwd())
            self._started = ref
            self.log.info("started %s (pid %s) for %s", " ".join(spec.argv("python")), ref.where["pid"], spec.token)
        return self._watch(svc, ref, relaunches)

    def _watch(self, svc: JobService, ref: LaunchRef, relaunches: int, errors: int = 0) -> Any:
        """Report the launch started (acknowledging a switch) and defer until it ends."""
        from elastico_core.state import StateConflict

        try:
            svc.report_started(ref.job_id, ref.token)
        except StateConflict as exc:  # an earlier launch still runs for a token the job moved past: the watch stops it
            self.log.warning("%s", exc)
        self.defer(
            trigger=ElasticoLaunchTrigger(
                ref.to_json(),
                self.elastico_conn_id,
                self.watch_policy().to_json(),
                {"relaunches": relaunches, "errors": errors},
            ),
            method_name="execute_launched",
            kwargs={"launch": ref.to_json(), "relaunches": relaunches, "errors": errors},
        )

    def execute_launched(
        self,
        context: Any,
        event: Mapping[str, Any] | None = None,
        launch: Mapping[str, Any] | None = None,
        relaunches: int = 0,
        errors: int = 0,
    ) -> Any:
        """Resume when the launch ended: read how, report it, and finish, relaunch or wait for the next plan."""
        event = dict(event or {})
        launch = launch or event.get("launch")  # `airflow dags test` resumes with the event alone
        if not launch:
            raise AirflowException("resumed without a launch")
        if "launch" in event and isinstance(event.get("resume"), Mapping):
            relaunches = int(event["resume"].get("relaunches", relaunches))
            errors = int(event["resume"].get("errors", errors))
        ref = LaunchRef.from_json(launch)
        settings = self.settings()
        with self._service(settings) as svc:
            if event.get("status") == "error" and errors < MAX_REDEFER:  # watching failed, not the workload
                self.log.warning("watching %s failed (%s): watching it again", ref.token, event.get("message"))
                return self._watch(svc, ref, relaunches, errors + 1)
            ended = (
                self._pod_outcome(context, ref, event)
                if ref.launcher is Launcher.KUBERNETES
                else self._local_outcome(ref)
            )
            return self._act(
                context, svc, settings, ref, ended, Action(event.get("requested") or "continue"), relaunches
            )

    def _act(
        self,
        context: Any,
        svc: JobService,
        settings: ElasticoSettings,
        ref: LaunchRef,
        ended: Ended,
        requested: Action,
        relaunches: int,
    ) -> Any:
        nxt = next_step(ended, requested, relaunches, int(self.max_relaunches))
        self.log.info("launch %s ended: %s (asked: %s)", ref.token, nxt.outcome.value, requested.value)
        summary = ended.summary
        if nxt.step is Step.FINISH:
            rate = fed_throughput(summary, settings)
            done = self._report(
                svc.report_finished,
                ref.job_id,
                ref.token,
                rate,
                peak_mem_mib=gpu_peak(summary),
                measured_on=measured_on(summary, settings),
            )
            self.log.info("job %s finished: measured %s after %d steps", ref.job_id, summary.throughput, summary.steps)
            return job_summary(done or svc.get(ref.job_id), summary)
        if nxt.step is Step.OOM:
            self._report(svc.report_oom, ref.job_id, ref.token, gpu_peak(summary))
            self.log.warning("job %s ran out of memory: re-planned at lower memory", ref.job_id)
            return self._dispatch(context, svc, settings, svc.get(ref.job_id))
        if nxt.step is Step.FAIL:
            self._report(svc.report_failed, ref.job_id, ref.token, nxt.reason)
            raise AirflowException(f"job {ref.job_id} failed: {nxt.reason}")
        if nxt.step is Step.STOPPED:
            latest = svc.get(ref.job_id)
            raise AirflowFailException(f"job {ref.job_id} was stopped: {latest.status.value}: {latest.reason}")
        if nxt.step is Step.RELAUNCH:
            self.log.info(
                "job %s %s without a request: relaunching (%d/%d)",
                ref.job_id,
                nxt.outcome.value,
                relaunches + 1,
                self.max_relaunches,
            )
            relaunches += 1
        return self._dispatch(context, svc, settings, svc.get(ref.job_id), relaunches)

    def _local_outcome(self, ref: LaunchRef) -> Ended:
        for line in local.log_lines(ref):
            self.log.info("[%s] %s", ref.job_id, line)
        return local.outcome(ref)

    def _report(self, method: Any, *args: Any, **kwargs: Any) -> JobView | None:
        from elastico_core.state import StateConflict

        try:
            return method(*args, **kwargs)  # type: ignore[no-any-return]
        except StateConflict as exc:  # the controller moved on (e.g. cancelled meanwhile): say so, carry on
            self.log.warning("state refused the report: %s", exc)
            return None

    def _log_plan(self, job: JobView, plan: PlanView) -> None:
        beside = f" beside {', '.join(plan.partners)}" if plan.partners else " alone"
        self.log.info(
            "plan %s for job %s: %s on %s%s, %.0f MiB, predicted %.4g (floor %.4g, slowdown %.2f, %s profile)",
            plan.token,
            job.id,
            plan.knobs.short(),
            ",".join(plan.gpus),
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
        entry: str,
        entry_args: tuple[str, ...],
        overrides: PodOverrides,
        *,
        pod: bool,
    ) -> LaunchSpec:
        paths = pod_paths(job.id) if pod else local_paths(settings.workdir, job.id)
        url = None if has_password(settings.state_url) else settings.state_url
        return launch_spec(
            job.id,
            entry,
            plan.token,
            plan.launch.env_dict(),
            plan.launch.args,
            paths,
            entry_args=entry_args,
            workload_env=dict(settings.workload_env),
            user_env=dict(overrides.env),
            state_url=None if pod else url,
        )

    def on_kill(self) -> None:
        """Killed while acting (the job runs on while the task is deferred; the trigger's ``on_kill`` covers
        that): stop a launch this process started and release the job's GPUs (a retry requeues it)."""
        ref = self._started
        if ref is not None and ref.launcher is Launcher.LOCAL:
            local.terminate_now(ref)
        else:
            super().on_kill()
        if ref is not None:
            try:
                with self._service(self.settings()) as svc:
                    self._report(svc.report_failed, ref.job_id, ref.token, "the Airflow task was killed")
            except Exception:
                self.log.exception("could not release job %s", ref.job_id)

    # ---- Kubernetes launcher: KPO's deferrable path --------------------------------------------------
    def build_pod_request_obj(self, context: Any = None, *, dry_run: bool = False) -> k8s.V1Pod:
        """KPO's pod (the author's arguments and templates, secrets, XCom sidecar, task labels, cluster
        policy), patched with this launch's plan (``podplan``); outside a launch, KPO's pod as it is."""
        pod = super().build_pod_request_obj(context, dry_run=dry_run)
        if self._launch is None:
            return pod
        return patch_pod(pod, self._launch.plan, self.base_container_name)

    @contextlib.contextmanager
    def _launching(self, settings: ElasticoSettings, launching: _PodLaunching) -> Iterator[None]:
        """``launching`` is the launch KPO builds and defers inside this block only, and KPO's pod state is new.

        ``namespace`` is resolved here because KPO reads it before the patch; it is the connection's default
        of KPO's own argument (the same for every launch), not a field of the plan.
        """
        self.namespace = self.namespace or settings.namespace
        self.name = self._set_name(self.name)
        self.pod_request_obj, self.pod, self.remote_pod = None, None, None
        self._launch = launching
        try:
            yield
        finally:
            self._launch = None

    def invoke_defer_method(self, last_log_time: Any = None, context: Any = None) -> None:
        """Defer on the job's watch (KPO's hook for subclasses' triggers): the pod and the job's state."""
        launching = self._launch
        if launching is None or launching.svc is None or self.pod is None:
            raise AirflowException("invoke_defer_method outside a launch")
        self.convert_config_file_to_dict()
        ref = LaunchRef(Launcher.KUBERNETES, launching.job_id, launching.plan.token, kpo_where(self, self.pod))
        self._started = ref
        self._watch(launching.svc, ref, launching.relaunches)

    def _pod_outcome(self, context: Any, ref: LaunchRef, event: Mapping[str, Any]) -> Ended:
        """How the pod ended, read as KPO's ``trigger_reentry`` reads it: logs, callbacks, XCom, cleanup."""
        from kubernetes.client.exceptions import ApiException

        name, namespace = str(ref.where["name"]), str(ref.where["namespace"])
        try:
            self.pod = self.hook.get_pod(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return Ended(
                ref.token,
                summarize([]),
                None,
                reason=f"pod {namespace}/{name} is gone ({event.get('detail') or 'deleted'})",
            )
        if self.get_logs:
            try:
                self._write_logs(self.pod)
            except Exception as exc:
                self.log.warning("reading the logs of %s failed (%s)", name, type(exc).__name__)
        for callback in self.callbacks:
            callback.on_pod_completion(
                pod=self.pod, client=self.client, mode=ExecutionMode.SYNC, context=context, operator=self
            )
            callback.on_pod_teardown(
                pod=self.pod, client=self.client, mode=ExecutionMode.SYNC, context=context, operator=self
            )
        result: Any = None
        if self.do_xcom_push:
            try:
                result = self.extract_xcom(pod=self.pod)
            except Exception as exc:
                self.log.warning("no XCom from %s (%s)", name, type(exc).__name__)
        oom = bool(event.get("oom_killed")) or container_oom(self.pod, self.base_container_name)
        failed = ""
        try:
            self._clean(
                event={"status": "success", "name": name, "namespace": namespace}, result=result, context=context
            )
        except AirflowException as exc:  # KPO's cleanup raises for a failed pod: the outcome says what it was
            failed = str(exc)[:500]
        raw = result if isinstance(result, dict) else {}
        code = raw.get("exit_code")
        reason = (failed or str(event.get("detail") or "")) if not raw and not oom else ""
        return Ended(
            ref.token, summarize(raw.get("events") or []), code if isinstance(code, int) else None, oom, reason
        )

    def _pod_plan_of(
        self,
        settings: ElasticoSettings,
        job: JobView,
        plan: PlanView,
        entry: str,
        entry_args: tuple[str, ...],
        overrides: PodOverrides,
    ) -> PodPlan:
        spec = self._spec(settings, job, plan, entry, entry_args, overrides, pod=True)
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
        """The V1Pod of ``plan`` (what the launch creates; ``dry_run`` needs no cluster)."""
        with self._launching(
            settings, _PodLaunching(self._pod_plan_of(settings, job, plan, kind, entry_args, overrides), job.id, 0)
        ):
            return self.build_pod_request_obj(context, dry_run=dry_run)
