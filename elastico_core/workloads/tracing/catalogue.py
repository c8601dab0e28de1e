"""Trace every configuration of the catalog that has no current trace, and cache each as it is traced.

A training workload's configurations are its micro-batch, checkpointing and AMP grids (the
data-parallel degree changes no GPU's traced figures: its gradient buckets are added by the estimate);
an inference workload is traced once, from its model config. A cached trace is current when its digest
equals the digest of the code now (``digest``): a change to a workload's module, to the shared zoo
code, to the tracer or to torch re-traces that workload, nothing else.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from elastico_core.model.traced import InferTrace, TrainTrace
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.traced import TracedCache
from elastico_core.workloads.scale import Scale
from elastico_core.workloads.tracing.builders import resolve_builder
from elastico_core.workloads.tracing.digest import training_digest
from elastico_core.workloads.tracing.infer import MODEL_CONFIGS, inference_digest, trace_inference
from elastico_core.workloads.tracing.train import trace_training
from elastico_core.workloads.zoo import module_of

ZOO = ("resnet50", "bert", "dcgan", "pointnet", "transformer", "lstm", "ncf", "ppo")  # zoo.build_task's workloads
TrainConfig = tuple[int, bool, bool]  # micro-batch, checkpointing, amp


@dataclass(frozen=True, slots=True)
class Job:
    """One trace to take: a training configuration, or an inference model (``config`` None)."""

    workload: Workload
    config: TrainConfig | None

    @property
    def label(self) -> str:
        if self.config is None:
            return f"{self.workload.name} (model config)"
        mb, ck, amp = self.config
        return f"{self.workload.name} mb={mb}" + (" ck" if ck else "") + (" amp" if amp else "")


@dataclass(frozen=True, slots=True)
class CatalogueResult:
    traced: tuple[TrainTrace | InferTrace, ...]
    current: int  # already cached with the current digest
    seconds: float
    cpu_seconds: float


def train_configs(workload: Workload) -> list[TrainConfig]:
    grid = {k.name: k.values for k in workload.knobs}
    return [(int(mb), bool(ck), bool(amp)) for mb, ck, amp in
            itertools.product(grid["micro_batch"], grid.get("checkpointing", (False,)), grid.get("amp", (False,)))]  # fmt: skip


def jobs(workloads: Iterable[Workload]) -> Iterator[Job]:
    for w in workloads:
        if w.kind is JobKind.TRAIN and (w.model or w.name in ZOO):
            yield from (Job(w, c) for c in train_configs(w))
        elif w.name in MODEL_CONFIGS:
            yield Job(w, None)


def code_digest(workload: Workload) -> str:
    """The digest a current trace of ``workload`` carries (its code, the tracer's, torch's)."""
    if workload.kind is not JobKind.TRAIN:
        return inference_digest(workload.name)
    return training_digest(resolve_builder(workload.model)[1] if workload.model else module_of(workload.name))


def is_current(job: Job, cache: TracedCache, scale: Scale, digests: dict[str, str]) -> bool:
    name = job.workload.name
    trace: TrainTrace | InferTrace | None
    if job.config is None:
        trace = cache.infer_trace(name)
    else:
        trace = cache.train_trace(name, *job.config, scale=scale.value)
    if name not in digests:
        digests[name] = code_digest(job.workload)
    return trace is not None and trace.digest == digests[name]


def trace_catalogue(
    workloads: Iterable[Workload],
    cache: TracedCache,
    *,
    scale: Scale = Scale.FULL,
    force: bool = False,
    on_start: Callable[[int], None] = lambda total: None,
    on_done: Callable[[Job, TrainTrace | InferTrace], None] = lambda job, trace: None,
) -> CatalogueResult:
    """Trace what is missing or stale (everything with ``force``), writing each trace as soon as it is taken."""
    t0, c0 = time.perf_counter(), time.process_time()
    digests: dict[str, str] = {}
    todo, current = [], 0
    for job in jobs(workloads):
        if not force and is_current(job, cache, scale, digests):
            current += 1
        else:
            todo.append(job)
    on_start(len(todo))
    traced: list[TrainTrace | InferTrace] = []
    for job in todo:
        if job.config is None:
            infer = trace_inference(job.workload.name)
            cache.write(infer=[infer])
            traced.append(infer)
            on_done(job, infer)
        else:
            train = trace_training(job.workload.name, *job.config, scale=scale, model=job.workload.model)
            cache.write(train=[train])
            traced.append(train)
            on_done(job, train)
    return CatalogueResult(tuple(traced), current, time.perf_counter() - t0, time.process_time() - c0)
