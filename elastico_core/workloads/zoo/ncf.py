"""NCF-NeuMF (MovieLens-20M: 138k users, 27k items, GMF + MLP [256, 128, 64]) on implicit feedback."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, Task


@dataclass(frozen=True, slots=True)
class NcfConfig:
    users: int
    items: int
    factors: int  # GMF embedding size
    mlp: tuple[int, ...]  # MLP tower widths; the first is the concatenated embedding size


SCALES = {
    Scale.TINY: NcfConfig(1000, 500, 8, (32, 16, 8)),
    Scale.SMALL: NcfConfig(20000, 5000, 32, (128, 64, 32)),
    Scale.FULL: NcfConfig(138493, 26744, 64, (256, 128, 64)),
}


def _dense(a: int, b: int) -> nn.Module:
    return nn.Sequential(nn.Linear(a, b), nn.ReLU())


class NeuMF(nn.Module):
    def __init__(self, cfg: NcfConfig) -> None:
        super().__init__()
        half = cfg.mlp[0] // 2
        self.gmf_u = nn.Embedding(cfg.users, cfg.factors)
        self.gmf_i = nn.Embedding(cfg.items, cfg.factors)
        self.mlp_u = nn.Embedding(cfg.users, half)
        self.mlp_i = nn.Embedding(cfg.items, half)
        self.tower = Checkpointed([_dense(a, b) for a, b in zip(cfg.mlp[:-1], cfg.mlp[1:], strict=True)])
        self.out = nn.Linear(cfg.factors + cfg.mlp[-1], 1)

    def forward(self, users: Tensor, items: Tensor) -> Tensor:
        gmf = self.gmf_u(users) * self.gmf_i(items)
        mlp = self.tower(torch.cat([self.mlp_u(users), self.mlp_i(items)], 1))
        return self.out(torch.cat([gmf, mlp], 1)).flatten()


class NcfTask(Task):
    name = "ncf"

    def __init__(self, cfg: NcfConfig) -> None:
        super().__init__({"net": NeuMF(cfg)}, lr=1e-3)
        self.cfg = cfg

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        users = torch.randint(0, self.cfg.users, (mb,), generator=gen, device=gen.device)
        items = torch.randint(0, self.cfg.items, (mb,), generator=gen, device=gen.device)
        # implicit feedback with structure: users like items of "their" genre (one of 8)
        liked = ((users % 8) == (items % 8)).float()
        return users, items, liked

    def loss(self, batch: Batch) -> Tensor:
        users, items, liked = batch
        return F.binary_cross_entropy_with_logits(self.modules["net"](users, items).float(), liked)


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return NcfTask(SCALES[scale])
