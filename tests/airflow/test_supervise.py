"""The supervise loop (``watch.supervise``) driven by a fake launch and a fake clock: no sleeps, no processes.

One loop watches every launch: these tests pin what it asks of a launch and when (a checkpoint on a
switch or a preemption, a stop on a cancel, SIGTERM after the grace, SIGKILL after that, throughput
reports only while nothing is asked), and that an unreadable state never makes it act.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from elastico_airflow.launch import Launch, Probe
from elastico_airflow.supervise import Action, Summary
from elastico_airflow.watch import Seen, Watched, WatchPolicy, supervise
from elastico_core.state.values import JobStatus

POLICY = WatchPolicy(poll_s=1.0, grace_s=10.0, kill_after_s=5.0, report_s=4.0)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class FakeLaunch:
    """Runs until ``ends_at`` (clock time), or until ``honour_after`` seconds after a request / a signal."""

    clock: FakeClock
    token: str = "j:1"
    ends_at: float = float("inf")
    honours: bool = True  # does it act on a request (a checkpoint / stop via the control file)?
    delivers: bool = True  # can a request reach it at all (exec allowed)?
    dies_on_sigterm: bool = True
    calls: list[tuple[float, str]] = field(default_factory=list)

    async def poll(self) -> Probe:
        return Probe(True, exit_code=0) if self.clock.now() >= self.ends_at else Probe.running()

    async def request(self, action: str) -> bool:
        self.calls.append((self.clock.now(), f"request:{action}"))
        if self.delivers and self.honours:
            self.ends_at = min(self.ends_at, self.clock.now() + 3)
        return self.delivers

    async def terminate(self, *, force: bool) -> None:
        self.calls.append((self.clock.now(), "kill" if force else "term"))
        if force or self.dies_on_sigterm:
            self.ends_at = min(self.ends_at, self.clock.now() + 1)

    async def events(self) -> list[dict[str, Any]]:
        n = int(self.clock.now())
        return [{"event": "start", "device": "cpu"}] + [
            {"event": "step", "step": i, "rate": 10.0} for i in range(1, n + 1)
        ]


@dataclass
class ScriptedJob:
    """The job's state as a function of clock time; every report recorded."""

    clock: FakeClock
    script: list[tuple[float, Seen | None]]
    reports: list[tuple[float, str, float]] = field(default_factory=list)

    async def read(self) -> Seen | None:
        seen: Seen | None = None
        for at, value in self.script:
            if self.clock.now() >= at:
                seen = value
        return seen

    async def report(self, token: str, summary: Summary) -> None:
        assert summary.throughput is not None
        self.reports.append((self.clock.now(), token, summary.throughput))


RUNNING = Seen(JobStatus.RUNNING, "j:1")


def run(launch: FakeLaunch, job: ScriptedJob, policy: WatchPolicy = POLICY) -> Watched:
    return asyncio.run(supervise(launch, job, launch.clock, policy))


def test_the_fakes_are_what_the_loop_drives() -> None:
    assert isinstance(FakeLaunch(FakeClock()), Launch)


def test_a_launch_that_ends_by_itself_is_reported_while_it_runs_and_asked_nothing() -> None:
    clock = FakeClock()
    launch = FakeLaunch(clock, ends_at=13.0)
    job = ScriptedJob(clock, [(0, RUNNING)])
    watched = run(launch, job)
    assert watched == Watched("j:1", Action.CONTINUE, Probe(True, exit_code=0), terminated=False)
    assert launch.calls == []
    assert [at for at, _, _ in job.reports] == [4.0, 8.0, 12.0]  # every report_s, the trimmed mean of its rates
    assert all(tp == 10.0 for _, _, tp in job.reports)


@pytest.mark.parametrize(
    ("seen", "asked", "action"),
    [
        (Seen(JobStatus.SWITCHING, "j:2", "better knobs"), "checkpoint", Action.SWITCH),
        (Seen(JobStatus.PENDING, None, "preempted"), "checkpoint", Action.REQUEUE),
        (Seen(JobStatus.CANCELLED, None, "cancelled by a user"), "stop", Action.STOP),
    ],
    ids=["switch", "preempted", "cancelled"],
)
def test_the_state_asks_once_and_the_launch_ends_within_the_grace(seen: Seen, asked: str, action: Action) -> None:
    clock = FakeClock()
    launch = FakeLaunch(clock)
    job = ScriptedJob(clock, [(0, RUNNING), (5, seen)])
    watched = run(launch, job)
    assert launch.calls == [(5.0, f"request:{asked}")]
    assert watched.requested is action
    assert not watched.terminated and clock.now() == 8.0
    assert [at for at, _, _ in job.reports] == [4.0]  # none after the request: the launch is winding down


def test_a_request_the_workload_ignores_ends_in_sigterm_after_the_grace_then_sigkill() -> None:
    clock = FakeClock()
    launch = FakeLaunch(clock, honours=False, dies_on_sigterm=False)
    job = ScriptedJob(clock, [(0, RUNNING), (2, Seen(JobStatus.SWITCHING, "j:2"))])
    watched = run(launch, job)
    assert launch.calls == [(2.0, "request:checkpoint"), (12.0, "term"), (17.0, "kill")]
    assert watched.terminated and watched.requested is Action.SWITCH


def test_a_request_that_cannot_be_delivered_terminates_at_once() -> None:
    clock = FakeClock()
    launch = FakeLaunch(clock, delivers=False)
    job = ScriptedJob(clock, [(0, RUNNING), (3, Seen(JobStatus.SWITCHING, "j:2"))])
    watched = run(launch, job)
    assert launch.calls == [(3.0, "request:checkpoint"), (3.0, "term")]  # SIGTERM checkpoints
    assert watched.terminated


def test_an_unreadable_state_never_makes_the_loop_act() -> None:
    clock = FakeClock()
    launch = FakeLaunch(clock, ends_at=6.0)
    job = ScriptedJob(clock, [(0, None)])
    watched = run(launch, job)
    assert launch.calls == [] and watched.requested is Action.CONTINUE


def test_a_switch_to_the_running_token_is_no_request() -> None:
    """The switch target already runs (a relaunch reported it): nothing to checkpoint."""
    clock = FakeClock()
    launch = FakeLaunch(clock, token="j:2", ends_at=5.0)
    job = ScriptedJob(clock, [(0, Seen(JobStatus.SWITCHING, "j:2"))])
    assert run(launch, job).requested is Action.CONTINUE and launch.calls == []


# ---- the pod's watch side: KPO's trigger logic on the async client's own V1Pod objects -------------------
def _apod(phase: str, state: str = "running", reason: str = "", exit_code: int = 0) -> Any:
    from kubernetes_asyncio.client import models as k8s

    kinds = {
        "running": k8s.V1ContainerState(running=k8s.V1ContainerStateRunning()),
        "waiting": k8s.V1ContainerState(waiting=k8s.V1ContainerStateWaiting(reason=reason or "ContainerCreating")),
        "terminated": k8s.V1ContainerState(
            terminated=k8s.V1ContainerStateTerminated(exit_code=exit_code, reason=reason or "Completed")
        ),
    }
    status = k8s.V1ContainerStatus(
        name="base", image="i", image_id="i", ready=True, restart_count=0, state=kinds[state]
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="p", namespace="ns"),
        status=k8s.V1PodStatus(phase=phase, container_statuses=[status]),
    )


def _pod_launch(pods: list[Any], **where: Any) -> Any:
    from unittest import mock

    from elastico_airflow.launch import LaunchRef
    from elastico_airflow.podlaunch import PodLaunch
    from elastico_airflow.settings import Launcher

    ref = LaunchRef(
        Launcher.KUBERNETES, "j", "j:1", {"name": "p", "namespace": "ns", "base_container_name": "base", **where}
    )
    launch = PodLaunch(ref)
    hook = mock.MagicMock()
    hook.get_pod = mock.AsyncMock(side_effect=pods)
    hook.delete_pod = mock.AsyncMock()
    launch.kpo.__dict__["hook"] = hook  # the provider trigger's cached hook: its pod logic runs for real
    return launch


def test_a_pod_is_running_until_its_container_terminates_and_an_oom_kill_is_seen() -> None:
    launch = _pod_launch([_apod("Running"), _apod("Failed", "terminated", "OOMKilled", 137)])
    assert isinstance(launch, Launch)
    assert asyncio.run(launch.poll()).ended is False
    probe = asyncio.run(launch.poll())
    assert probe.ended and probe.oom_killed


def test_a_pod_that_is_gone_or_cannot_start_has_ended() -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    gone = _pod_launch([ApiException(status=404, reason="Not Found")] * 3)
    assert asyncio.run(gone.poll()) == Probe(True, detail="pod ns/p is gone")
    bad_image = _pod_launch([_apod("Pending", "waiting", "InvalidImageName")])
    assert asyncio.run(bad_image.poll()).ended
    slow = _pod_launch([_apod("Pending", "waiting")] * 2, startup_timeout=0)
    assert asyncio.run(slow.poll()).detail.startswith("pod did not start within")


def test_a_pod_is_terminated_by_deletion_with_a_grace_then_without() -> None:
    launch = _pod_launch([], termination_grace_period=45)
    asyncio.run(launch.terminate(force=False))
    asyncio.run(launch.terminate(force=True))
    calls = [c.kwargs["grace_period_seconds"] for c in launch.kpo.hook.delete_pod.call_args_list]
    assert calls == [45, 0]
