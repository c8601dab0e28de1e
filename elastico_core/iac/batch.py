"""Per-job feature blocks of candidate pairs, as columns (the 14 per-job features of §3.3.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from elastico_core.model.profile import Profile
from elastico_core.model.workload import InferShape, JobKind, Workload

PER_JOB_FEATURES: tuple[str, ...] = (
    # hardware (5)
    "sm_active",
    "sm_occupancy",
    "dram_active",
    "fb_used_mb",
    "tensor_active",
    # common (3)
    "is_infer",
    "log_params",
    "throughput",
    # training (3)
    "micro_batch",
    "checkpointing",
    "amp",
    # inference (3)
    "isl",
    "osl",
    "prefix_ratio",
)


@dataclass(frozen=True, slots=True)
class ProfileBatch:
    """N job configurations as columns; ``workload`` names them for table-based predictors.

    Hardware counters may be NaN (unknown); the learned predictor imputes them.
    """

    workload: np.ndarray  # str (object) array
    knobs_key: np.ndarray  # canonical knob JSON (object) array
    values: np.ndarray  # float64, shape (N, 14), columns PER_JOB_FEATURES

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def column(self, name: str) -> np.ndarray:
        return self.values[:, PER_JOB_FEATURES.index(name)]

    def take(self, index: np.ndarray) -> ProfileBatch:
        return ProfileBatch(self.workload[index], self.knobs_key[index], self.values[index])


@dataclass(frozen=True, slots=True)
class PairBatch:
    """Candidate co-locations: row i pairs ``a[i]`` (whose slowdown is asked) with ``b[i]``."""

    a: ProfileBatch
    b: ProfileBatch
    gpu_mem_mib: np.ndarray  # device memory of the GPU they would share

    def __len__(self) -> int:
        return len(self.a)

    def swapped(self) -> PairBatch:
        return PairBatch(self.b, self.a, self.gpu_mem_mib)


def feature_row(workload: Workload, profile: Profile) -> list[float]:
    """The 14 per-job features of one configuration (training fields 0 for inference and back)."""
    c = profile.counters
    knobs = profile.knobs
    is_infer = workload.kind is JobKind.INFER
    if is_infer:
        shape = workload.shape
        assert isinstance(shape, InferShape)
        max_len = int(knobs.get("max_model_len", shape.input_tokens + shape.output_tokens) or 0)
        total = min(shape.input_tokens + shape.output_tokens, max_len) if max_len else shape.input_tokens + shape.output_tokens
        osl = float(min(shape.output_tokens, total))
        isl = float(max(1, total - shape.output_tokens))
        prefix = shape.prefix_share if bool(knobs.get("prefix_caching", False)) else 0.0
        mb, ck, amp = 0.0, 0.0, 0.0
    else:
        isl = osl = prefix = 0.0
        mb = float(knobs.get("micro_batch", 0) or 0)
        ck = float(bool(knobs.get("checkpointing", False)))
        amp = float(bool(knobs.get("amp", False)))
    return [
        c.sm_active,
        c.sm_occupancy,
        c.dram_active,
        c.fb_used_mb,
        c.tensor_active,
        float(is_infer),
        math.log10(workload.params),
        profile.throughput,
        mb,
        ck,
        amp,
        isl,
        osl,
        prefix,
    ]


def profile_batch(items: Sequence[tuple[Workload, Profile]]) -> ProfileBatch:
    values = np.array([feature_row(w, p) for w, p in items], dtype=np.float64).reshape(len(items), len(PER_JOB_FEATURES))
    return ProfileBatch(
        workload=np.array([w.name for w, _ in items], dtype=object),
        knobs_key=np.array([p.knobs.to_json() for _, p in items], dtype=object),
        values=values,
    )
