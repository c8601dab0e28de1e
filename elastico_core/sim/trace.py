"""Traces: the trace CSV contract, its validation, and the mapping of trace rows onto the workload zoo.

The contract (DESIGN.md): ``job_id, submit_time_s, duration_s, num_gpus, kind`` (``train`` | ``infer``)
and optional ``workload``, ``user`` and ``queue`` (the job's queue on a cluster with queues, ``default``
when absent). Decisions written down here:

* **Workload mapping.** A row without ``workload`` gets one of the zoo's workloads of its kind, drawn
  from ``np.random.default_rng([seed, crc32(job_id)])``: deterministic for a seed, and independent of
  the other rows (filtering or reordering a trace does not remap its jobs).
* **Data-parallel degree.** The zoo's training workloads run at data-parallel degree 1, 2, 4 or 8; a
  request of ``num_gpus`` GPUs becomes the largest of those <= ``num_gpus`` (a 3-GPU Philly job runs
  on 2, a 16-GPU job on 8). An inference row's ``num_gpus`` becomes, the same way, the upper bound of
  its vLLM tensor-parallel degree (1, 2, 4, 8; one node); its default configuration uses all of it.
* **Work.** ``duration_s`` is how long the job ran in the trace at its requested (default)
  configuration, alone on its GPUs. Its work is ``duration_s x T_default`` where ``T_default`` is the
  isolated throughput of the default configuration at that degree on the cluster's GPU model, so a
  static scheduler that runs it at once reproduces the trace's duration exactly.
* **Floor.** L_j = ``floor_frac x T_default`` (default 0.5): a job may be reshaped or shrunk as long
  as it keeps at least half the speed it asked for.
"""

from __future__ import annotations

import csv
import math
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.job import JobSpec, narrow_space
from elastico_core.model.knobs import Knobs
from elastico_core.model.queues import DEFAULT_QUEUE, QUEUE_NAME
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.catalog import DP_VALUES, PAPER_WORKLOADS
from elastico_core.sim.profiles import ProfileBook
from elastico_core.specs.files import read_text_file

REQUIRED = ("job_id", "submit_time_s", "duration_s", "num_gpus", "kind")
# a trace spans at most ten years: the simulator's series and plots are sized by the span, and a
# submit_time_s of 1e12 asked for 12 GiB before a single job ran
MAX_TRACE_S = 10 * 365 * 86400.0
OPTIONAL = ("workload", "user", "queue")
KINDS = {k.value: k for k in JobKind}


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One row of a trace, after validation and workload mapping."""

    job_id: str
    submit_time_s: float
    duration_s: float  # run time at the default configuration, alone (see module doc)
    num_gpus: int  # as requested in the trace
    kind: JobKind
    workload: str
    user: str = ""
    mapped: bool = False  # the workload was drawn by the seeded mapping, not given
    synthetic: bool = False  # generated (paper-mix inference), not measured
    line: int = 0  # line in the source file (1 = header), 0 when generated
    queue: str = DEFAULT_QUEUE  # its queue, on a cluster with queues (model/queues.py)


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    jobs: tuple[TraceJob, ...]
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def span_s(self) -> float:
        """Time from 0 to the last submission (the measurement window)."""
        return max((j.submit_time_s for j in self.jobs), default=0.0)


def supported_dp(num_gpus: int) -> int:
    """The largest data-parallel degree of the zoo that fits a request of ``num_gpus`` GPUs."""
    return max(d for d in DP_VALUES if d <= max(1, num_gpus))


def map_workload(job_id: str, kind: JobKind, seed: int, zoo: dict[str, Workload] | None = None) -> str:
    """The seeded, order-independent choice of a zoo workload for a row without one."""
    pool = sorted(w.name for w in (zoo or dict(PAPER_WORKLOADS)).values() if w.kind is kind)
    rng = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(job_id.encode())])
    return pool[int(rng.integers(len(pool)))]


def _where(path: str, line: int, job_id: str | None) -> str:
    job = f" (job {job_id!r})" if job_id else ""
    return f"{path}: line {line}{job}"


def _number(raw: str, name: str, where: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SpecError(f"must be a number, got {raw!r}", where=where, field=name) from None
    if not math.isfinite(value):
        raise SpecError(f"must be finite, got {raw!r}", where=where, field=name)
    return value


def parse_rows(rows: Iterable[dict[str, str]], header: Sequence[str], source: str, seed: int) -> Trace:
    """Validate rows of the trace CSV contract; every error names the file, the line and the job."""
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise SpecError(
            f"missing columns {missing}; a trace needs {', '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)})",
            where=source,
        )
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    mapped = 0
    for i, row in enumerate(rows):
        line = i + 2
        job_id = (row.get("job_id") or "").strip()
        where = _where(source, line, job_id or None)
        if not job_id:
            raise SpecError("empty job_id", where=where, field="job_id")
        if job_id in seen:
            raise SpecError(f"duplicate job_id (first on line {seen[job_id]})", where=where, field="job_id")
        seen[job_id] = line
        submit = _number(row.get("submit_time_s", ""), "submit_time_s", where)
        if submit < 0:
            raise SpecError(f"must be >= 0, got {submit:g}", where=where, field="submit_time_s")
        if submit > MAX_TRACE_S:
            raise SpecError(f"must be at most {MAX_TRACE_S:g} s (ten years), got {submit:g}", where=where, field="submit_time_s")
        duration = _number(row.get("duration_s", ""), "duration_s", where)
        if not 0 < duration <= MAX_TRACE_S:
            raise SpecError(f"must be > 0 and at most {MAX_TRACE_S:g} s (ten years), got {duration:g}", where=where,
                            field="duration_s")  # fmt: skip
        gpus_f = _number(row.get("num_gpus", ""), "num_gpus", where)
        if gpus_f != int(gpus_f) or gpus_f < 1:
            raise SpecError(f"must be an integer >= 1, got {row.get('num_gpus')!r}", where=where, field="num_gpus")
        kind_raw = (row.get("kind") or "").strip().lower()
        if kind_raw not in KINDS:
            raise SpecError(f"unknown kind {row.get('kind')!r} (known: {', '.join(KINDS)})", where=where, field="kind")
        kind = KINDS[kind_raw]
        workload = (row.get("workload") or "").strip()
        was_mapped = not workload
        if was_mapped:
            workload = map_workload(job_id, kind, seed)
            mapped += 1
        elif workload not in PAPER_WORKLOADS:
            raise SpecError(f"unknown workload {workload!r} (known: {', '.join(PAPER_WORKLOADS)})", where=where, field="workload")
        elif PAPER_WORKLOADS[workload].kind is not kind:
            raise SpecError(f"workload {workload!r} is a {PAPER_WORKLOADS[workload].kind.value} workload, row says {kind.value}", where=where, field="kind")
        queue = (row.get("queue") or "").strip() or DEFAULT_QUEUE
        if not QUEUE_NAME.match(queue):
            raise SpecError(f"{queue!r} is not a DNS label (lower case letters, digits and '-', at most 63)", where=where, field="queue")
        jobs.append(
            TraceJob(job_id, submit, duration, int(gpus_f), kind, workload, (row.get("user") or "").strip(), was_mapped,
                     line=line, queue=queue)
        )
    notes = (f"{mapped} of {len(jobs)} jobs mapped onto the workload zoo with seed {seed}",) if mapped else ()
    return Trace(Path(source).name, tuple(sorted(jobs, key=lambda j: (j.submit_time_s, j.job_id))), notes)


def load_trace(path: str | Path, seed: int = 0) -> Trace:
    """Read a trace CSV (see module doc); an empty file or one with only a header is an empty trace."""
    p = Path(path)
    text = read_text_file(p, "trace")
    if not text.strip():
        return Trace(p.name, ())
    reader = csv.DictReader(text.splitlines())
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        return parse_rows(_bounded(reader, str(p)), header, str(p), seed)
    except csv.Error as exc:  # e.g. a field past the csv module's own limit
        raise SpecError(f"line {reader.line_num + 1}: not a readable CSV row ({exc})", where=str(p)) from None


MAX_FIELD_CHARS = 1024  # a trace field longer than this is a broken file, not a job name


def _bounded(reader: csv.DictReader[str], where: str) -> Iterator[dict[str, str]]:
    """The rows, refusing a field longer than ``MAX_FIELD_CHARS`` with the line named."""
    for row in reader:
        for key, value in row.items():
            if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
                raise SpecError(f"line {reader.line_num}: longer than {MAX_FIELD_CHARS} characters ({len(value)})",
                                where=where, field=str(key))
        yield row


def write_trace(trace: Trace, path: str | Path) -> Path:
    """Write a trace in the CSV contract (with ``workload`` and ``user`` filled in)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([*REQUIRED, *OPTIONAL])
        for j in trace.jobs:
            w.writerow([j.job_id, f"{j.submit_time_s:.3f}", f"{j.duration_s:.3f}", j.num_gpus, j.kind.value, j.workload, j.user,
                        j.queue])
    return p


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace row turned into what the planner and the simulator need."""

    spec: JobSpec
    trace: TraceJob
    dp: int  # GPUs of the default configuration (data- or tensor-parallel degree)
    default_throughput: float  # T_default, whole job
    norm_work: float  # default GPU-seconds: duration_s x dp (the unit of cluster throughput)
    default_knobs: Knobs  # spec.default_knobs, computed once


def build_jobs(trace: Trace, cluster: Cluster, book: ProfileBook, floor_frac: float = 0.5) -> tuple[SimJob, ...]:
    """JobSpecs for every row (see module doc), or a SpecError naming the first row that cannot run."""
    if not 0.0 <= floor_frac <= 1.0:
        raise SpecError(f"must be in 0..1, got {floor_frac!r}", field="floor_frac")
    total = len(cluster.gpus)
    queues = cluster.queues
    out = []
    for tj in trace.jobs:
        where = _where(trace.name, tj.line, tj.job_id) if tj.line else f"{trace.name}: job {tj.job_id!r}"
        if tj.num_gpus > total:
            raise SpecError(f"asks for {tj.num_gpus} GPUs, the cluster has {total}", where=where, field="num_gpus")
        if queues and queues.index(tj.queue) < 0:
            raise SpecError(f"queue {tj.queue!r} is not a queue of the cluster (queues: {', '.join(queues.names)})",
                            where=where, field="queue")
        w = PAPER_WORKLOADS[tj.workload]
        dp = supported_dp(tj.num_gpus)  # training: data-parallel degree; inference: tensor-parallel bound
        try:
            space = narrow_space(w, {}, dp)
            probe = JobSpec(tj.job_id, w, space, max_gpus=dp)
        except SpecError as exc:
            raise exc.located(where) from None
        prof = book.profile(w, probe.default_knobs)
        if prof is None:
            raise SpecError(f"the default configuration of {w.name} does not fit a {book.gpu.name}", where=where)
        t_default = prof.throughput
        spec = JobSpec(
            id=tj.job_id,
            workload=w,
            knob_space=space,
            floor=floor_frac * t_default,
            weight=1.0,
            work=tj.duration_s * t_default,
            max_gpus=dp,
            submit_time_s=tj.submit_time_s,
            user=tj.user,
            queue=tj.queue,
        )
        out.append(SimJob(spec, tj, dp, t_default, tj.duration_s * dp, probe.default_knobs))
    return tuple(out)
