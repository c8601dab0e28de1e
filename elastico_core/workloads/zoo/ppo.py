"""PPO (clipped surrogate, GAE) on a vectorised cart-pole written in torch; samples are environment steps.

The environment is the classic cart-pole (Barto, Sutton & Anderson 1983) with the usual constants,
stepped for all environments at once on the device that trains the policy, as GPU-vectorised RL
trainers do (Isaac Gym, Brax): the rollout is many small kernels, so the job is launch-bound, and no
step waits for the host.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Batch, Checkpointed, StepContext, Task


@dataclass(frozen=True, slots=True)
class PpoConfig:
    hidden: tuple[int, ...]
    horizon: int  # rollout length per environment; micro_batch / horizon environments
    epochs: int  # PPO passes over each rollout


SCALES = {
    Scale.TINY: PpoConfig((32, 32), 16, 1),
    Scale.SMALL: PpoConfig((128, 128), 32, 2),
    Scale.FULL: PpoConfig((1024, 1024), 64, 4),
}
GAMMA, LAMBDA, CLIP = 0.99, 0.95, 0.2


class CartPole:
    """Batched cart-pole dynamics (Euler integration, 0.02 s), auto-reset on failure."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit, x_limit = 12 * 2 * math.pi / 360, 2.4

    def __init__(self, n: int, gen: torch.Generator) -> None:
        self.gen = gen
        self.state = self._fresh(n)

    def _fresh(self, n: int) -> Tensor:
        return (torch.rand(n, 4, generator=self.gen, device=self.gen.device) - 0.5) * 0.1

    def step(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = (action.float() * 2 - 1) * self.force_mag
        total = self.masspole + self.masscart
        pml = self.masspole * self.length
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + pml * theta_dot**2 * sin) / total
        theta_acc = (self.gravity * sin - cos * temp) / (self.length * (4.0 / 3.0 - self.masspole * cos**2 / total))
        x_acc = temp - pml * theta_acc * cos / total
        self.state = torch.stack(
            [
                x + self.tau * x_dot,
                x_dot + self.tau * x_acc,
                theta + self.tau * theta_dot,
                theta_dot + self.tau * theta_acc,
            ],
            1,
        )
        done = (self.state[:, 0].abs() > self.x_limit) | (self.state[:, 2].abs() > self.theta_limit)
        # auto-reset without asking the host which environments failed: a fresh state for all, kept where done
        self.state = torch.where(done[:, None], self._fresh(done.shape[0]), self.state)
        return self.state.clone(), torch.ones(done.shape[0], device=done.device), done.float()


class ActorCritic(nn.Module):
    def __init__(self, cfg: PpoConfig) -> None:
        super().__init__()
        widths = [4, *cfg.hidden]
        self.body = Checkpointed([nn.Sequential(nn.Linear(a, b), nn.Tanh()) for a, b in itertools.pairwise(widths)])
        self.pi = nn.Linear(widths[-1], 2)
        self.v = nn.Linear(widths[-1], 1)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        h = self.body(obs)
        return self.pi(h), self.v(h).flatten()


class PpoTask(Task):
    name = "ppo"

    def __init__(self, cfg: PpoConfig) -> None:
        super().__init__({"net": ActorCritic(cfg)}, lr=3e-4)
        self.cfg = cfg

    def samples(self, mb: int) -> int:
        return self.envs(mb) * self.cfg.horizon

    def envs(self, mb: int) -> int:
        return max(1, mb // self.cfg.horizon)

    def batch(self, mb: int, gen: torch.Generator) -> Batch:
        """A rollout of ``horizon`` steps in ``mb / horizon`` environments with the current policy."""
        env = CartPole(self.envs(mb), gen)
        net = self.modules["net"]
        obs, acts, logps, vals, rews, dones = [], [], [], [], [], []
        o = env.state.clone()
        with torch.no_grad():
            for _ in range(self.cfg.horizon):
                logits, v = net(o)
                u = torch.rand(o.shape[0], generator=gen, device=gen.device)
                p1 = torch.softmax(logits.float(), -1)[:, 1]
                a = (u < p1).long()
                logp = torch.where(a == 1, p1, 1 - p1).clamp_min(1e-8).log()
                o2, r, d = env.step(a)
                obs.append(o)
                acts.append(a)
                logps.append(logp)
                vals.append(v.float())
                rews.append(r)
                dones.append(d)
                o = o2
            _, last_v = net(o)
        adv, ret = gae(torch.stack(rews), torch.stack(vals), torch.stack(dones), last_v.float())
        return torch.cat(obs), torch.cat(acts), torch.cat(logps), adv.flatten(), ret.flatten()

    def train_step(self, batch: Batch, ctx: StepContext) -> Tensor:
        obs, acts, old_logp, adv, ret = batch
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        loss_value = torch.zeros((), device=obs.device)
        for _ in range(self.cfg.epochs):
            with ctx.autocast():
                logits, v = self.modules["net"](obs)
                logp_all = F.log_softmax(logits.float(), -1)
                logp = logp_all.gather(1, acts[:, None]).flatten()
                ratio = torch.exp(logp - old_logp)
                pg = -torch.min(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv).mean()
                entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
                loss = pg + 0.5 * F.mse_loss(v.float(), ret) - 0.01 * entropy
            ctx.optimise(loss, self.opts["net"])
            loss_value = loss.detach()
        return loss_value


def gae(rews: Tensor, vals: Tensor, dones: Tensor, last_v: Tensor) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over a [T, N] rollout."""
    adv = torch.zeros_like(rews)
    running = torch.zeros_like(last_v)
    next_v = last_v
    for t in reversed(range(rews.shape[0])):
        nonterminal = 1.0 - dones[t]
        delta = rews[t] + GAMMA * next_v * nonterminal - vals[t]
        running = delta + GAMMA * LAMBDA * nonterminal * running
        adv[t] = running
        next_v = vals[t]
    return adv, adv + vals


def build(scale: Scale, seed: int) -> Task:
    torch.manual_seed(seed)
    return PpoTask(SCALES[scale])
