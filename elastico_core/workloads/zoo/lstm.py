"""A 2-layer LSTM language model (the "large" PTB model: hidden 1500, vocabulary 10k, 35 steps)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, Task


@dataclass(frozen=True, slots=True)
class LstmConfig:
    vocab: int
    hidden: int
    layers: int
    seq: int


SCALES = {
    Scale.TINY: LstmConfig(128, 32, 2, 16),
    Scale.SMALL: LstmConfig(2000, 256, 2, 35),
    Scale.FULL: LstmConfig(10000, 1500, 2, 35),
}


_CPU_BF16_RNN = torch.backends.cpu.get_cpu_capability().startswith("AVX512")


class LstmLayer(nn.Module):
    """One LSTM layer over the whole sequence (the unit activation checkpointing recomputes)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.drop = nn.Dropout(0.2)

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu") and not _CPU_BF16_RNN:
            # oneDNN has no BF16 LSTM kernel below AVX-512 (it fails to build the primitive): the
            # recurrence runs in FP32 there, the rest of the model stays under autocast
            with torch.autocast("cpu", enabled=False):
                out, _ = self.lstm(x.float())
        else:
            out, _ = self.lstm(x)
        return self.drop(out)


class LstmLM(nn.Module):
    def __init__(self, cfg: LstmConfig) -> None:
        super().__init__()
        self.emb = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = Checkpointed([LstmLayer(cfg.hidden) for _ in range(cfg.layers)])
        self.out = nn.Linear(cfg.hidden, cfg.vocab)

    def forward(self, ids: Tensor) -> Tensor:
        return self.out(self.layers(self.emb(ids)))


class LstmTask(Task):
    name = "lstm"

    def __init__(self, cfg: LstmConfig, seed: int) -> None:
        super().__init__({"net": LstmLM(cfg)}, lr=2e-3)
        self.cfg = cfg
        # a fixed sparse Markov chain as the "corpus": each token has 4 likely successors (learnable)
        g = torch.Generator().manual_seed(seed + 7)
        self.successors = torch.randint(0, cfg.vocab, (cfg.vocab, 4), generator=g, device="cpu")
        self._successors_on: dict[torch.device, Tensor] = {}

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        dev = gen.device
        if dev not in self._successors_on:  # the corpus's table lives where the batches are made
            self._successors_on[dev] = self.successors.to(dev)
        successors = self._successors_on[dev]
        seq = torch.empty(mb, self.cfg.seq + 1, dtype=torch.long, device=dev)
        seq[:, 0] = torch.randint(0, self.cfg.vocab, (mb,), generator=gen, device=dev)
        choice = torch.randint(0, 4, (mb, self.cfg.seq), generator=gen, device=dev)
        for t in range(self.cfg.seq):
            seq[:, t + 1] = successors[seq[:, t], choice[:, t]]
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

    def loss(self, batch: Batch) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.modules["net"](x).reshape(-1, self.cfg.vocab).float(), y.reshape(-1))


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return LstmTask(SCALES[scale], seed)
