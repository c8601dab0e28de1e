"""Blast radius of one: whatever one job reports, and whatever one profile row holds, no other job changes state.

Each example runs the controller on a private SQLite state and profile store: eleven jobs (the example
file) admitted and running, then one fault drawn by hypothesis — a launcher report of arbitrary figures
(finished with a throughput and a peak memory, or OOM-killed with an observed memory), or one arbitrary row
appended to a store file (any catalog or unknown workload, knobs that are a grid point, a random object or
garbage, any finite or non-finite resource and throughput figures) — then two more epochs. Every other job
must still hold its GPUs (running, or switching at the planner's word), never failed or pending; the
ledger stays consistent; and nothing the store now holds fails its own checks.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from elastico_core.model.errors import SpecError
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.quarantine import split_rows
from elastico_core.rst.store import ProfileStore
from elastico_core.specs import load_cluster
from elastico_core.state import JobService, JobStatus, StateStore
from elastico_core.state.controller import Controller, ControllerConfig
from tests.conftest import REPO
from tests.state.state_helpers import check_ledger

EXAMPLES = REPO / "examples"
A100 = "a100-40gb_40960_any_any.parquet"
CONFIG = ControllerConfig(interval_s=0, feedback_interval_s=0, max_backoff_s=0.01)

figures = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 5e-324, 1e-300, 1e300, 1e12, 2.0**70, 40961.0, 39000.0]),
    st.floats(1.0, 1e6),
)
grid_point = st.sampled_from(sorted(PAPER_WORKLOADS)).flatmap(
    lambda w: st.just(w).map(lambda name: (name, _default_knobs(name))))
knobs_text = st.one_of(
    st.just("{}"),
    st.dictionaries(st.sampled_from(["micro_batch", "amp", "dp", "max_num_seqs", "max_model_len", "x"]),
                    st.one_of(st.integers(-5, 10**6), st.floats(), st.booleans(), st.none(), st.text(max_size=5)),
                    max_size=5).map(lambda d: json.dumps(d, allow_nan=True)),
    st.text(max_size=30),
    st.integers(1, 3000).map(lambda n: "[" * n),
)


def _default_knobs(name: str) -> str:
    return PAPER_WORKLOADS[name].defaults.to_json()


report = st.tuples(st.just("finished"), figures, figures)
oom = st.tuples(st.just("oom"), figures)
row = st.fixed_dictionaries({
    "workload": st.one_of(st.sampled_from(["bert", "qwen-1.7b", "resnet50"]), st.text(max_size=8)),
    "knobs": st.one_of(grid_point.map(lambda p: p[1]), knobs_text),
    "sm": figures, "gpu_mem_mib": figures, "cpu_cores": figures, "host_mem_mib": figures, "throughput": figures,
    "sm_active": figures, "source": st.sampled_from(["measured", "estimated", "bogus"]),
}).map(lambda r: ("row", r))


_TEMPLATE: list[tuple[Path, str]] = []


def _template(factory: Any) -> tuple[Path, str]:
    """The eleven jobs admitted and started, once per session (each example starts from a copy), and the
    victim: a job running alone, so that its throughput report is one the store would take."""
    if not _TEMPLATE:
        root = factory.mktemp("blast-template")
        profiles = root / "profiles"
        profiles.mkdir()
        for f in (REPO / "profiles").glob("*.parquet"):
            shutil.copy(f, profiles / f.name)
        url = f"sqlite:///{root / 'state.db'}"
        svc = JobService.open(url)
        svc.submit_document((EXAMPLES / "jobs.yaml").read_text())
        ctl = Controller(StateStore.open(url), load_cluster(EXAMPLES / "cluster.yaml"), ProfileStore.open(profiles), config=CONFIG)
        ctl.run_epoch()
        for job in svc.list_jobs():
            assert job.status is JobStatus.ADMITTED, (job.id, job.reason)
            svc.report_started(job.id, job.token)
        alone = sorted(j.id for j in svc.list_jobs() if j.plan is not None and not j.plan.partners and len(j.plan.gpus) == 1)
        ctl.close()
        svc.close()
        _TEMPLATE.append((root, alone[0]))
    return _TEMPLATE[0]


def _setup(factory: Any) -> tuple[str, Path, JobService, Controller, str]:
    root = factory.mktemp("blast")
    template, victim = _template(factory)
    shutil.copytree(template, root, dirs_exist_ok=True)
    profiles = root / "profiles"
    url = f"sqlite:///{root / 'state.db'}"
    svc = JobService.open(url)
    ctl = Controller(StateStore.open(url), load_cluster(EXAMPLES / "cluster.yaml"), ProfileStore.open(profiles), config=CONFIG)
    return url, profiles, svc, ctl, victim


def _inject(fault: tuple[Any, ...], svc: JobService, profiles: Path, victim_id: str) -> None:
    kind = fault[0]
    victim = svc.get(victim_id)
    if kind == "finished":
        _, throughput, peak = fault
        try:
            svc.report_finished(victim.id, victim.token, throughput, peak_mem_mib=peak)
        except SpecError:  # a non-finite or non-positive figure is refused at the door: report without it
            svc.report_finished(victim.id, victim.token, None)
    elif kind == "oom":
        try:
            svc.report_oom(victim.id, victim.token, fault[1])
        except SpecError:
            svc.report_oom(victim.id, victim.token, None)
    else:
        values = fault[1]
        path = profiles / A100
        df = pl.read_parquet(path)
        new = df.head(1).with_columns(
            pl.lit(values["workload"], dtype=pl.String).alias("workload"),
            pl.lit(values["knobs"], dtype=pl.String).alias("knobs"),
            pl.lit(values["source"], dtype=pl.String).alias("source"),
            *(pl.lit(values[c], dtype=pl.Float64).alias(c)
              for c in ("sm", "gpu_mem_mib", "cpu_cores", "host_mem_mib", "throughput", "sm_active")),
        )
        pl.concat([df, new]).write_parquet(path)


@settings(max_examples=20, deadline=None)
@given(fault=st.one_of(report, oom, row))
def test_one_jobs_bad_data_changes_no_other_jobs_state(tmp_path_factory: Any, fault: tuple[Any, ...]) -> None:
    url, profiles, svc, ctl, victim = _setup(tmp_path_factory)
    try:
        before = {j.id: j.status for j in svc.list_jobs()}
        _inject(fault, svc, profiles, victim)
        for _ in range(2):
            report_ = ctl.run_epoch()
            assert report_.skipped is None
        after = {j.id: j for j in svc.list_jobs()}
        for job_id, job in after.items():
            if job_id == victim:
                assert job.status is not JobStatus.FAILED or "OOM" in job.reason, job.reason
                continue
            assert before[job_id] is JobStatus.RUNNING
            assert job.status in (JobStatus.RUNNING, JobStatus.SWITCHING), (job_id, job.status, job.reason, fault)
        check_ledger(url)
        store = ProfileStore.open(profiles)
        frame = store.frame()
        _, bad = split_rows(frame, "usable rows")
        assert not bad, bad  # what the store serves passes its own checks
        assert all(math.isfinite(v) for v in frame["throughput"].to_list())
    finally:
        ctl.close()
        svc.close()
