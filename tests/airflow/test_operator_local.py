"""The operator with the local launcher: register -> defer -> admitted -> real workload process -> reported.

The operator's methods are called as Airflow calls them (``execute``, the trigger, ``execute_admitted``)
with a minimal task context, against a real planner state and real planning epochs; the workload is
the real training/inference entrypoint on CPU at tiny scale.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import Env, FakeTI, fake_context, run_deferred, run_epochs


def deferred(op: Any, ctx: dict[str, Any]) -> Any:
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as info:
        op.execute(ctx)
    return info.value


def progress_events(workdir: Path, job_id: str) -> list[dict[str, Any]]:
    path = workdir / job_id / "progress.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_register_defer_admit_launch_finish(elastico_env: Env, cluster_file: Path, profiles_copy: Path) -> None:
    """Deferred from submit to finish: the task runs only to register, launch and read the outcome."""
    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_core.state import JobService

    op = ElasticoJobOperator(
        task_id="train",
        workload="lstm",
        floor=1.0,
        knobs={"micro_batch": [32, 64]},
        entry_args=["--steps", "6"],
        admission_grace_s=0,
        watch_interval=0.2,
    )
    ctx = fake_context(FakeTI(task_id="train"))
    d = deferred(op, ctx)
    assert d.method_name == "execute_admitted"
    assert d.trigger.serialize()[1].keys() == {"job_id", "elastico_conn_id", "poll_interval", "timeout_s", "min_wait_s"}
    assert elastico_env.state_url not in json.dumps(d.trigger.serialize())  # the URL is resolved in the triggerer
    run_epochs(elastico_env.state_url, cluster_file, profiles_copy)
    result = run_deferred(op, ctx, lambda: op.execute(ctx))
    assert [x.method_name for x in op.deferrals] == ["execute_launched"]  # admitted meanwhile: launched at once
    launch_trigger = op.deferrals[-1].trigger
    assert type(launch_trigger).__name__ == "ElasticoLaunchTrigger"
    serialized = json.dumps(launch_trigger.serialize())
    assert elastico_env.state_url not in serialized and str(elastico_env.workdir) in serialized  # where, never how to log in
    assert result["status"] == "finished" and result["steps"] == 6
    assert result["measured_throughput"] and result["measured_throughput"] > 0
    svc = JobService.open(elastico_env.state_url)
    try:
        job = svc.get(result["job_id"])
        assert job.status.value == "finished" and job.measured_throughput == pytest.approx(
            result["measured_throughput"]
        )
        assert all(g.used_mem_mib == 0 for g in svc.gpus())  # the GPU was released
        kinds = [m.kind for m in svc.measurements(job_id=job.id)]
        assert "final" in kinds
    finally:
        svc.close()
    events = progress_events(elastico_env.workdir, result["job_id"])
    start = events[0]
    assert start["event"] == "start" and start["knobs"] == result["knobs"]
    # the process saw exactly the plan's env: its knobs are the admitted ones
    assert [e["event"] for e in events].count("start") == 1
    # a re-run of the finished task (cleared, same identity) does not launch again
    again = op.execute(fake_context(FakeTI(task_id="train", try_number=2)))
    assert again["status"] == "finished"
    assert [e["event"] for e in progress_events(elastico_env.workdir, result["job_id"])].count("start") == 1


def test_infer_shard_writes_parquet(elastico_env: Env, cluster_file: Path, profiles_copy: Path, tmp_path: Path) -> None:
    import polars as pl

    from elastico_airflow.operators import ElasticoJobOperator

    shard = tmp_path / "shard.jsonl"
    shard.write_text(
        "".join(json.dumps({"id": f"r{i}", "prompt": f"Shall I compare thee {i} "}) + "\n" for i in range(5))
    )
    out = tmp_path / "out.parquet"
    op = ElasticoJobOperator(
        task_id="label",
        workload="qwen-1.7b",
        floor=1.0,
        knobs={"max_num_seqs": [2]},
        entry_args=["--input", str(shard), "--output", str(out), "--max-tokens", "4"],
        admission_grace_s=0,
    )
    ctx = fake_context(FakeTI(task_id="label"))
    run_epochs_on_defer = lambda _: run_epochs(elastico_env.state_url, cluster_file, profiles_copy)  # noqa: E731
    result = run_deferred(op, ctx, lambda: op.execute(ctx), on_defer=run_epochs_on_defer)
    assert result["status"] == "finished" and result["knobs"]["max_num_seqs"] == 2
    assert pl.read_parquet(out).height == 5


class ScriptedService:
    """A JobService stand-in whose job switches configuration once the first launch has made progress."""

    def __init__(self, job: Any, target: Any, workdir: Path) -> None:
        self.job, self.target, self.workdir = job, target, workdir
        self.calls: list[tuple[str, str]] = []
        self.switched = False

    def _steps(self) -> int:
        path = self.workdir / self.job.id / "progress.jsonl"
        return sum('"event":"step"' in line for line in path.read_text().splitlines()) if path.exists() else 0

    def get(self, job_id: str) -> Any:
        if not self.switched and self.job.status.value == "running" and self._steps() >= 2:
            self.job = dataclasses.replace(self.job, status=type(self.job.status)("switching"), target=self.target)
        return self.job

    def get_many(self, job_ids: Any) -> dict[str, Any]:
        return {j: self.get(j) for j in job_ids}

    def report_started(self, job_id: str, token: str) -> Any:
        self.calls.append(("started", token))
        if self.job.target is not None and token == self.target.token:
            self.switched = True
            self.job = dataclasses.replace(
                self.job, status=type(self.job.status)("running"), plan=self.target, target=None
            )
        elif self.job.status.value == "admitted":
            self.job = dataclasses.replace(self.job, status=type(self.job.status)("running"))
        return self.job

    def report_throughput(self, job_id: str, token: str, throughput: float, **kw: Any) -> Any:
        self.calls.append(("throughput", token))
        return self.job

    def report_finished(self, job_id: str, token: str, throughput: float | None = None, **kw: Any) -> Any:
        self.calls.append(("finished", token))
        self.job = dataclasses.replace(
            self.job, status=type(self.job.status)("finished"), measured_throughput=throughput
        )
        return self.job

    def close(self) -> None:
        pass


def test_switch_is_checkpoint_relaunch_resume(
    elastico_env: Env, cluster_file: Path, profiles_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch request: the watch asks the process to checkpoint, the task resumes, launches the target plan
    and defers again; the new process resumes at the saved step."""
    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_core.model.knobs import Knobs
    from elastico_core.model.launch import LaunchSettings
    from elastico_core.state import ExternalIdentity, JobService

    svc = JobService.open(elastico_env.state_url)
    job = svc.register(
        {"workload": "lstm", "floor": 1, "knobs": {"micro_batch": [32, 64]}},
        ExternalIdentity.airflow("test_dag", "run-1", "sw"),
        try_number=1,
    ).job
    run_epochs(elastico_env.state_url, cluster_file, profiles_copy)
    job = svc.get(job.id)
    svc.close()
    plan = job.plan
    mb = 64 if plan.knobs["micro_batch"] == 32 else 32
    env = {
        **plan.launch.env_dict(),
        "ELASTICO_KNOB_MICRO_BATCH": str(mb),
        "ELASTICO_KNOBS": plan.knobs.with_(micro_batch=mb).to_json(),
    }
    target = dataclasses.replace(
        plan,
        token=f"{job.id}:2",
        knobs=plan.knobs.with_(micro_batch=mb),
        launch=LaunchSettings(tuple(sorted(env.items())), plan.launch.args),
    )
    fake = ScriptedService(job, target, elastico_env.workdir)
    op = ElasticoJobOperator(
        task_id="sw", workload="lstm", floor=1.0, entry_args=["--steps", "400"], watch_interval=0.2, report_interval=0.5
    )
    from elastico_airflow.hooks import ElasticoHook

    monkeypatch.setattr(ElasticoHook, "open_service", staticmethod(lambda settings: fake))
    settings = op.settings()
    ctx = fake_context(FakeTI(task_id="sw"))
    result = run_deferred(op, ctx, lambda: op._dispatch(ctx, fake, settings, job))  # type: ignore[arg-type]
    assert result["status"] == "finished"
    assert [d.method_name for d in op.deferrals] == ["execute_launched", "execute_launched"]
    assert ("started", plan.token) in fake.calls and ("started", target.token) in fake.calls
    assert ("finished", target.token) in fake.calls
    events = progress_events(elastico_env.workdir, job.id)
    starts = [e for e in events if e["event"] == "start"]
    assert len(starts) == 2
    assert starts[0]["knobs"]["micro_batch"] == plan.knobs["micro_batch"] and not starts[0]["resumed"]
    assert starts[1]["knobs"]["micro_batch"] == mb and starts[1]["resumed"] is True
    saved = next(e for e in events if e["event"] == "checkpointed")
    assert starts[1]["step"] == saved["step"] > 0  # resumed where it checkpointed
    assert events[-1]["event"] == "done" and events[-1]["step"] == 400
    _ = Knobs


def test_cpu_throughput_is_not_fed_unless_opted_in(elastico_env: Env) -> None:
    from elastico_airflow.outcomes import fed_throughput, gpu_peak
    from elastico_airflow.settings import ConnectionFields, resolve_settings
    from elastico_airflow.supervise import Summary

    cpu = Summary("done", 1, 5, 100.0, 42.0, 10.0, "cpu", "")
    gpu = dataclasses.replace(cpu, device="cuda:0")
    off = resolve_settings(ConnectionFields(extra={"state_url": elastico_env.state_url}), {})
    on = dataclasses.replace(off, report_cpu_throughput=True)
    assert fed_throughput(cpu, off) is None and fed_throughput(gpu, off) == 42.0 and fed_throughput(cpu, on) == 42.0
    assert gpu_peak(cpu) is None and gpu_peak(gpu) == 10.0


def test_cpu_measurements_land_under_the_cpu_signature(elastico_env: Env, tmp_path: Path) -> None:
    """A local CPU run's throughput is kept under the CPU it ran on: the GPU signature's profiles stay untouched."""
    import shutil

    from elastico_airflow.outcomes import measured_on
    from elastico_airflow.settings import ConnectionFields, resolve_settings
    from elastico_airflow.supervise import Summary
    from elastico_core.rst.store import ProfileStore
    from elastico_core.state import ExternalIdentity, JobService
    from tests.airflow.conftest import REPO, TINY_CLUSTER

    settings = resolve_settings(ConnectionFields(extra={"state_url": elastico_env.state_url,
                                                        "workload_env": {"ELASTICO_TORCH_THREADS": "2"}}), {})
    cpu = Summary("done", 1, 5, 100.0, 42.0, None, "cpu", "")
    key = measured_on(cpu, settings)
    assert key is not None and key.startswith("cpu-") and "|2c|" in key
    assert measured_on(dataclasses.replace(cpu, device="cuda:0"), settings) is None

    profiles = tmp_path / "profiles"
    shutil.copytree(REPO / "profiles", profiles)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(TINY_CLUSTER)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    svc = JobService.open(url)
    job = svc.register({"id": "cpu-honest", "workload": "lstm", "floor": 1}, ExternalIdentity.submission("cpu-honest"), try_number=1).job
    run_epochs(url, cluster, profiles, n=1)
    job = svc.get(job.id)
    assert job.plan is not None
    svc.report_started(job.id, job.token)
    svc.report_finished(job.id, job.token, 42.0, measured_on=key)
    svc.close()
    run_epochs(url, cluster, profiles, n=1)  # the controller feeds the report into the store
    frame = ProfileStore.open(profiles).frame()
    import polars as pl

    fed = frame.filter((pl.col("workload") == "lstm") & (pl.col("measured_on") == "elastico-controller"))
    assert fed.height == 1
    assert fed["gpu"].to_list() == [key.split("|")[0]] and fed["throughput"].to_list() == [42.0]
