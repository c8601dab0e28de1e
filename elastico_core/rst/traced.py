"""The traced cache: what tracing the workloads' code found, kept beside the profile store.

One JSON object per line in ``<profiles>/traced/training.jsonl`` (one per workload, scale, micro-batch,
checkpointing, AMP) and ``<profiles>/traced/inference.jsonl`` (one per vLLM model), each with
``source: "traced"`` and the digest of the code it was traced from. JSON lines, not parquet, because
gpucheck reads it on a bare CUDA image (standard library only), and because it is small (a few hundred
rows) and diffs well. A line that cannot be read is reported and left out, never fatal: the parametric
estimator fills in for it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from elastico_core.model.errors import SpecError
from elastico_core.model.traced import TRACED, InferTrace, TrainTrace, WorkGroup

TRAINING_FILE = "training.jsonl"
INFERENCE_FILE = "inference.jsonl"
FOLDER = "traced"
TrainKey = tuple[str, str, int, bool, bool]  # workload, scale, micro-batch, checkpointing, amp


def train_key(t: TrainTrace) -> TrainKey:
    return (t.workload, t.scale, t.micro_batch, t.checkpointing, t.amp)


def _to_json(obj: TrainTrace | InferTrace) -> str:
    return json.dumps(asdict(obj), sort_keys=True, separators=(",", ":"))


def _check(name: str, cls: type, raw: Mapping[str, Any]) -> dict[str, Any]:
    want = {f.name for f in fields(cls)}
    missing = sorted(want - set(raw) - {"source"})
    if missing:
        raise ValueError(f"missing fields {missing}")
    if raw.get("source", TRACED) != TRACED:
        raise ValueError(f"source {raw.get('source')!r} is not {TRACED!r}")
    out = {k: raw[k] for k in want if k in raw}
    for k, v in out.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{k} is not a finite number")
        if k.endswith("_bytes") and (not isinstance(v, int) or v < 0):
            raise ValueError(f"{k} must be a non-negative integer, got {v!r}")
    return out


def train_trace_from(raw: Mapping[str, Any]) -> TrainTrace:
    data = _check("training", TrainTrace, raw)
    data["work"] = tuple(WorkGroup(**w) for w in data["work"])
    return TrainTrace(**data)


def infer_trace_from(raw: Mapping[str, Any]) -> InferTrace:
    return InferTrace(**_check("inference", InferTrace, raw))


@dataclass
class TracedCache:
    """Training and inference traces of one profile store (``<root>/traced``)."""

    root: Path  # the profile store's folder
    problems: list[SpecError] = field(default_factory=list)
    _train: dict[TrainKey, TrainTrace] | None = field(default=None, repr=False)
    _infer: dict[str, InferTrace] | None = field(default=None, repr=False)

    @property
    def folder(self) -> Path:
        return self.root / FOLDER

    def _read(self, name: str) -> list[tuple[int, dict[str, Any]]]:
        path = self.folder / name
        if not path.is_file():
            return []
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                self.problems.append(SpecError(f"line {n}: not a trace ({str(exc)[:80]}); left out", where=str(path)))
                continue
            rows.append((n, obj))
        return rows

    def training(self) -> dict[TrainKey, TrainTrace]:
        if self._train is None:
            self._train = {}
            for n, raw in self._read(TRAINING_FILE):
                try:
                    t = train_trace_from(raw)
                except (TypeError, ValueError) as exc:
                    self.problems.append(SpecError(f"line {n}: {exc}; left out", where=str(self.folder / TRAINING_FILE)))
                    continue
                self._train[train_key(t)] = t
        return self._train

    def inference(self) -> dict[str, InferTrace]:
        if self._infer is None:
            self._infer = {}
            for n, raw in self._read(INFERENCE_FILE):
                try:
                    t = infer_trace_from(raw)
                except (TypeError, ValueError) as exc:
                    self.problems.append(SpecError(f"line {n}: {exc}; left out", where=str(self.folder / INFERENCE_FILE)))
                    continue
                self._infer[t.workload] = t
        return self._infer

    def train_trace(self, workload: str, micro_batch: int, checkpointing: bool, amp: bool, scale: str = "full") -> TrainTrace | None:
        return self.training().get((workload, scale, micro_batch, checkpointing, amp))

    def infer_trace(self, workload: str) -> InferTrace | None:
        return self.inference().get(workload)

    def write(self, train: Iterable[TrainTrace] = (), infer: Iterable[InferTrace] = ()) -> int:
        """Insert or replace traces (same key); returns how many were written. Atomic per file."""
        train, infer = list(train), list(infer)
        merged_t = {**self.training(), **{train_key(t): t for t in train}}
        merged_i = {**self.inference(), **{t.workload: t for t in infer}}
        self.folder.mkdir(parents=True, exist_ok=True)
        if train:
            _atomic_lines(self.folder / TRAINING_FILE, (_to_json(t) for _, t in sorted(merged_t.items())))
        if infer:
            _atomic_lines(self.folder / INFERENCE_FILE, (_to_json(t) for _, t in sorted(merged_i.items())))
        self._train, self._infer = merged_t, merged_i
        return len(train) + len(infer)


def _atomic_lines(path: Path, lines: Iterable[str]) -> None:
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)
