"""Rows to frozen values (the only place that knows both shapes)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from elastico_core.model.knobs import Knobs
from elastico_core.state.values import (
    DecisionKind,
    ExternalIdentity,
    IdentitySource,
    JobStatus,
    JobView,
    MeasurementView,
    PlanView,
    Progress,
)


def identity_of(row: Mapping[Any, Any]) -> ExternalIdentity:
    if row["source"] == IdentitySource.AIRFLOW.value:
        return ExternalIdentity(
            IdentitySource.AIRFLOW, row["dag_id"] or "", row["run_id"] or "", row["task_id"] or "",
            -1 if row["map_index"] is None else int(row["map_index"]),
        )
    return ExternalIdentity.submission(row["id"])


def job_view(row: Mapping[Any, Any]) -> JobView:
    plan, target = row["plan"], row["target"]
    limits = row["knob_limits"] or {}
    return JobView(
        id=row["id"],
        status=JobStatus(row["status"]),
        version=int(row["version"]),
        identity=identity_of(row),
        workload=row["workload"],
        kind=row["kind"],
        user=row["owner"],
        priority=int(row["priority"]),
        spec=MappingProxyType(dict(row["spec"])),
        spec_hash=row["spec_hash"],
        plan=PlanView.from_dict(plan) if plan else None,
        target=PlanView.from_dict(target) if target else None,
        pending_action=DecisionKind(row["pending_action"]) if row["pending_action"] else None,
        attempts=int(row["attempts"]),
        oom_kills=int(row["oom_kills"]),
        knob_limits=MappingProxyType({k: tuple(v) for k, v in limits.items()}),
        reason=row["reason"] or "",
        queue_code=row["queue_code"],
        shortfall=MappingProxyType(dict(row["shortfall"])) if row.get("shortfall") else None,
        measured_throughput=row["measured_throughput"],
        created_at=row["created_at"],
        queued_at=row.get("queued_at") or row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        last_try=row["last_try"],
        queue=row.get("queue") or "default",
        progress=Progress.from_dict(row["progress"]) if row.get("progress") else None,
    )


def knobs_or_none(raw: Mapping[Any, Any] | None) -> Knobs | None:
    return Knobs.of(raw) if raw is not None else None


def measurement_view(row: Mapping[Any, Any]) -> MeasurementView:
    return MeasurementView(
        id=int(row["id"]),
        job_id=row["job_id"],
        token=row["token"],
        kind=row["kind"],
        workload=row["workload"],
        knobs=Knobs.of(row["knobs"]),
        gpu_model=row["gpu_model"],
        throughput=row["throughput"],
        predicted_throughput=row["predicted_throughput"],
        predicted_slowdown=row["predicted_slowdown"],
        colocated=bool(row["colocated"]),
        observed_mem_mib=row["observed_mem_mib"],
        at=row["at"],
        fed=bool(row["fed"]),
        signature=str(row.get("signature") or ""),
    )
