"""Bounded reads: ended jobs come a page at a time, newest by end time, from one index scan per status."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from elastico_core.state import JobService, JobStatus
from elastico_core.state.db import make_engine
from elastico_core.state.models import Job
from tests.cli_runner import run_cli as run

BASE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _history(url: str, n: int) -> JobService:
    """``n`` jobs registered in id order and ended in the reverse order, plus two still pending."""
    svc = JobService.open(url)
    svc.register_many([{"id": f"j{i:04d}", "workload": "bert"} for i in range(n + 2)])
    engine = make_engine(url)
    statuses = ("finished", "failed", "cancelled")
    with engine.begin() as conn:
        for i in range(n):
            conn.execute(sa.update(Job).where(Job.id == f"j{i:04d}").values(
                status=statuses[i % 3], finished_at=BASE + dt.timedelta(seconds=n - i)))
    engine.dispose()
    return svc


def test_ended_jobs_page_newest_end_time_first(state_url: str) -> None:
    svc = _history(state_url, 250)
    try:
        first = svc.ended_jobs(limit=100)
        assert [j.id for j in first[:3]] == ["j0000", "j0001", "j0002"]  # ended last, registered first
        assert all(a.finished_at >= b.finished_at for a, b in itertools.pairwise(first))
        seen = [j.id for j in first]
        while True:
            last = first[-1]
            first = svc.ended_jobs(limit=100, before=(last.finished_at, last.id))
            if not first:
                break
            seen += [j.id for j in first]
        assert len(seen) == len(set(seen)) == 250
        cancelled = svc.ended_jobs([JobStatus.CANCELLED], limit=5)
        assert {j.status for j in cancelled} == {JobStatus.CANCELLED} and len(cancelled) == 5
        # a job cancelled seconds ago is on the first page, whenever it was registered
        svc.cancel("j0251", "just now")
        assert svc.ended_jobs(limit=1)[0].id == "j0251"
        with pytest.raises(Exception, match="ended jobs are"):
            svc.ended_jobs([JobStatus.PENDING])
    finally:
        svc.close()


def test_jobs_list_has_a_default_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from elastico_core.state.service import ENDED_PAGE

    url = f"sqlite:///{tmp_path / 'state.db'}"
    _history(url, ENDED_PAGE + 50).close()
    code, out, err = run(capsys, "jobs", "list", "--json", "--state", url)
    jobs = json.loads(out)
    assert code == 0 and len(jobs) == 2 + ENDED_PAGE and "50 more jobs not shown" in err
    assert [j["status"] for j in jobs[:2]] == ["pending", "pending"] and jobs[2]["id"] == "j0000"
    code, out, _ = run(capsys, "jobs", "list", "--json", "--all", "--state", url)
    assert len(json.loads(out)) == ENDED_PAGE + 52
    code, out, _ = run(capsys, "jobs", "list", "--json", "--status", "failed", "--limit", "3", "--state", url)
    assert [j["status"] for j in json.loads(out)] == ["failed"] * 3
