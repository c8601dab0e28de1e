"""A user's own model as a job file names it (``model: tests.workloads.custom_model:build``): a zoo Task."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, Task

WIDTH = {Scale.TINY: 16, Scale.SMALL: 64, Scale.FULL: 256}


class TwoTower(Task):
    name = "two-tower"

    def __init__(self, width: int) -> None:
        super().__init__({"net": nn.Sequential(nn.Linear(8, width), Checkpointed([nn.Sequential(nn.Linear(width, width), nn.ReLU())]),
                                               nn.Linear(width, 1))})  # fmt: skip

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        return torch.randn(mb, 8, generator=gen, device=gen.device), torch.rand(mb, 1, generator=gen, device=gen.device)

    def loss(self, batch: Batch) -> Tensor:
        x, y = batch
        return F.mse_loss(self.modules["net"](x), y)


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return TwoTower(WIDTH[scale])


def not_a_task(scale: Scale, seed: int) -> object:
    return nn.Linear(2, 2)
