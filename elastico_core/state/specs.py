"""Job documents as the state stores them: one job (job YAML format) plus the custom workload it uses.

A registered job is kept as a *canonical document* — ``{"jobs": [job], "workloads": [its custom workload]}``
with pydantic's normalised values and sorted keys — and its SHA-256 (``spec_hash``). Why documents and not
pickled ``JobSpec``s: they are readable in the database, stable across ElastiCo versions (a new catalog
rebuilds them), and the same text the CLI accepts, so ``elastico jobs submit`` and the Airflow operator
register exactly the same thing.

A spec is accepted here iff the CLI's own parser accepts it: files go through ``specs.files.parse_jobs``,
single jobs (and the controller's rebuilds) through ``parse_jobs_document`` on the parsed document (the
same code without the YAML round trip, which costs ~2 ms per job).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from elastico_core.model.errors import SpecError
from elastico_core.model.job import JobSpec
from elastico_core.model.workload import Workload
from elastico_core.pds.oom import apply_limits as apply_limits  # the rule lives with the planner
from elastico_core.specs.files import JobsFile, parse_jobs_document, parse_yaml


@dataclass(frozen=True, slots=True)
class JobDocument:
    """One validated job, ready to store: its canonical document, that document's hash, the built spec."""

    job_id: str
    doc: Mapping[str, Any]
    digest: str
    spec: JobSpec


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no NaN/inf): what ``spec_hash`` is computed over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest_of(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def _plain(obj: Any, where: str) -> Any:
    """The value as plain JSON data (lists, dicts, str, finite numbers, bools, None), or a SpecError.

    NUL characters are refused too: PostgreSQL cannot store them in text or JSONB, SQLite would.
    """
    try:
        plain = json.loads(canonical_json(obj))
    except (TypeError, ValueError) as exc:
        raise SpecError(f"a job spec must be plain JSON data ({exc})", where=where) from None
    except RecursionError:
        raise SpecError("a job spec must be plain JSON data (nested too deeply)", where=where) from None
    if _has_nul(plain):
        raise SpecError("a job spec must not contain NUL characters", where=where)
    return plain


def _has_nul(obj: Any) -> bool:
    if isinstance(obj, str):
        return "\x00" in obj
    if isinstance(obj, list):
        return any(_has_nul(v) for v in obj)
    if isinstance(obj, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in obj.items())
    return False


def _checked_parse(raw: Mapping[str, Any], where: str) -> tuple[tuple[JobSpec, ...], dict[str, Workload]]:
    """The CLI's parser on a document; anything it raises other than SpecError becomes one (nothing else escapes)."""
    try:
        return parse_jobs_document(raw, where)
    except SpecError:
        raise
    except RecursionError:
        raise SpecError("the spec is nested too deeply", where=where) from None
    except Exception as exc:  # the parser's own gaps (a shape value of the wrong type, ...) are still bad input
        raise SpecError(f"invalid job spec ({type(exc).__name__}: {str(exc)[:160]})", where=where) from None


def job_document(
    job: Mapping[str, Any],
    workloads: Sequence[Mapping[str, Any]] = (),
    *,
    job_id: str | None = None,
    where: str = "job spec",
) -> JobDocument:
    """Validate one job (an entry of a job YAML's ``jobs:`` list) and the custom workloads it may use.

    ``job_id`` overrides the document's ``id`` (Airflow registrations derive it from the task identity).
    Only the custom workload the job names is kept; a catalog workload is kept by name only.
    """
    if not isinstance(job, Mapping):
        raise SpecError(f"a job spec is a mapping, got {type(job).__name__}", where=where)
    if isinstance(workloads, (str, bytes)) or not isinstance(workloads, Sequence):
        raise SpecError(f"workloads is a list of mappings, got {type(workloads).__name__}", where=where)
    body = _plain(dict(job), where)
    if not all(isinstance(k, str) for k in job):
        raise SpecError("job spec keys must be strings", where=where)
    if job_id is not None:
        body["id"] = job_id
    wl = _plain(list(workloads), where)
    raw = {"jobs": [body], "workloads": wl}
    try:
        parsed = JobsFile.model_validate(raw)
    except ValidationError as exc:
        _checked_parse(raw, where)  # the CLI parser's own message for the same defect
        raise SpecError(f"invalid job spec: {exc.errors()[0]['msg']}", where=where) from None
    jd = parsed.jobs[0]
    used = [w for w in parsed.workloads if w.name == jd.workload]
    doc: dict[str, Any] = {"jobs": [jd.model_dump(mode="json", exclude_defaults=True)]}
    if used:
        doc["workloads"] = [used[0].model_dump(mode="json", exclude_defaults=True)]
    doc = _plain(doc, where)
    try:
        spec = build_spec(doc, where)
    except SpecError:
        raise
    except RecursionError:
        raise SpecError("the spec is nested too deeply", where=where) from None
    except Exception as exc:  # the builders' own gaps (a shape value of the wrong type, ...) are still bad input
        raise SpecError(f"invalid job spec ({type(exc).__name__}: {str(exc)[:160]})", where=where) from None
    return JobDocument(spec.id, doc, digest_of(doc), spec)


def split_document(text: str, where: str) -> tuple[JobDocument, ...]:
    """Every job of a job YAML file (the format of ``examples/jobs.yaml``), each as its own document.

    The file is parsed and validated once (the CLI's parser: one-line errors naming the job and field),
    and each job's document is cut from that parse — the same document, digest and spec ``job_document``
    gives for the job alone, at a fraction of the cost for a file of 100,000 jobs.
    """
    try:
        raw = parse_yaml(text, where)
        specs, _ = parse_jobs_document(raw, where)
        plain = _plain(raw, where)  # NUL characters, non-JSON values
        parsed = JobsFile.model_validate(plain)
    except SpecError:
        raise
    except RecursionError:
        raise SpecError("the document is nested too deeply", where=where) from None
    except Exception as exc:
        raise SpecError(f"invalid job file ({type(exc).__name__}: {str(exc)[:160]})", where=where) from None
    if len(specs) != len(parsed.jobs):  # pragma: no cover - both parse the same list
        raise SpecError("internal: job count changed while splitting", where=where)
    workloads = {w.name: w.model_dump(mode="json", exclude_defaults=True) for w in parsed.workloads}
    out = []
    for jd, spec in zip(parsed.jobs, specs, strict=True):
        doc: dict[str, Any] = {"jobs": [jd.model_dump(mode="json", exclude_defaults=True)]}
        if jd.workload in workloads:
            doc["workloads"] = [workloads[jd.workload]]
        at = f"{where}: job {jd.id!r}"
        doc = _plain(doc, at)
        if "workloads" in doc:  # a custom workload: the spec the controller will rebuild from the stored doc
            spec = build_spec(doc, at)
        out.append(JobDocument(spec.id, doc, digest_of(doc), spec))
    return tuple(out)


def build_spec(doc: Mapping[str, Any], where: str = "state") -> JobSpec:
    """A stored document back to its ``JobSpec`` (the CLI's parser, minus YAML)."""
    if isinstance(doc, Mapping) and isinstance(doc.get("jobs"), list) and len(doc["jobs"]) != 1:
        raise SpecError(f"a stored document holds one job, got {len(doc['jobs'])}", where=where)
    jobs, _ = parse_jobs_document(doc, where)
    return jobs[0]


