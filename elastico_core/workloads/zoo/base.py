"""What every zoo model provides to the training loop: modules, optimizers, a batch source, one step.

Data are synthetic and generated in-process from ``(seed, step, rank)``, so a resumed run sees exactly
the batches an uninterrupted one would (no downloads, no data loader state to checkpoint). They are
generated on the device the model trains on, by a generator of that device: a job fed from the host
every step starves a GPU (an H200 trained ResNet-50 at SM active 0.15 that way), which real jobs with
a data loader and pinned prefetching do not. A step returns its loss as a device tensor, so the loop
never waits for the device unless it has to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

Batch = tuple[Tensor, ...]


@dataclass(frozen=True, slots=True)
class StepContext:
    """How one iteration runs: device, AMP (``torch.autocast``) and the gradient scaler for FP16."""

    device: torch.device
    amp: bool
    amp_dtype: torch.dtype = torch.bfloat16
    scaler: torch.amp.GradScaler | None = None

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def optimise(self, loss: Tensor, opt: torch.optim.Optimizer) -> None:
        """Backward and update, through the scaler when AMP runs in FP16."""
        opt.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(opt)
            self.scaler.update()
        else:
            loss.backward()
            opt.step()


class Checkpointed(nn.Module):
    """A stack of blocks run in order; with ``checkpointing`` on, each block's activations are recomputed.

    This is activation recomputation on the model's real blocks (residual stages, encoder layers...):
    only block inputs stay alive between forward and backward.
    """

    def __init__(self, blocks: Sequence[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.checkpointing = False

    def forward(self, x: Tensor, *extra: Tensor) -> Tensor:
        for block in self.blocks:
            if self.checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, *extra, use_reentrant=False)
            else:
                x = block(x, *extra)
        return x


def generator(seed: int, step: int, rank: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The data stream of one iteration on ``device``: a function of (seed, step, rank, device kind) only."""
    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + step) * 131 + rank)


def fused(params: Iterable[nn.Parameter]) -> bool | None:
    """The fused (single-kernel) Adam update where every parameter lives on a GPU, as trainers use it
    (None lets torch choose elsewhere)."""
    plist = list(params)
    return True if plist and all(p.is_cuda and p.is_floating_point() for p in plist) else None


class Task:
    """One training workload: ``modules`` (each wrapped in DDP when dp > 1) and their optimizers.

    Subclasses implement ``batch`` and either ``loss`` (one model, one optimizer) or ``train_step``.
    """

    name = "task"
    channels_last = False  # convolutional models: NHWC activations, what cuDNN's tensor-core kernels want

    def __init__(self, modules: dict[str, nn.Module], lr: float = 1e-3) -> None:
        self.modules = modules
        self.lr = lr
        self.opts: dict[str, torch.optim.Optimizer] = {}

    # ---- set-up -----------------------------------------------------------------------------
    def raw(self, name: str) -> nn.Module:
        m = self.modules[name]
        return m.module if isinstance(m, nn.parallel.DistributedDataParallel) else m

    def raw_modules(self) -> Iterator[tuple[str, nn.Module]]:
        for name in self.modules:
            yield name, self.raw(name)

    def param_count(self) -> int:
        return sum(p.numel() for _, m in self.raw_modules() for p in m.parameters())

    def set_checkpointing(self, on: bool) -> None:
        for _, m in self.raw_modules():
            for sub in m.modules():
                if isinstance(sub, Checkpointed):
                    sub.checkpointing = on

    def to(self, device: torch.device) -> None:
        nhwc = self.channels_last and device.type == "cuda"
        for name in list(self.modules):
            m = self.modules[name].to(device)
            self.modules[name] = m.to(memory_format=torch.channels_last) if nhwc else m  # type: ignore[call-overload]

    def layout(self, x: Tensor) -> Tensor:
        """An image batch in the memory format the model's weights use (NHWC on a GPU for CNNs)."""
        if self.channels_last and x.is_cuda and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def wrap(self, wrap: Callable[[nn.Module], nn.Module]) -> None:
        for name in list(self.modules):
            self.modules[name] = wrap(self.modules[name])

    def make_optimizers(self) -> None:
        self.opts = {
            name: torch.optim.AdamW(m.parameters(), lr=self.lr, fused=fused(m.parameters()))
            for name, m in self.modules.items()
        }

    # ---- state (unwrapped, so a checkpoint taken under DDP loads without it and back) --------
    def state(self) -> dict[str, object]:
        return {
            "modules": {name: m.state_dict() for name, m in self.raw_modules()},
            "opts": {name: o.state_dict() for name, o in self.opts.items()},
        }

    def load_state(self, state: dict[str, object]) -> None:
        modules = state["modules"]
        opts = state["opts"]
        assert isinstance(modules, dict) and isinstance(opts, dict)
        for name, m in self.raw_modules():
            m.load_state_dict(modules[name])
        for name, o in self.opts.items():
            o.load_state_dict(opts[name])

    # ---- one iteration ----------------------------------------------------------------------
    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        """One iteration's synthetic batch, made on ``gen.device`` from ``gen`` alone."""
        raise NotImplementedError

    def loss(self, batch: Batch) -> Tensor:
        raise NotImplementedError

    def train_step(self, batch: Batch, ctx: StepContext) -> Tensor:
        """Forward under autocast, backward, update; returns the loss as a detached device tensor."""
        with ctx.autocast():
            loss = self.loss(batch)
        ctx.optimise(loss, self.opts["net"])
        return loss.detach()

    def samples(self, mb: int) -> int:
        """Samples one iteration processes on one rank (environment steps for PPO)."""
        return mb
