"""The contract every registered policy passes (STYLE G13): valid decisions, no job ever lost."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico_core.bench.instances import make_cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.state import Assignment
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.policy import (
    ClusterSnapshot,
    Decision,
    Policy,
    PolicyContext,
    PolicyKind,
    Registry,
    parse_policies,
)
from elastico_core.sim.registry import default_registry
from elastico_core.sim.simulator import DecisionError, simulate
from elastico_core.sim.trace import Trace
from elastico_core.sim.truth import ContentionPredictor
from tests.sim.sim_helpers import make_trace

KINDS = default_registry().keys()


@dataclass
class Checked:
    """Wraps a policy and re-checks every decision independently of the simulator's own validation."""

    inner: Policy
    calls: int = 0

    @property
    def kind(self) -> PolicyKind:
        return self.inner.kind

    @property
    def event_driven(self) -> bool:
        return self.inner.event_driven

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        d = self.inner.decide(snapshot)
        self.calls += 1
        placed = list(snapshot.placed())
        assert all(j.assignment() is not None for j in placed), "a placed job without its assignment"
        assert snapshot.running() == {j.id: j.assignment() for j in placed}
        ids = {j.id for j in snapshot.jobs}
        usable = snapshot.cluster.usable_mem_mib(snapshot.profiles.gpu)
        mem: dict[str, float] = {}
        per_gpu: dict[str, int] = {}
        for a in d.assignments:
            assert a.job_id in ids
            view = next(j for j in snapshot.jobs if j.id == a.job_id)
            prof = snapshot.profiles.profile(view.spec.workload, a.knobs)
            assert prof is not None
            for g in a.gpus:
                mem[g] = mem.get(g, 0.0) + prof.resources.gpu_mem_mib
                per_gpu[g] = per_gpu.get(g, 0) + 1
        assert all(m <= usable + 1e-3 for m in mem.values()), "over-committed a GPU's memory"
        assert all(n <= snapshot.cluster.max_jobs_per_gpu for n in per_gpu.values())
        return d


traces = st.lists(
    st.tuples(st.integers(0, 600), st.integers(30, 900), st.sampled_from([1, 1, 1, 2, 4]), st.booleans()),
    min_size=1, max_size=9,
).map(lambda rows: make_trace([(f"j{i}", s, d, 1 if inf else g, "infer" if inf else "train") for i, (s, d, g, inf) in enumerate(rows)]))


@pytest.mark.parametrize("kind", KINDS, ids=[k.value for k in KINDS])
def test_registered_policies_satisfy_the_protocol(store: ProfileStore, kind: PolicyKind) -> None:
    pol = default_registry().get(kind)(PolicyContext(store, ContentionPredictor()))
    assert isinstance(pol, Policy)
    assert pol.kind is kind


@pytest.mark.parametrize("kind", KINDS, ids=[k.value for k in KINDS])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces, seed=st.integers(0, 3))
def test_every_policy_finishes_every_job_without_over_committing(store: ProfileStore, kind: PolicyKind, trace: Trace, seed: int) -> None:
    pol = Checked(default_registry().get(kind)(PolicyContext(store, ContentionPredictor(), seed)))
    r = simulate(trace, pol, make_cluster(4), seed, store=store)
    assert pol.calls > 0
    assert not r.truncated
    assert len(r.jobs) == len(trace)
    for j in r.jobs:
        assert j.finished and j.work_done == pytest.approx(j.work)
        assert j.first_start_s >= j.submit_s and j.finish_s > j.first_start_s
    # the utilisation series stays within the cluster
    assert (r.series.sm <= 4 + 1e-9).all() and (r.series.busy <= 4).all()
    assert (r.series.mem <= 4 * (r.usable_mem_mib + 1e-6)).all()


class StackEverything:
    """A broken policy that stacks every job on the first GPU."""

    kind = PolicyKind.GREEDY
    event_driven = True

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        first = snapshot.cluster.gpus[0].id
        return Decision(tuple(Assignment(j.id, j.default_knobs, (first,)) for j in snapshot.jobs if j.dp == 1))


class Stranger:
    kind = PolicyKind.VOLCANO
    event_driven = True

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        j = snapshot.jobs[0]
        return Decision((Assignment("nobody", j.default_knobs, ("node-0/0",)),))


class Idle:
    kind = PolicyKind.VOLCANO
    event_driven = False  # asked again and again while its job waits: must still terminate

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision(())


def test_the_simulator_rejects_invalid_decisions(store: ProfileStore) -> None:
    trace = make_trace([("a", 0, 60, 1, "train", "bert"), ("b", 0, 60, 1, "train", "resnet50"), ("c", 0, 60, 1, "train", "ppo")])
    with pytest.raises(DecisionError, match=r"put 3 jobs on node-0/0|over-commits node-0/0"):
        simulate(trace, StackEverything(), make_cluster(2), 0, store=store)
    with pytest.raises(DecisionError, match="'nobody', which is not waiting or running"):
        simulate(trace, Stranger(), make_cluster(2), 0, store=store)


def test_a_policy_that_never_places_anything_does_not_hang(store: ProfileStore) -> None:
    r = simulate(make_trace([("a", 0, 60, 1, "train")]), Idle(), make_cluster(1), 0, store=store)
    assert r.truncated and not r.jobs[0].finished
    assert any("never be placed" in n for n in r.notes)


def test_registry_refuses_duplicates_and_unknown_names() -> None:
    reg: Registry[PolicyKind, object] = Registry()
    reg.register(PolicyKind.VOLCANO, object())
    with pytest.raises(ValueError, match="already registered"):
        reg.register(PolicyKind.VOLCANO, object())
    with pytest.raises(SpecError, match="no policy"):
        reg.get(PolicyKind.LUCID)
    assert parse_policies(" volcano, elastico ,volcano") == (PolicyKind.VOLCANO, PolicyKind.ELASTICO)
    with pytest.raises(SpecError, match="unknown policy 'slurm'"):
        parse_policies("volcano,slurm")


@dataclass
class Fickle:
    """Places waiting single-GPU jobs alone on free GPUs and, every other call, drops one running job
    (a preemption): the simulator must notice every drop, requeue the job and still finish it."""

    kind = PolicyKind.VOLCANO
    event_driven = False
    calls: int = 0
    dropped: int = 0

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.calls += 1
        running = snapshot.running()
        keep = sorted(running)
        if self.calls % 2 == 0 and keep and self.dropped < 6:
            keep.pop(self.calls % len(keep))
            self.dropped += 1
        kept = [running[j] for j in keep]
        busy = {g for a in kept for g in a.gpus}
        free = [g.id for g in snapshot.cluster.gpus if g.id not in busy]
        out = list(kept)
        for j in snapshot.jobs:
            if j.id not in running and free:
                out.append(Assignment(j.id, j.default_knobs, (free.pop(0),)))
        return Decision(tuple(out))


def test_every_preemption_is_applied_and_the_job_still_finishes(store: ProfileStore) -> None:
    rows = [(f"j{i}", 10 * i, 120 + 30 * i, 1, "train", ("bert", "resnet50", "ppo")[i % 3]) for i in range(6)]
    policy = Fickle()
    r = simulate(make_trace(rows), policy, make_cluster(4), 0, store=store)
    assert policy.dropped > 0
    assert sum(j.preemptions for j in r.jobs) == policy.dropped
    assert all(j.finished for j in r.jobs)
