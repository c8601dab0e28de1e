"""Train the CPU engine's byte-level LM on the bundled sonnets and save it (weights + ``lm.json``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from elastico_core.workloads.lm.corpus import corpus_bytes, corpus_sha256
from elastico_core.workloads.lm.model import LM_SCALES, ByteLM, save_lm
from elastico_core.workloads.scale import Scale

DEFAULT_STEPS = {Scale.TINY: 400, Scale.SMALL: 1500, Scale.FULL: 3000}


@dataclass(frozen=True, slots=True)
class BuildResult:
    folder: Path
    params: int
    steps: int
    loss: float  # mean cross-entropy (nats/byte) over the last 20 steps
    seconds: float


def build_lm(
    folder: Path, scale: Scale, *, steps: int | None = None, batch: int = 16, seed: int = 0, lr: float = 3e-3
) -> BuildResult:
    """Deterministic for a given (scale, steps, batch, seed) on one machine; AdamW with cosine decay."""
    cfg = LM_SCALES[scale]
    steps = steps or DEFAULT_STEPS[scale]
    torch.manual_seed(seed)
    data = torch.tensor(list(corpus_bytes()), dtype=torch.long)
    window = min(cfg.context, len(data) - 1)
    model = ByteLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    recent: list[float] = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        start = torch.randint(0, len(data) - window - 1, (batch,), generator=gen)
        idx = start[:, None] + torch.arange(window + 1)
        chunk = data[idx]
        logits = model(chunk[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = [*recent[-19:], float(loss.detach())]
    seconds = time.perf_counter() - t0
    final = sum(recent) / len(recent)
    save_lm(
        model,
        folder,
        {"scale": scale.value, "steps": steps, "batch": batch, "seed": seed, "loss": round(final, 4),
         "corpus": "Shakespeare, sonnets 18, 116, 29, 73, 130 (public domain)", "corpus_sha256": corpus_sha256()},
    )  # fmt: skip
    return BuildResult(folder, model.param_count(), steps, final, seconds)
