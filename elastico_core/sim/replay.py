"""``elastico bench replay``: the planner alone, on the inputs it met in a simulated day.

A simulation's wall time mixes the planner with the simulator and moves with the machine's speed (by up
to 1.5x within a day here), so it cannot tell two versions of the planner apart by a few per cent. This
records the planner's inputs over a window of epochs of ElastiCo's run on ``builtin:paper-mix`` and
replays them on a fresh planner: the first ``warmup`` untimed (so its caches hold what they held in the
simulation), the rest timed per stage. Run under valgrind's callgrind with ``--instr-atstart=no`` and
``--callgrind``, the command switches instruction counting on for exactly the timed calls: a count that
repeats to 0.1 % and moves with the work, not with the machine.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from elastico_core.bench.callgrind import callgrind_counting
from elastico_core.model.errors import SpecError
from elastico_core.model.plan import Plan
from elastico_core.model.planning import PlanningInput
from elastico_core.pds.planner import Planner
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.paper_mix import PaperMixConfig, paper_mix
from elastico_core.sim.policies.elastico import ElasticoPolicy
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.runner import cluster_for
from elastico_core.sim.simulator import simulate
from elastico_core.sim.truth import ContentionPredictor, TruthKind, make_truth


@dataclass(frozen=True, slots=True)
class ReplayWindow:
    """Which planner calls of which simulated day are replayed."""

    gpus: int = 512
    hours: float = 8.0
    start: int = 2500  # index of the first timed call (0-based)
    calls: int = 150
    warmup: int = 200  # untimed calls before it
    seed: int = 0

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.hours <= 0 or self.calls < 1 or self.warmup < 0 or self.start < self.warmup:
            raise SpecError(f"a replay window needs gpus >= 1, hours > 0, calls >= 1 and 0 <= warmup <= start, got {self}", field="window")


class _Enough(Exception):
    """Raised by the recorder once the window is recorded: the rest of the day is not simulated."""


@dataclass
class Recording:
    inputs: list[PlanningInput]
    plans: list[Plan]
    policy: ElasticoPolicy


def record(window: ReplayWindow, store: ProfileStore, data_dir: Path | None = None) -> Recording:
    """The inputs (and the simulation's own plans) of calls ``start - warmup .. start + calls``."""
    trace = paper_mix(window.seed, PaperMixConfig(gpus=window.gpus, hours=window.hours), store=store, data_dir=data_dir)
    policy = ElasticoPolicy.preset(PolicyKind.ELASTICO, PolicyContext(store, ContentionPredictor(), window.seed))
    first, last = window.start - window.warmup, window.start + window.calls
    rec = Recording([], [], policy)
    seen = 0

    def observe(inp: PlanningInput, plan: Plan) -> None:
        nonlocal seen
        if first <= seen < last:
            rec.inputs.append(inp)
            rec.plans.append(plan)
        seen += 1
        if seen >= last:
            raise _Enough

    policy.observer = observe
    try:
        simulate(trace, policy, cluster_for(window.gpus), window.seed, store=store, truth=make_truth(TruthKind.CONTENTION, window.seed))
    except _Enough:
        pass
    finally:
        policy.observer = None
    if len(rec.inputs) < window.warmup + window.calls:
        raise SpecError(f"the simulated day has only {seen} planner calls; the window needs {last}", field="from")
    return rec


def digest(plans: list[Plan]) -> str:
    """What the plans decided (every placement's job, configuration and GPUs), as 16 hex digits."""
    h = hashlib.sha256()
    for p in plans:
        h.update(repr([(x.job_id, x.knobs, x.gpus) for x in p.placements]).encode())
    return h.hexdigest()[:16]


def replay(rec: Recording, window: ReplayWindow, callgrind: bool = False) -> dict[str, object]:
    """Replay the recording on a fresh planner of the policy's settings; stage times per timed call."""
    src = rec.policy.planner
    planner = Planner(src.store, src.predictor, src.config)
    for inp in rec.inputs[: window.warmup]:
        planner.plan(inp)
    timed = rec.inputs[window.warmup :]
    stages: Counter[str] = Counter()
    plans: list[Plan] = []
    if callgrind:
        callgrind_counting(True)
    t0 = time.perf_counter()
    for inp in timed:
        plans.append(planner.plan(inp))
        stages.update(planner.last_timing_ms)
    wall = time.perf_counter() - t0
    if callgrind:
        callgrind_counting(False)
    n = len(timed)
    replayed = digest(plans)
    return {
        "gpus": window.gpus,
        "hours": window.hours,
        "calls": n,
        "first_call": window.start,
        "warmup_calls": window.warmup,
        "mean_running_jobs": round(sum(len(i.running) for i in timed) / n, 1),
        "mean_jobs": round(sum(len(i.jobs) for i in timed) / n, 1),
        "us_per_call": round(wall / n * 1e6, 1),
        "stages_us_per_call": {k: round(v / n * 1e3, 1) for k, v in stages.most_common() if k != "total"},
        "digest": replayed,
        "same_as_simulation": replayed == digest(rec.plans[window.warmup :]),
    }
