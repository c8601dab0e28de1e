"""Frozen values that cross the state API (the Airflow side, the CLI, the status page read these, never rows)."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs
from elastico_core.model.launch import LaunchSettings
from elastico_core.model.plan import Prices


class JobStatus(StrEnum):
    """Where a job is in its life. Only the controller moves a job out of ``pending``.

    ``admitted``: a plan (knobs, GPUs, launch settings, token) is reserved and waits for its launcher;
    ``running``: the launcher reported the plan's process started;
    ``switching``: the controller asked for another configuration or other GPUs (``JobView.target``);
    the launcher checkpoints, relaunches with the target and acknowledges its token.
    """

    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    SWITCHING = "switching"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED)

    @property
    def holds_gpus(self) -> bool:
        """Statuses whose GPU memory is reserved in the ledger (and that the planner sees as running)."""
        return self in (JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING)


ACTIVE_STATUSES: tuple[JobStatus, ...] = (JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING)
TERMINAL_STATUSES: tuple[JobStatus, ...] = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED)


class DecisionKind(StrEnum):
    """What the controller recorded for a job in an epoch (``keep`` is never recorded)."""

    ADMIT = "admit"
    SWITCH = "switch"
    MIGRATE = "migrate"
    HOLD = "hold"  # stays queued; recorded when its reason changes
    PREEMPT = "preempt"  # was running, its GPUs are gone: back to the queue
    DEFER = "defer"  # the plan wanted a change that the ledger refused at commit time; re-planned next epoch
    FAIL = "fail"  # the controller gave up on the job (unusable spec, out of memory in every configuration)
    NARROW = "narrow"  # after an OOM kill the job's knob space was cut to lower-memory configurations


class IdentitySource(StrEnum):
    AIRFLOW = "airflow"
    CLI = "cli"


_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


@dataclass(frozen=True, slots=True)
class ExternalIdentity:
    """Who registered a job. Registration is idempotent per identity: the same identity, the same job.

    An Airflow task instance is ``(dag_id, run_id, task_id, map_index)``; the try number is *not* part of
    it, so a task retried after its worker died finds (and reattaches to) the job its first try registered.
    A plain submission (CLI, scripts) is identified by its job id.
    """

    source: IdentitySource
    dag_id: str = ""
    run_id: str = ""
    task_id: str = ""
    map_index: int = -1
    job_id: str = ""  # plain submissions only

    @classmethod
    def airflow(cls, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> ExternalIdentity:
        for name, value in (("dag_id", dag_id), ("run_id", run_id), ("task_id", task_id)):
            if not isinstance(value, str) or not value or "\x00" in value:
                raise SpecError(f"must be a non-empty string without NUL, got {value!r}", where="airflow identity", field=name)
        if isinstance(map_index, bool) or not isinstance(map_index, int) or map_index < -1:
            raise SpecError(f"must be an integer >= -1, got {map_index!r}", where="airflow identity", field="map_index")
        return cls(IdentitySource.AIRFLOW, dag_id, run_id, task_id, map_index)

    @classmethod
    def submission(cls, job_id: str) -> ExternalIdentity:
        return cls(IdentitySource.CLI, job_id=job_id)

    @property
    def key(self) -> str:
        """Canonical text of the identity (unit separators keep ``a/b`` + ``c`` apart from ``a`` + ``b/c``)."""
        if self.source is IdentitySource.AIRFLOW:
            return "\x1f".join(("airflow", self.dag_id, self.run_id, self.task_id, str(self.map_index)))
        return "\x1f".join(("cli", self.job_id))

    @property
    def digest(self) -> str:
        """What the database's unique index holds (fixed length, whatever the ids' lengths)."""
        return hashlib.sha256(self.key.encode()).hexdigest()

    def derived_job_id(self) -> str:
        """The job id an Airflow task instance gets: readable dag/task/map prefix, identity hash suffix."""
        if self.source is not IdentitySource.AIRFLOW:
            return self.job_id
        parts = [_SAFE.sub("-", self.dag_id)[:80], _SAFE.sub("-", self.task_id)[:80]]
        if self.map_index >= 0:
            parts.append(str(self.map_index))
        stem = ".".join(p.strip(".-_") or "x" for p in parts)
        return f"{stem}-{self.digest[:12]}"

    def as_dict(self) -> dict[str, Any]:
        if self.source is IdentitySource.AIRFLOW:
            return {"source": self.source.value, "dag_id": self.dag_id, "run_id": self.run_id,
                    "task_id": self.task_id, "map_index": self.map_index}
        return {"source": self.source.value, "job_id": self.job_id}


@dataclass(frozen=True, slots=True)
class PlanView:
    """A plan the controller admitted for a job: what its launcher must start, and the token to report with.

    ``launch`` holds the env and args of ``pds.budgets.launch_settings`` (knobs, memory budget, MPS limits);
    ``nodes`` are the Kubernetes node names of ``gpus`` (``<node>/<index>``), for nodeSelector/affinity.
    ``memory_mib`` and ``sm`` are per GPU.
    """

    token: str
    epoch: int
    knobs: Knobs
    gpus: tuple[str, ...]
    nodes: tuple[str, ...]
    memory_mib: float
    sm: float
    throughput: float  # predicted, isolated, whole job, workload unit
    predicted_slowdown: float
    floor: float
    partners: tuple[str, ...]
    source: str  # where the profile came from: measured | estimated | interpolated
    launch: LaunchSettings
    cpu_cores: float = 0.0  # per GPU, on its node (0: a plan recorded before these were kept)
    host_mem_mib: float = 0.0  # per GPU, on its node

    def to_dict(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "epoch": self.epoch,
            "knobs": self.knobs.as_dict(),
            "gpus": list(self.gpus),
            "nodes": list(self.nodes),
            "memory_mib": self.memory_mib,
            "sm": self.sm,
            "throughput": self.throughput,
            "predicted_slowdown": self.predicted_slowdown,
            "floor": self.floor,
            "partners": list(self.partners),
            "source": self.source,
            "launch": {"env": self.launch.env_dict(), "args": list(self.launch.args)},
            "cpu_cores": self.cpu_cores,
            "host_mem_mib": self.host_mem_mib,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PlanView:
        launch = raw.get("launch") or {}
        return cls(
            token=str(raw["token"]),
            epoch=int(raw["epoch"]),
            knobs=Knobs.of(raw["knobs"]),
            gpus=tuple(raw["gpus"]),
            nodes=tuple(raw["nodes"]),
            memory_mib=float(raw["memory_mib"]),
            sm=float(raw["sm"]),
            throughput=float(raw["throughput"]),
            predicted_slowdown=float(raw["predicted_slowdown"]),
            floor=float(raw["floor"]),
            partners=tuple(raw.get("partners", ())),
            source=str(raw.get("source", "")),
            launch=LaunchSettings(tuple(sorted(dict(launch.get("env", {})).items())), tuple(launch.get("args", ()))),
            cpu_cores=float(raw.get("cpu_cores") or 0.0),
            host_mem_mib=float(raw.get("host_mem_mib") or 0.0),
        )


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the state holds it now. ``version`` grows with every change (optimistic concurrency).

    ``plan`` is what should be running (None while pending); ``target`` is the plan a switch or migration
    asks for (status ``switching``, kind in ``pending_action``). ``reason`` is the controller's latest word
    on the job (why it waits, why it moved); ``queue_code`` the machine-readable form while it waits.
    """

    id: str
    status: JobStatus
    version: int
    identity: ExternalIdentity
    workload: str
    kind: str
    user: str
    priority: int
    spec: Mapping[str, Any]  # the job document it was registered with (job YAML format, one job)
    spec_hash: str
    plan: PlanView | None
    target: PlanView | None
    pending_action: DecisionKind | None
    attempts: int  # admissions so far
    oom_kills: int
    knob_limits: Mapping[str, tuple[Any, ...]]  # knob -> allowed values, narrowed after OOM kills
    reason: str
    queue_code: str | None
    measured_throughput: float | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    last_try: int | None  # the Airflow try number of the latest registration call
    # while it waits: what it lacks (model.plan.Shortfall.as_dict: resource, need, free, where)
    shortfall: Mapping[str, Any] | None = None

    @property
    def token(self) -> str | None:
        """The token the launcher must use now: the target's while switching, else the plan's."""
        if self.target is not None:
            return self.target.token
        return self.plan.token if self.plan is not None else None

    @property
    def gpus(self) -> tuple[str, ...]:
        return self.plan.gpus if self.plan is not None else ()

    @property
    def queue(self) -> str:
        """The queue its spec names (``default`` when it names none)."""
        jobs = self.spec.get("jobs") if isinstance(self.spec, Mapping) else None
        job = jobs[0] if isinstance(jobs, list) and jobs and isinstance(jobs[0], Mapping) else {}
        return str(job.get("queue") or "default")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``config`` and ``gpu`` are the keys scripts read (``elastico jobs list --json``)."""
        return {
            "id": self.id,
            "status": self.status.value,
            "version": self.version,
            "workload": self.workload,
            "kind": self.kind,
            "user": self.user,
            "queue": self.queue,
            "priority": self.priority,
            "config": self.plan.knobs.as_dict() if self.plan else None,
            "gpu": ",".join(self.plan.gpus) if self.plan else None,
            "gpus": list(self.plan.gpus) if self.plan else [],
            "token": self.token,
            "plan": self.plan.to_dict() if self.plan else None,
            "target": self.target.to_dict() if self.target else None,
            "pending_action": self.pending_action.value if self.pending_action else None,
            "attempts": self.attempts,
            "oom_kills": self.oom_kills,
            "knob_limits": {k: list(v) for k, v in self.knob_limits.items()},
            "reason": self.reason,
            "queue_code": self.queue_code,
            "shortfall": dict(self.shortfall) if self.shortfall is not None else None,
            "measured_throughput": self.measured_throughput,
            "identity": self.identity.as_dict(),
            "spec": dict(self.spec),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }


@dataclass(frozen=True, slots=True)
class RegisterResult:
    """``created`` is False when the identity was already registered (a retry, a resubmission)."""

    job: JobView
    created: bool


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU's ledger line: reserved memory (MiB) and the jobs holding it."""

    id: str
    node: str
    model: str
    capacity_mib: float  # device memory less M_sys
    used_mem_mib: float
    max_jobs: int
    jobs: tuple[str, ...]
    present: bool  # still in the cluster file


@dataclass(frozen=True, slots=True)
class DecisionView:
    epoch: int
    at: dt.datetime
    job_id: str
    kind: DecisionKind
    reason: str
    code: str | None
    token: str | None
    from_knobs: Knobs | None
    to_knobs: Knobs | None
    from_gpus: tuple[str, ...]
    to_gpus: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PriceView:
    epoch: int
    at: dt.datetime
    prices: Prices


@dataclass(frozen=True, slots=True)
class MeasurementView:
    """A throughput (or OOM) report of a launched job, and whether it reached the profile store."""

    id: int
    job_id: str
    token: str
    kind: str  # progress | final | oom
    workload: str
    knobs: Knobs
    gpu_model: str
    throughput: float | None
    predicted_throughput: float | None
    predicted_slowdown: float | None
    colocated: bool
    observed_mem_mib: float | None
    at: dt.datetime
    fed: bool
    signature: str = ""  # the hardware signature key it was measured on (a CPU's for a local CPU run)
