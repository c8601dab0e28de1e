"""PointNet classification (ModelNet40: 1024 points, input and feature transform nets)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, Task


@dataclass(frozen=True, slots=True)
class PointNetConfig:
    points: int
    div: int  # channel divisor against the paper's widths (64, 128, 1024; 512, 256)
    classes: int


SCALES = {
    Scale.TINY: PointNetConfig(64, 16, 10),
    Scale.SMALL: PointNetConfig(256, 4, 40),
    Scale.FULL: PointNetConfig(1024, 1, 40),
}


def _mlp1d(widths: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(widths):
        layers += [nn.Conv1d(a, b, 1), nn.BatchNorm1d(b), nn.ReLU()]
    return nn.Sequential(*layers)


class TNet(nn.Module):
    """Predicts a k x k alignment matrix from the point set (initialised at identity)."""

    def __init__(self, k: int, div: int) -> None:
        super().__init__()
        self.k = k
        self.feat = _mlp1d([k, 64 // div, 128 // div, 1024 // div])
        self.fc = nn.Sequential(
            nn.Linear(1024 // div, 512 // div),
            nn.ReLU(),
            nn.Linear(512 // div, 256 // div),
            nn.ReLU(),
            nn.Linear(256 // div, k * k),
        )

    def forward(self, x: Tensor) -> Tensor:
        m = self.fc(self.feat(x).amax(dim=2)).view(-1, self.k, self.k)
        return m + torch.eye(self.k, device=x.device, dtype=m.dtype)


class Transform(nn.Module):
    """Apply a T-Net's matrix to the points/features, then a shared MLP."""

    def __init__(self, k: int, widths: list[int], div: int) -> None:
        super().__init__()
        self.tnet = TNet(k, div)
        self.mlp = _mlp1d(widths)

    def forward(self, x: Tensor) -> Tensor:
        m = self.tnet(x)
        return self.mlp(torch.bmm(m.transpose(1, 2), x))


class PointNet(nn.Module):
    def __init__(self, cfg: PointNetConfig) -> None:
        super().__init__()
        d = cfg.div
        self.body = Checkpointed(
            [Transform(3, [3, 64 // d, 64 // d], d), Transform(64 // d, [64 // d, 128 // d, 1024 // d], d)]
        )
        self.head = nn.Sequential(
            nn.Linear(1024 // d, 512 // d), nn.BatchNorm1d(512 // d), nn.ReLU(),
            nn.Linear(512 // d, 256 // d), nn.BatchNorm1d(256 // d), nn.ReLU(), nn.Dropout(0.3),
            nn.Linear(256 // d, cfg.classes),
        )  # fmt: skip

    def forward(self, pts: Tensor) -> Tensor:
        return self.head(self.body(pts).amax(dim=2))


class PointNetTask(Task):
    name = "pointnet"

    def __init__(self, cfg: PointNetConfig) -> None:
        super().__init__({"net": PointNet(cfg)}, lr=1e-3)
        self.cfg = cfg

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        # each class is a differently stretched Gaussian blob, randomly rotated about z
        dev = gen.device
        y = torch.randint(0, self.cfg.classes, (mb,), generator=gen, device=dev)
        scale = 0.3 + (y.float()[:, None] + 1) / self.cfg.classes * torch.tensor([1.0, 0.6, 0.3], device=dev)
        pts = torch.randn(mb, self.cfg.points, 3, generator=gen, device=dev) * scale[:, None, :]
        angle = torch.rand(mb, generator=gen, device=dev) * 6.2832
        c, s = torch.cos(angle), torch.sin(angle)
        rot = torch.stack(
            [
                torch.stack([c, -s, 0 * c], 1),
                torch.stack([s, c, 0 * c], 1),
                torch.tensor([0.0, 0.0, 1.0], device=dev).expand(mb, 3),
            ],
            1,
        )
        return torch.bmm(pts, rot).transpose(1, 2).contiguous(), y

    def loss(self, batch: Batch) -> Tensor:
        pts, y = batch
        return F.cross_entropy(self.modules["net"](pts).float(), y)


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return PointNetTask(SCALES[scale])
