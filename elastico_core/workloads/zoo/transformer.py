"""Transformer-base (6+6 layers, d=512, 8 heads) for translation, on a synthetic reversal task."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, Task


@dataclass(frozen=True, slots=True)
class TransformerConfig:
    vocab: int
    d_model: int
    heads: int
    layers: int  # per side (encoder and decoder)
    seq: int


SCALES = {
    Scale.TINY: TransformerConfig(128, 32, 2, 1, 16),
    Scale.SMALL: TransformerConfig(1024, 128, 4, 2, 32),
    Scale.FULL: TransformerConfig(32000, 512, 8, 6, 64),
}
BOS = 1


class DecoderBlock(nn.Module):
    """``nn.TransformerDecoderLayer`` with the causal mask built inside (so checkpointing sees tensors only)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)

    def forward(self, x: Tensor, memory: Tensor) -> Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device, dtype=x.dtype)
        return self.layer(x, memory, tgt_mask=mask, tgt_is_causal=True)


class Seq2Seq(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.emb = nn.Embedding(cfg.vocab, d)
        self.pos = nn.Embedding(cfg.seq, d)
        self.encoder = Checkpointed(
            [nn.TransformerEncoderLayer(d, cfg.heads, 4 * d, dropout=0.1, batch_first=True) for _ in range(cfg.layers)]
        )
        self.decoder = Checkpointed([DecoderBlock(d, cfg.heads) for _ in range(cfg.layers)])
        self.norm = nn.LayerNorm(d)
        nn.init.normal_(self.emb.weight, std=d**-0.5)  # shared embedding: scaled so tied logits start small

    def embed(self, ids: Tensor) -> Tensor:
        return self.emb(ids) * self.emb.embedding_dim**0.5 + self.pos(torch.arange(ids.shape[1], device=ids.device))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory = self.encoder(self.embed(src))
        h = self.norm(self.decoder(self.embed(tgt_in), memory))
        return h @ self.emb.weight.t()  # shared source/target/output embedding, as Transformer-base


class TransformerTask(Task):
    name = "transformer"

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__({"net": Seq2Seq(cfg)}, lr=5e-4)
        self.cfg = cfg

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        src = torch.randint(2, self.cfg.vocab, (mb, self.cfg.seq), generator=gen, device=gen.device)
        tgt = src.flip(1)  # "translation": the reversed sentence
        tgt_in = torch.cat([torch.full((mb, 1), BOS, device=gen.device), tgt[:, :-1]], 1)
        return src, tgt_in, tgt

    def loss(self, batch: Batch) -> Tensor:
        src, tgt_in, tgt = batch
        logits = self.modules["net"](src, tgt_in)
        return F.cross_entropy(logits.reshape(-1, self.cfg.vocab).float(), tgt.reshape(-1), label_smoothing=0.1)


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return TransformerTask(SCALES[scale])
