"""DCGAN (64x64 images, nz=100, ngf=ndf=64): generator and discriminator trained adversarially."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, StepContext, Task, fused


@dataclass(frozen=True, slots=True)
class DcganConfig:
    image: int  # a power of two >= 8
    nz: int
    ngf: int
    ndf: int


SCALES = {
    Scale.TINY: DcganConfig(16, 16, 8, 8),
    Scale.SMALL: DcganConfig(32, 64, 32, 32),
    Scale.FULL: DcganConfig(64, 100, 64, 64),
}


class Generator(nn.Module):
    def __init__(self, cfg: DcganConfig) -> None:
        super().__init__()
        n_up = int(math.log2(cfg.image)) - 2
        c = cfg.ngf * 2 ** (n_up - 1)
        blocks: list[nn.Module] = [
            nn.Sequential(nn.ConvTranspose2d(cfg.nz, c, 4, 1, 0, bias=False), nn.BatchNorm2d(c), nn.ReLU(True))
        ]
        for _ in range(n_up - 1):
            blocks.append(
                nn.Sequential(nn.ConvTranspose2d(c, c // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(c // 2), nn.ReLU(True))
            )
            c //= 2
        blocks.append(nn.Sequential(nn.ConvTranspose2d(c, 3, 4, 2, 1, bias=False), nn.Tanh()))
        self.net = Checkpointed(blocks)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, cfg: DcganConfig) -> None:
        super().__init__()
        n_down = int(math.log2(cfg.image)) - 2
        c = cfg.ndf
        blocks: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, c, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True))]
        for _ in range(n_down - 1):
            blocks.append(
                nn.Sequential(nn.Conv2d(c, c * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(c * 2), nn.LeakyReLU(0.2, True))
            )
            c *= 2
        blocks.append(nn.Conv2d(c, 1, 4, 1, 0, bias=False))
        self.net = Checkpointed(blocks)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x).flatten()


class DcganTask(Task):
    name = "dcgan"
    channels_last = True

    def __init__(self, cfg: DcganConfig) -> None:
        super().__init__({"g": Generator(cfg), "d": Discriminator(cfg)}, lr=2e-4)
        self.cfg = cfg

    def make_optimizers(self) -> None:
        self.opts = {
            n: torch.optim.Adam(m.parameters(), lr=self.lr, betas=(0.5, 0.999), fused=fused(m.parameters()))
            for n, m in self.modules.items()
        }

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        # "real" images: smooth random fields (low-frequency noise upsampled), in [-1, 1] like the data DCGAN sees
        coarse = torch.randn(mb, 3, 4, 4, generator=gen, device=gen.device)
        real = torch.tanh(F.interpolate(coarse, size=self.cfg.image, mode="bilinear", align_corners=False))
        z = torch.randn(mb, self.cfg.nz, 1, 1, generator=gen, device=gen.device)
        return self.layout(real), self.layout(z)

    def train_step(self, batch: Batch, ctx: StepContext) -> Tensor:
        real, z = batch
        g, d = self.modules["g"], self.modules["d"]
        ones = torch.ones(real.shape[0], device=real.device)
        zeros = torch.zeros_like(ones)
        with ctx.autocast():
            fake = g(z)
            # one discriminator pass over real and fake together (DDP wants one forward per backward)
            d_loss = F.binary_cross_entropy_with_logits(
                d(torch.cat([real, fake.detach()])).float(), torch.cat([ones, zeros])
            )
        ctx.optimise(d_loss, self.opts["d"])
        with ctx.autocast():
            g_loss = F.binary_cross_entropy_with_logits(d(fake).float(), ones)
        ctx.optimise(g_loss, self.opts["g"])
        return d_loss.detach() + g_loss.detach()


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return DcganTask(SCALES[scale])
