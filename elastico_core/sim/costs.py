"""Costs of change (§5.7): what a running job loses when its configuration or its GPUs change.

* flag toggle (prefix caching): 1 ms — a side-channel RPC, "sub-millisecond", but never free;
* engine restart (vLLM batching / memory knobs): 5-15 s, drain and relaunch;
* checkpoint-resume (training knobs, data-parallel degree): 15-45 s, torch.save, relaunch, load;
* migration: the job's restart kind (checkpoint-resume for training, engine restart for inference,
  or the costlier change if knobs change too) plus moving its state through the shared volume:
  params x 16 B (weights, gradients, Adam moments) for training, params x 2 B of weights for vLLM,
  at ``transfer_gb_s`` (2 GB/s);
* resume after preemption: the job's restart kind (state comes back from the checkpoint).

Within each range the cost grows with log10(model parameters) from 1e6 (low end) to 1e10 (high
end): PPO (1.2 M) restarts in ~15 s, BERT-Large (335 M) in ~34 s, a 7 B LLM's engine in ~14 s.
A job's first start costs nothing: the trace's duration already contains its start-up. During a
change the job holds its (new) GPUs and memory and makes no progress.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastico_core.model.knobs import ChangeKind
from elastico_core.model.workload import JobKind, Workload


@dataclass(frozen=True, slots=True)
class CostModel:
    flag_toggle_s: float = 0.001
    engine_restart_s: tuple[float, float] = (5.0, 15.0)
    checkpoint_resume_s: tuple[float, float] = (15.0, 45.0)
    size_params: tuple[float, float] = (1e6, 1e10)
    transfer_gb_s: float = 2.0

    def _scaled(self, span: tuple[float, float], params: int) -> float:
        lo, hi = (math.log10(x) for x in self.size_params)
        f = min(1.0, max(0.0, (math.log10(max(params, 1)) - lo) / (hi - lo)))
        return span[0] + (span[1] - span[0]) * f

    def change_s(self, w: Workload, kind: ChangeKind) -> float:
        """Seconds a job spends switching configuration in place."""
        if kind is ChangeKind.FLAG_TOGGLE:
            return self.flag_toggle_s
        if kind is ChangeKind.ENGINE_RESTART:
            return self._scaled(self.engine_restart_s, w.params)
        return self._scaled(self.checkpoint_resume_s, w.params)

    def restart_kind(self, w: Workload) -> ChangeKind:
        return ChangeKind.CHECKPOINT_RESUME if w.kind is JobKind.TRAIN else ChangeKind.ENGINE_RESTART

    def restart_s(self, w: Workload) -> float:
        """Stop and start the job again from its state (resume after preemption, OOM crash loop)."""
        return self.change_s(w, self.restart_kind(w))

    def transfer_s(self, w: Workload) -> float:
        bytes_per_param = 16.0 if w.kind is JobKind.TRAIN else 2.0
        return w.params * bytes_per_param / (self.transfer_gb_s * 1e9)

    def migrate_s(self, w: Workload, kind: ChangeKind | None) -> float:
        base = self.restart_s(w)
        if kind is not None:
            base = max(base, self.change_s(w, kind))
        return base + self.transfer_s(w)
