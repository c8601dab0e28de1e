"""BERT (BERT-Large: 24 layers, hidden 1024, sequence 128) trained with masked-language modelling."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, Task


@dataclass(frozen=True, slots=True)
class BertConfig:
    vocab: int
    hidden: int
    layers: int
    heads: int
    seq: int


SCALES = {
    Scale.TINY: BertConfig(256, 32, 2, 2, 32),
    Scale.SMALL: BertConfig(2048, 128, 4, 4, 64),
    Scale.FULL: BertConfig(30522, 1024, 24, 16, 128),
}
MASK_RATE = 0.15


class Bert(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden)
        self.encoder = Checkpointed(
            [
                nn.TransformerEncoderLayer(
                    cfg.hidden, cfg.heads, 4 * cfg.hidden, dropout=0.1, activation="gelu", batch_first=True
                )
                for _ in range(cfg.layers)
            ]
        )
        self.head = nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden), nn.GELU(), nn.LayerNorm(cfg.hidden))
        self.bias = nn.Parameter(torch.zeros(cfg.vocab))
        for emb in (self.tok, self.pos):
            nn.init.normal_(emb.weight, std=0.02)  # BERT's initializer range

    def forward(self, ids: Tensor) -> Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.encoder(self.norm(self.tok(ids) + self.pos(pos)))
        return self.head(h) @ self.tok.weight.t() + self.bias  # tied output embedding, as BERT


class BertTask(Task):
    name = "bert"

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__({"net": Bert(cfg)}, lr=1e-4)
        self.cfg = cfg

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        ids = torch.randint(5, self.cfg.vocab, (mb, self.cfg.seq), generator=gen, device=gen.device)
        masked = torch.rand(mb, self.cfg.seq, generator=gen, device=gen.device) < MASK_RATE
        inputs = ids.masked_fill(masked, 1)  # token 1 is [MASK]
        labels = ids.masked_fill(~masked, -100)
        return inputs, labels

    def loss(self, batch: Batch) -> Tensor:
        inputs, labels = batch
        logits = self.modules["net"](inputs)
        return F.cross_entropy(logits.reshape(-1, self.cfg.vocab).float(), labels.reshape(-1), ignore_index=-100)


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return BertTask(SCALES[scale])
