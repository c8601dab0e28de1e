"""ResNet-50 (bottleneck blocks [3, 4, 6, 3], ImageNet 224x224) and its scaled-down siblings."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, Task


@dataclass(frozen=True, slots=True)
class ResNetConfig:
    width: int  # channels of the first stage's bottleneck (64 in ResNet-50)
    blocks: tuple[int, int, int, int]
    image: int
    classes: int


SCALES = {
    Scale.TINY: ResNetConfig(4, (2, 2, 2, 2), 16, 10),
    Scale.SMALL: ResNetConfig(16, (2, 2, 2, 2), 32, 10),
    Scale.FULL: ResNetConfig(64, (3, 4, 6, 3), 224, 1000),
}


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.down(x))


class ResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig) -> None:
        super().__init__()
        w = cfg.width
        if cfg.image >= 64:  # ImageNet stem: 7x7/2 conv and 3x3/2 max-pool
            self.stem = nn.Sequential(
                nn.Conv2d(3, w, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
            )
        else:  # CIFAR-style stem for small images
            self.stem = nn.Sequential(nn.Conv2d(3, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        blocks: list[nn.Module] = []
        cin = w
        for stage, n in enumerate(cfg.blocks):
            width = w * 2**stage
            for i in range(n):
                blocks.append(Bottleneck(cin, width, 2 if (i == 0 and stage > 0) else 1))
                cin = width * Bottleneck.expansion
        self.body = Checkpointed(blocks)
        self.fc = nn.Linear(cin, cfg.classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.body(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ResNetTask(Task):
    name = "resnet50"
    channels_last = True

    def __init__(self, cfg: ResNetConfig) -> None:
        super().__init__({"net": ResNet(cfg)}, lr=1e-3)
        self.cfg = cfg

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        x = torch.randn(mb, 3, self.cfg.image, self.cfg.image, generator=gen, device=gen.device)
        y = torch.randint(0, self.cfg.classes, (mb,), generator=gen, device=gen.device)
        return self.layout(x), y

    def loss(self, batch: Batch) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.modules["net"](x), y)


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return ResNetTask(SCALES[scale])
