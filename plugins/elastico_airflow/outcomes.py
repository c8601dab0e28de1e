"""What the operator makes of a launch that ended: the next step, the measurements it reports, the task's XCom.

Pure functions over ``Ended`` (how the launch ended), what the supervise loop had asked of it and the job's
settings; the operator applies the ``Next`` step (report, relaunch, defer again, or end the task).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from elastico_airflow.launch import Ended
from elastico_airflow.settings import ElasticoSettings
from elastico_airflow.supervise import Action, Outcome, Summary, failure_reason, outcome

if TYPE_CHECKING:
    from elastico_core.state import JobView


class Step(StrEnum):
    FINISH = "finish"  # report_finished, return the job's summary
    OOM = "oom"  # report_oom: the controller re-plans it at lower memory; wait for that plan
    FAIL = "fail"  # report_failed, raise (Airflow's retries requeue it)
    STOPPED = "stopped"  # the controller cancelled it: fail the task without retry
    NEXT_PLAN = "next_plan"  # checkpointed on request (switch, migration, preemption): the job's next plan
    RELAUNCH = "relaunch"  # stopped unasked: the same plan again (bounded by max_relaunches)


@dataclass(frozen=True, slots=True)
class Next:
    step: Step
    outcome: Outcome
    reason: str = ""


def next_step(ended: Ended, requested: Action, relaunches: int, max_relaunches: int) -> Next:
    """What to do after a launch ended, given what the watch had asked of it and the relaunches so far."""
    how = outcome(ended.summary, ended.exit_code, oom_killed=ended.oom_killed)
    if how is Outcome.DONE:
        return Next(Step.FINISH, how)
    if how is Outcome.OOM:
        return Next(Step.OOM, how)
    if how is Outcome.FAILED:
        return Next(Step.FAIL, how, ended.reason or failure_reason(ended.summary, ended.exit_code))
    if requested is Action.STOP:
        return Next(Step.STOPPED, how)
    if requested in (Action.SWITCH, Action.REQUEUE):
        return Next(Step.NEXT_PLAN, how)
    if relaunches >= max_relaunches:
        return Next(Step.FAIL, how, f"stopped {relaunches + 1} times without being asked ({how.value})")
    return Next(Step.RELAUNCH, how)


def on_gpu(summary: Summary) -> bool:
    """Whether a run's throughput was measured on a GPU (a CUDA device or a vLLM engine)."""
    return summary.device.startswith("cuda") or summary.device == "vllm"


def fed_throughput(summary: Summary, settings: ElasticoSettings) -> float | None:
    """The throughput the state (and the profile store) gets: only a GPU's, unless the platform opts in
    (then it is stored under the CPU signature it was measured on: ``measured_on``)."""
    if on_gpu(summary) or settings.report_cpu_throughput:
        return summary.throughput
    return None


def gpu_peak(summary: Summary) -> float | None:
    """Peak device memory, only when measured on a GPU (a CPU run's RSS is not a GPU profile)."""
    return summary.peak_mem_mib if summary.device.startswith("cuda") and summary.peak_mem_mib else None


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


def job_summary(job: JobView, summary: Summary | None = None) -> dict[str, Any]:
    """The task's return value (XCom): small, and free of URLs and secrets."""
    plan = job.plan
    out: dict[str, Any] = {
        "job_id": job.id,
        "status": job.status.value,
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
    if summary is not None:
        out["steps"] = summary.steps
        out["samples"] = summary.samples
        out["launches"] = summary.starts
    return out
