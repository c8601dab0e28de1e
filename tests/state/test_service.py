"""``JobService``: idempotent registration, reads, the report state machine, cancel and requeue."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastico_core.model.errors import SpecError
from elastico_core.state import ExternalIdentity, JobService, JobStatus, StateConflict, UnknownJob

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BERT = {"id": "bert-1", "workload": "bert", "floor": 150, "weight": 2}


def test_plain_submission_is_idempotent(service: JobService) -> None:
    first = service.register(BERT)
    assert first.created and first.job.status is JobStatus.PENDING and first.job.id == "bert-1"
    again = service.register(dict(BERT))
    assert not again.created and again.job.version == first.job.version
    with pytest.raises(StateConflict, match="different spec"):
        service.register({**BERT, "floor": 10})
    assert [j.id for j in service.list_jobs()] == ["bert-1"]


def test_airflow_identity_reattaches(service: JobService) -> None:
    ident = ExternalIdentity.airflow("train", "run-1", "bert", map_index=0)
    first = service.register({"workload": "bert", "floor": 100}, ident, try_number=1)
    assert first.created and first.job.identity == ident and first.job.last_try == 1
    retry = service.register({"workload": "bert", "floor": 100}, ident, try_number=2)
    assert not retry.created and retry.job.id == first.job.id and retry.job.last_try == 2
    other = service.register({"workload": "bert", "floor": 100}, ExternalIdentity.airflow("train", "run-1", "bert", 1))
    assert other.created and other.job.id != first.job.id
    assert service.find(ident) is not None and service.find(ident).id == first.job.id  # type: ignore[union-attr]
    assert service.find(ExternalIdentity.airflow("train", "run-2", "bert", 0)) is None


def test_submit_document_is_all_or_nothing(service: JobService) -> None:
    text = (EXAMPLES / "jobs.yaml").read_text()
    results = service.submit_document(text, "jobs.yaml")
    assert len(results) == 11 and all(r.created for r in results)
    assert not any(r.created for r in service.submit_document(text, "jobs.yaml"))
    bad = "jobs:\n  - {id: fresh-1, workload: bert}\n  - {id: fresh-2, workload: nope}\n"
    with pytest.raises(SpecError, match="fresh-2"):
        service.submit_document(bad, "bad.yaml")
    with pytest.raises(SpecError, match="malformed YAML"):
        service.submit_document("jobs: [", "broken.yaml")
    assert len(service.list_jobs()) == 11
    assert service.counts() == {JobStatus.PENDING: 11}


def test_invalid_spec_stores_nothing(service: JobService) -> None:
    with pytest.raises(SpecError):
        service.register({"id": "x", "workload": "bert", "gpus": 0})
    with pytest.raises(SpecError):
        service.register(["not", "a", "mapping"])  # type: ignore[arg-type]
    assert service.list_jobs() == ()


def test_unknown_job(service: JobService) -> None:
    with pytest.raises(UnknownJob, match="no job 'ghost'"):
        service.get("ghost")
    with pytest.raises(UnknownJob):
        service.cancel("ghost")


def test_cancel_and_requeue(service: JobService) -> None:
    service.register(BERT)
    cancelled = service.cancel("bert-1", "not needed")
    assert cancelled.status is JobStatus.CANCELLED and cancelled.reason == "not needed"
    assert service.cancel("bert-1").version == cancelled.version  # no-op
    back = service.requeue("bert-1")
    assert back.status is JobStatus.PENDING and back.finished_at is None
    with pytest.raises(StateConflict):
        service.report_started("bert-1", "bert-1:1")


def test_reports_need_a_live_token(service: JobService) -> None:
    service.register(BERT)
    with pytest.raises(StateConflict, match="not current"):
        service.report_finished("bert-1", "bert-1:1", 10.0)
    with pytest.raises(SpecError):
        service.report_throughput("bert-1", "bert-1:1", float("nan"))
