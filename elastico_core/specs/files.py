"""Parsers for the cluster, job and running-state files (formats documented in the README)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from elastico_core.model.cluster import M_SYS_MIB_DEFAULT, Cluster, Node
from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import gpu_model
from elastico_core.model.job import JobSpec, narrow_space
from elastico_core.model.knobs import ChangeKind, Knobs, KnobSpec, KnobValue
from elastico_core.model.plan import Prices
from elastico_core.model.queues import NO_QUEUES, RECLAIM_EPOCHS_DEFAULT, Amount, QueueSet, QueueSpec, amounts
from elastico_core.model.state import Assignment
from elastico_core.model.workload import InferShape, JobKind, TrainShape, Workload
from elastico_core.rst.catalog import PAPER_WORKLOADS, MemoryAnchors, fit_train_shape

GIB = 1024.0


def _not_bool(value: Any) -> Any:
    """YAML's ``true`` is no count or size (pydantic's lax mode would read it as 1)."""
    if isinstance(value, bool):
        raise ValueError("want a number, got a boolean")
    return value


Number = Annotated[float, Field(allow_inf_nan=False), BeforeValidator(_not_bool)]
Count = Annotated[int, BeforeValidator(_not_bool)]
# documented limits of the input files (README: "Limits"): far above any real cluster or queue, low enough
# that a typo (gpus: 1000000000) is a one-line error instead of gigabytes of node objects
MAX_GPUS_PER_NODE = 64
MAX_NODES = 20_000
MAX_CLUSTER_GPUS = 100_000
MAX_JOBS_PER_FILE = 200_000
MAX_WORKLOADS_PER_FILE = 1_000
MAX_PRIORITY = 2**31 - 1  # the state's priority column is a 32-bit integer
MAX_SUBMIT_TIME_S = 10 * 365 * 86400.0  # ten years of trace time
MAX_LABELS = 64
MAX_LABEL_KEY = 253
MAX_LABEL_VALUE = 1024
MAX_TEXT = 256  # a user, a description's line: names, not documents
Labels = Annotated[
    dict[Annotated[str, Field(min_length=1, max_length=MAX_LABEL_KEY)], Annotated[str, Field(max_length=MAX_LABEL_VALUE)]],
    Field(max_length=MAX_LABELS),
]
MAX_QUEUES = 1_000
# knobs the estimators compute with: their values must be positive integers, flags or a fraction
POSITIVE_INT_KNOBS = ("micro_batch", "max_num_seqs", "max_model_len", "dp")
FLAG_KNOBS = ("checkpointing", "amp", "prefix_caching")
FRACTION_KNOBS = ("gpu_memory_utilization",)
# a queue is named as Kueue names its LocalQueues: a DNS-1123 label (lower case, digits, '-', at most 63)
QUEUE_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class NodeDoc(_Doc):
    name: str
    gpu: str
    gpus: Count = Field(ge=0, le=MAX_GPUS_PER_NODE)
    count: Count = Field(default=1, ge=1, le=MAX_NODES)
    cpu_cores: Number = Field(default=96.0, gt=0)
    host_mem_gib: Number = Field(default=1024.0, gt=0)
    driver: str = "any"
    framework: str = "any"
    labels: Labels = Field(default_factory=dict)


class AmountDoc(_Doc):
    """GPUs and GPU memory of one GPU model in a queue's quota or limit (a limit may leave either out)."""

    gpus: Number | None = Field(default=None, ge=0, le=MAX_CLUSTER_GPUS)
    gpu_memory_gib: Number | None = Field(default=None, ge=0)


AMOUNT_KEYS = frozenset(AmountDoc.model_fields)


class QueueDoc(_Doc):
    """One queue, in Kueue's ClusterQueue vocabulary (README: Queues)."""

    name: str = Field(pattern=QUEUE_NAME)
    cohort: str | None = Field(default=None, pattern=QUEUE_NAME)
    weight: Number = Field(default=1.0, gt=0, le=1e6)
    nominal_quota: dict[str, Any]
    borrowing_limit: dict[str, Any] = Field(default_factory=dict)
    lending_limit: dict[str, Any] = Field(default_factory=dict)


class ClusterDoc(_Doc):
    name: str = "cluster"
    m_sys_mib: Count = Field(default=M_SYS_MIB_DEFAULT, ge=0, le=1 << 20)
    max_jobs_per_gpu: Count = Field(default=2, ge=1, le=8)
    nodes: list[NodeDoc] = Field(max_length=MAX_NODES)
    queues: list[QueueDoc] = Field(default_factory=list, max_length=MAX_QUEUES)
    reclaim_epochs: int = Field(default=RECLAIM_EPOCHS_DEFAULT, ge=1, le=1000)


class ClusterFile(_Doc):
    cluster: ClusterDoc


class KnobDoc(_Doc):
    values: list[KnobValue] = Field(min_length=1)
    change: Literal["flag-toggle", "engine-restart", "checkpoint-resume"] = "checkpoint-resume"


class WorkloadDoc(_Doc):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-_]*$")
    kind: Literal["train", "infer"]
    params: Count = Field(gt=0, le=10**15)
    knobs: dict[str, list[KnobValue] | KnobDoc]
    defaults: dict[str, KnobValue] = Field(default_factory=dict)
    unit: str = ""
    description: str = ""
    shape: dict[str, Any] = Field(default_factory=dict)
    # a training workload's model builder, ``package.module:function`` returning a zoo Task: traced like the catalog's
    model: str = Field(default="", pattern=r"^([A-Za-z_][\w.]*:[A-Za-z_]\w*)?$")


class JobDoc(_Doc):
    id: str
    workload: str
    floor: Number = Field(default=0.0, ge=0)
    weight: Number = Field(default=1.0, gt=0)
    work: Number | None = Field(default=None, gt=0)
    gpus: Count = Field(default=1, ge=1, le=1024)
    knobs: dict[str, list[KnobValue] | KnobValue] = Field(default_factory=dict)
    submit_time_s: Number = Field(default=0.0, ge=0, le=MAX_SUBMIT_TIME_S)
    user: str = Field(default="", max_length=MAX_TEXT)
    queue: str = Field(default="default", pattern=QUEUE_NAME)
    priority: Count = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    labels: Labels = Field(default_factory=dict)

    @field_validator("knobs")
    @classmethod
    def _no_empty(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name, values in v.items():
            if isinstance(values, list) and not values:
                raise ValueError(f"empty knob space for {name!r}")
        return v


class JobsFile(_Doc):
    workloads: list[WorkloadDoc] = Field(default_factory=list, max_length=MAX_WORKLOADS_PER_FILE)
    jobs: list[JobDoc] = Field(max_length=MAX_JOBS_PER_FILE)


class AssignmentDoc(_Doc):
    id: str
    knobs: dict[str, KnobValue]
    gpus: list[str] = Field(min_length=1)


class RunningFile(_Doc):
    jobs: list[AssignmentDoc] = Field(default_factory=list)
    prices: dict[str, Number] = Field(default_factory=dict)


# ---- helpers ---------------------------------------------------------------------------------


def read_text_file(path: Path, what: str = "") -> str:
    """A file's text as UTF-8; unreadable or undecodable, one SpecError naming the file (and line)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"cannot read{' ' + what if what else ''}: {exc.strerror}", where=str(path)) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SpecError(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}", where=str(path)) from None


def _load_text(path: Path) -> str:
    return read_text_file(path)


class _UniqueKeys(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser when the wheel has it (10-20x faster on a 100k-job file), the pure-Python one
    otherwise; a key given twice in one mapping is an error (YAML says keys are unique, PyYAML keeps the last)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base constructor says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {str(key)[:80]!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


SAFE_LOADER: Any = _UniqueKeys


def parse_yaml(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"malformed YAML{at}: {problem}", where=where) from None


_ITEM_KINDS = {"jobs": "job", "nodes": "node", "workloads": "workload", "queues": "queue"}


def _validation_error(exc: ValidationError, raw: Any, where: str, section: str, kind: str) -> SpecError:
    """Turn pydantic's first error into one line naming the object (by id or name) and the field."""
    err = exc.errors()[0]
    loc = list(err["loc"])
    obj = where
    node: Any = raw
    field_parts: list[str] = []
    i = 0
    while i < len(loc):
        part = loc[i]
        nxt = loc[i + 1] if i + 1 < len(loc) else None
        if isinstance(part, str) and isinstance(nxt, int) and isinstance(node, Mapping) and isinstance(node.get(part), list):
            items = node[part]
            item = items[nxt] if nxt < len(items) else None
            label = _ITEM_KINDS.get(part, kind if part == section else part)
            ident = (item.get("id") or item.get("name")) if isinstance(item, Mapping) else None
            obj = f"{where}: {label} {ident!r}" if ident else f"{where}: {label} #{nxt + 1}"
            field_parts = []
            node = item
            i += 2
            continue
        field_parts.append(str(part))
        node = node.get(part) if isinstance(node, Mapping) else None
        i += 1
    if field_parts and field_parts[0] in ("cluster",) and len(field_parts) > 1:
        field_parts = field_parts[1:]
    field = ".".join(field_parts) or None
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") == QUEUE_NAME:
        msg = f"{err.get('input')!r} is not a DNS label (lower case letters, digits and '-', at most 63: Kueue's queue names)"
    return SpecError(msg, where=obj, field=field)


def _parse(model: type[_Doc], raw: Any, where: str, section: str, kind: str) -> Any:
    if not isinstance(raw, Mapping):
        raise SpecError(f"expected a mapping with a {section!r} key, got {type(raw).__name__}", where=where)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(exc, raw, where, section, kind) from None


# ---- cluster ---------------------------------------------------------------------------------


def parse_cluster(text: str, where: str = "cluster") -> Cluster:
    raw = parse_yaml(text, where)
    doc: ClusterFile = _parse(ClusterFile, raw, where, "cluster", "cluster")
    c = doc.cluster
    n_nodes = sum(nd.count for nd in c.nodes)
    n_gpus = sum(nd.count * nd.gpus for nd in c.nodes)
    if n_nodes > MAX_NODES:
        raise SpecError(f"{n_nodes} nodes in all; the limit is {MAX_NODES}", where=where, field="nodes")
    if n_gpus > MAX_CLUSTER_GPUS:
        raise SpecError(f"{n_gpus} GPUs in all; the limit is {MAX_CLUSTER_GPUS}", where=where, field="nodes")
    nodes: list[Node] = []
    for i, nd in enumerate(c.nodes):
        at = f"{where}: node {nd.name!r}"
        try:
            model = gpu_model(nd.gpu)
        except SpecError as exc:
            raise exc.located(at) from None
        names = [nd.name] if nd.count == 1 else [f"{nd.name}-{k}" for k in range(nd.count)]
        for name in names:
            try:
                nodes.append(
                    Node(
                        name=name,
                        gpu=model,
                        gpu_count=nd.gpus,
                        cpu_cores=nd.cpu_cores,
                        host_mem_mib=nd.host_mem_gib * GIB,
                        driver=nd.driver,
                        framework=nd.framework,
                        labels=tuple(sorted(nd.labels.items())),
                    )
                )
            except SpecError as exc:
                raise SpecError(exc.message, where=f"{where}: node #{i + 1}", field=exc.field) from None
    usable = {n.gpu.name: float(n.gpu.memory_mib - c.m_sys_mib) for n in nodes if n.gpu_count}
    parsed = tuple(_queue(q, usable, where) for q in c.queues)
    try:
        queues = QueueSet(parsed, c.reclaim_epochs) if c.queues else NO_QUEUES
    except SpecError as exc:
        raise SpecError(exc.message, where=where, field=exc.field) from None
    try:
        return Cluster(c.name, tuple(nodes), m_sys_mib=c.m_sys_mib, max_jobs_per_gpu=c.max_jobs_per_gpu, queues=queues)
    except SpecError as exc:
        raise SpecError(exc.message, where=where, field=exc.field) from None


def _queue(q: QueueDoc, usable_mib: Mapping[str, float], where: str) -> QueueSpec:
    """A queue document as a ``QueueSpec``: per-model amounts, memory defaults filled in (README: Queues).

    A quota or limit is either ``{gpus, gpu_memory_gib}`` (a cluster of one GPU model) or a mapping from GPU
    model to those. A nominal quota without memory holds its GPUs' whole memory; a borrowing limit without
    one limits GPUs only; a lending limit without one lends the memory of the GPUs it lends.
    """
    at = f"{where}: queue {q.name!r}"

    def per_model(raw: Mapping[str, Any], name: str) -> dict[str, AmountDoc]:
        if not raw:
            return {}
        if set(raw) <= AMOUNT_KEYS:  # the one-model shorthand
            if len(usable_mib) != 1:
                raise SpecError(f"the cluster has several GPU models ({', '.join(usable_mib)}): name the model, "
                                f"as {{{next(iter(usable_mib))}: {{gpus: N}}}}", where=at, field=name)
            raw = {next(iter(usable_mib)): raw}
        out: dict[str, AmountDoc] = {}
        for key, value in raw.items():
            try:
                model = gpu_model(str(key)).name
            except SpecError:
                raise SpecError(f"{key!r} is neither a GPU model of the cluster ({', '.join(usable_mib)}) nor gpus or "
                                "gpu_memory_gib", where=at, field=name) from None
            if model not in usable_mib:
                raise SpecError(f"GPU model {model!r} is not in the cluster (models: {', '.join(usable_mib)})",
                                where=at, field=name)
            if not isinstance(value, Mapping):
                raise SpecError(f"expected {{gpus: N, gpu_memory_gib: M}}, got {value!r}", where=at, field=f"{name}.{model}")
            try:
                out[model] = AmountDoc.model_validate(value)
            except ValidationError as exc:
                err = exc.errors()[0]
                sub = ".".join(str(p) for p in err["loc"])
                msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
                raise SpecError(msg, where=at, field=f"{name}.{model}.{sub}") from None
        return out

    nominal: dict[str, Amount] = {}
    for model, a in per_model(q.nominal_quota, "nominal_quota").items():
        if a.gpus is None:
            raise SpecError("a nominal quota names its GPUs", where=at, field=f"nominal_quota.{model}.gpus")
        mem = a.gpu_memory_gib if a.gpu_memory_gib is not None else a.gpus * usable_mib[model] / GIB
        nominal[model] = Amount(float(a.gpus), float(mem))
    borrowing = {
        m: Amount(math.inf if a.gpus is None else float(a.gpus), math.inf if a.gpu_memory_gib is None else float(a.gpu_memory_gib))
        for m, a in per_model(q.borrowing_limit, "borrowing_limit").items()
    }
    lending: dict[str, Amount] = {}
    for model, a in per_model(q.lending_limit, "lending_limit").items():
        mine = nominal.get(model, Amount(0.0, 0.0))
        gpus = mine.gpus if a.gpus is None else float(a.gpus)
        share = gpus / mine.gpus if mine.gpus > 0 else 0.0
        lending[model] = Amount(gpus, mine.memory_gib * min(1.0, share) if a.gpu_memory_gib is None else float(a.gpu_memory_gib))
    try:
        return QueueSpec(q.name, amounts(nominal), q.cohort, float(q.weight), amounts(borrowing), amounts(lending))
    except SpecError as exc:
        raise SpecError(exc.message, where=at, field=exc.field) from None


def load_cluster(path: str | Path) -> Cluster:
    p = Path(path)
    return parse_cluster(_load_text(p), str(p))


# ---- workloads and jobs ----------------------------------------------------------------------

_KNOWN_CHANGES = {
    "prefix_caching": ChangeKind.FLAG_TOGGLE,
    "max_num_seqs": ChangeKind.ENGINE_RESTART,
    "max_model_len": ChangeKind.ENGINE_RESTART,
    "gpu_memory_utilization": ChangeKind.ENGINE_RESTART,
}
_CHANGE_NAMES = {k.label: k for k in ChangeKind}


def knob_value_problem(name: str, value: object) -> str | None:
    """Why a custom workload's knob value cannot be computed with, or None."""
    if isinstance(value, str):
        return f"knob values are numbers or booleans, got the string {value!r}"
    if name in FLAG_KNOBS:
        return None if isinstance(value, bool) else f"is a flag (true/false), got {value!r}"
    if isinstance(value, bool):
        return None if name not in (*POSITIVE_INT_KNOBS, *FRACTION_KNOBS) else f"is a number, got {value!r}"
    if name in POSITIVE_INT_KNOBS and (not isinstance(value, int) or value <= 0):
        return f"values are positive integers, got {value!r}"
    if name in FRACTION_KNOBS and not (isinstance(value, (int, float)) and 0 < value <= 1):
        return f"values are fractions in (0, 1], got {value!r}"
    if isinstance(value, (int, float)) and not value > 0:
        return f"values are positive numbers, got {value!r}"
    return None


def build_workload(doc: WorkloadDoc, where: str) -> Workload:
    at = f"{where}: workload {doc.name!r}"
    specs = []
    for name, value in [*((n, v) for n, raw in doc.knobs.items()
                          for v in (raw.values if isinstance(raw, KnobDoc) else raw)), *doc.defaults.items()]:
        if (why := knob_value_problem(name, value)) is not None:
            raise SpecError(why, where=at, field=f"knobs.{name}")
    for name, raw in doc.knobs.items():
        if isinstance(raw, KnobDoc):
            values, change = tuple(raw.values), _CHANGE_NAMES[raw.change]
        else:
            values, change = tuple(raw), _KNOWN_CHANGES.get(name, ChangeKind.CHECKPOINT_RESUME)
        try:
            specs.append(KnobSpec(name, values, change))
        except SpecError as exc:
            raise exc.located(at) from None
    kind = JobKind(doc.kind)
    required = ("micro_batch",) if kind is JobKind.TRAIN else ("max_num_seqs", "max_model_len", "gpu_memory_utilization")
    missing = [r for r in required if r not in doc.knobs]
    if missing:
        raise SpecError(f"a {kind.value} workload needs the knobs {missing} for its estimator", where=at, field="knobs")
    defaults: dict[str, KnobValue] = {s.name: s.values[-1] for s in specs}
    if kind is JobKind.TRAIN:
        defaults.update({k: False for k in ("checkpointing", "amp") if k in doc.knobs})
        if "dp" in doc.knobs:
            defaults["dp"] = 1
    elif "prefix_caching" in doc.knobs:
        defaults["prefix_caching"] = False
    defaults.update(doc.defaults)
    shape_raw = dict(doc.shape)
    for key, value in shape_raw.items():
        if key != "memory_gib" and (why := _shape_value_problem(value)) is not None:
            raise SpecError(why, where=at, field=f"shape.{key}")
    try:
        if kind is JobKind.TRAIN:
            mem = shape_raw.pop("memory_gib", None)
            base = TrainShape(**{"act_gib_per_sample": 0.0, "runtime_gib": 0.0, "gflops_per_sample": 10.0, **shape_raw})
            if mem is not None:
                if not (isinstance(mem, list) and len(mem) == 2 and all(isinstance(x, (int, float)) for x in mem)):
                    raise SpecError("memory_gib is [min, max] on A100-40GB", where=at, field="shape.memory_gib")
                if not 0 < mem[0] < mem[1]:
                    raise SpecError(f"memory_gib is [min, max] GiB with 0 < min < max, got {mem}", where=at,
                                    field="shape.memory_gib")
                grid = tuple(sorted(int(v) for v in next(s for s in specs if s.name == "micro_batch").values))
                try:
                    shape: TrainShape | InferShape = fit_train_shape(
                        base, doc.params, grid, MemoryAnchors(float(mem[0]), float(mem[1])))
                except SpecError as exc:
                    raise SpecError(exc.message, where=at, field="shape.memory_gib") from None
            elif base.act_gib_per_sample <= 0:
                raise SpecError("give shape.memory_gib [min, max] or act_gib_per_sample and runtime_gib", where=at, field="shape")
            else:
                shape = base
        else:
            shape = InferShape(**shape_raw)
    except TypeError as exc:
        raise SpecError(f"unknown shape field ({exc})", where=at, field="shape") from None
    try:
        workload = Workload(doc.name, kind, doc.params, tuple(specs), Knobs.of(defaults), shape, doc.unit, doc.description,
                            model=doc.model)  # fmt: skip
    except SpecError as exc:
        raise exc.located(at) from None
    _check_estimable(workload, at)
    return workload


def _shape_value_problem(value: object) -> str | None:
    """A shape figure is a finite number >= 0 (the estimators multiply and divide with it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"want a number, got {type(value).__name__} {str(value)[:40]!r}"
    if not math.isfinite(value) or value < 0 or abs(value) > 1e15:
        return f"want a finite number >= 0 (at most 1e15), got {value!r}"
    return None


def _check_estimable(workload: Workload, at: str) -> None:
    """Evaluate the estimators once per GPU model at the workload's defaults: a shape they cannot compute
    with is the workload's own defect, said now at submit, not found by the controller later."""
    from elastico_core.model.hardware import KNOWN_GPUS
    from elastico_core.rst.estimators import estimate

    for model in KNOWN_GPUS.values():
        try:
            p = estimate(workload, workload.defaults, model)
        except SpecError as exc:
            raise exc.located(at) from None
        except (ArithmeticError, ValueError, TypeError) as exc:
            raise SpecError(f"the estimators cannot compute with this shape ({type(exc).__name__}: {str(exc)[:120]})",
                            where=at, field="shape") from None  # fmt: skip
        if p is not None and not (math.isfinite(p.throughput) and p.throughput > 0):
            raise SpecError(f"the estimators give a throughput of {p.throughput!r} on {model.name}", where=at, field="shape")


def parse_jobs(
    text: str, where: str = "jobs", workloads: Mapping[str, Workload] | None = None
) -> tuple[tuple[JobSpec, ...], dict[str, Workload]]:
    """Jobs (and the custom workloads declared beside them) from a job YAML document."""
    return parse_jobs_document(parse_yaml(text, where), where, workloads)


def parse_jobs_document(
    raw: Any, where: str = "jobs", workloads: Mapping[str, Workload] | None = None
) -> tuple[tuple[JobSpec, ...], dict[str, Workload]]:
    """``parse_jobs`` on an already parsed document (a mapping with ``jobs`` and ``workloads``)."""
    doc: JobsFile = _parse(JobsFile, raw, where, "jobs", "job")
    known: dict[str, Workload] = dict(workloads or PAPER_WORKLOADS)
    for wd in doc.workloads:
        if wd.name in known:
            raise SpecError("a workload of this name already exists", where=f"{where}: workload {wd.name!r}", field="name")
        known[wd.name] = build_workload(wd, where)
    jobs: list[JobSpec] = []
    seen: set[str] = set()
    for jd in doc.jobs:
        at = f"{where}: job {jd.id!r}"
        if jd.id in seen:
            raise SpecError("duplicate job id", where=at, field="id")
        seen.add(jd.id)
        workload = known.get(jd.workload)
        if workload is None:
            raise SpecError(f"unknown workload {jd.workload!r} (known: {', '.join(sorted(known))})", where=at, field="workload")
        try:
            space = narrow_space(workload, jd.knobs, jd.gpus)
            jobs.append(
                JobSpec(
                    id=jd.id,
                    workload=workload,
                    knob_space=space,
                    floor=jd.floor,
                    weight=jd.weight,
                    work=jd.work if jd.work is not None else math.inf,
                    max_gpus=jd.gpus,
                    submit_time_s=jd.submit_time_s,
                    user=jd.user,
                    queue=jd.queue,
                    priority=jd.priority,
                    labels=tuple(sorted(jd.labels.items())),
                )
            )
        except SpecError as exc:
            raise SpecError(exc.message, where=at, field=exc.field) from None
    return tuple(jobs), known


def load_jobs(path: str | Path, workloads: Mapping[str, Workload] | None = None) -> tuple[tuple[JobSpec, ...], dict[str, Workload]]:
    p = Path(path)
    return parse_jobs(_load_text(p), str(p), workloads)


# ---- running state ---------------------------------------------------------------------------


def parse_running(
    text: str, where: str, jobs: Sequence[JobSpec], cluster: Cluster
) -> tuple[dict[str, Assignment], Prices | None]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", where=where) from None
    doc: RunningFile = _parse(RunningFile, raw, where, "jobs", "running job")
    by_id = {j.id: j for j in jobs}
    gpu_ids = {g.id for g in cluster.gpus}
    out: dict[str, Assignment] = {}
    for ad in doc.jobs:
        at = f"{where}: running job {ad.id!r}"
        job = by_id.get(ad.id)
        if job is None:
            raise SpecError("not in the job file", where=at, field="id")
        unknown = [g for g in ad.gpus if g not in gpu_ids]
        if unknown:
            raise SpecError(f"GPUs {unknown} are not in the cluster", where=at, field="gpus")
        names = {s.name for s in job.knob_space}
        extra = sorted(set(ad.knobs) - names)
        if extra:
            raise SpecError(f"unknown knobs {extra}", where=at, field="knobs")
        out[ad.id] = Assignment(ad.id, Knobs.of(ad.knobs), tuple(ad.gpus))
    prices = Prices.of(doc.prices) if doc.prices else None
    return out, prices


def load_running(path: str | Path, jobs: Sequence[JobSpec], cluster: Cluster) -> tuple[dict[str, Assignment], Prices | None]:
    p = Path(path)
    return parse_running(_load_text(p), str(p), jobs, cluster)
