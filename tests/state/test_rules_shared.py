"""One set of ElastiCo rules: the controller and the simulator's default ElastiCo policy plan by the same object."""

from __future__ import annotations

from pathlib import Path

from state_helpers import make_cluster

from elastico_core.iac.predictor import NoInterference
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs
from elastico_core.pds.rules import PRODUCTION, VARIANTS, OomStep
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.policy import JobStatus as SimStatus
from elastico_core.sim.policy import JobView, PolicyContext, PolicyKind
from elastico_core.sim.registry import default_registry
from elastico_core.state import StateStore
from elastico_core.state.controller import Controller


def test_controller_and_simulated_elastico_share_the_production_rules(state_url: str, profiles_dir: Path) -> None:
    cluster = make_cluster(1, 2)
    store = ProfileStore.open(profiles_dir)
    ctl = Controller(StateStore.open(state_url), cluster, store)
    policy = default_registry().get(PolicyKind.ELASTICO)(PolicyContext(store, NoInterference()))
    assert ctl.rules is PRODUCTION and policy.config.rules is PRODUCTION  # type: ignore[attr-defined]
    assert ctl._get_planner().config is policy.planner.config is PRODUCTION.planner  # type: ignore[attr-defined]
    assert ctl.planning_cluster == policy.planning_cluster(cluster)  # type: ignore[attr-defined]
    assert ctl.planning_cluster.m_sys_mib == cluster.m_sys_mib + PRODUCTION.memory_margin_mib
    assert PRODUCTION.planning_cluster(cluster).m_sys_mib == cluster.m_sys_mib + 1024  # the 1 GiB margin
    # every variant differs from production, and production is what a default ElasticoRules is
    assert all(v != PRODUCTION for k, v in VARIANTS.items() if k != "production") and VARIANTS["production"] is PRODUCTION


def test_an_oom_narrows_the_same_space_in_both(state_url: str, profiles_dir: Path) -> None:
    """The simulator's policy applies ``ElasticoRules.after_oom`` as the controller does: the same box."""
    cluster = make_cluster(1, 2)
    store = ProfileStore.open(profiles_dir)
    policy = default_registry().get(PolicyKind.ELASTICO)(PolicyContext(store, NoInterference()))
    spec = JobSpec("bert", PAPER_WORKLOADS["bert"])
    failed = spec.default_knobs
    planning = policy.planning_cluster(cluster)  # type: ignore[attr-defined]
    model = planning.gpu_models()[0]

    def mem_of(k: Knobs) -> float | None:
        p = store.lookup(spec.workload, k, model)
        return None if p is None else p.resources.gpu_mem_mib

    compiler = policy.planner.compiler(planning)  # type: ignore[attr-defined]
    out = PRODUCTION.after_oom(spec, failed, 1, mem_of(failed) or 0.0, mem_of, lambda s: compiler.options(s).problem is None)
    assert out.step is OomStep.NARROW and out.limits
    view = JobView(spec, SimStatus.PENDING, None, failed, 1, 0.0, 0.0, 0.0, 0.0, 0.0, None, 0.0, 1.0, oom_knobs=(failed,))
    narrowed = policy.spec_for(view, planning)  # type: ignore[attr-defined]
    for s in narrowed.knob_space:
        assert list(s.values) == [v for v in next(o for o in spec.knob_space if o.name == s.name).values
                                  if s.name not in out.limits or v in out.limits[s.name]]
    assert failed not in {k for k in compiler.options(narrowed).knobs}
    assert PRODUCTION.after_oom(spec, failed, PRODUCTION.max_oom_kills, 1.0, mem_of, lambda s: True).step is OomStep.GIVE_UP


def test_the_simulated_planner_sizes_jobs_by_the_runtime_estimate_not_the_traces_work(profiles_dir: Path) -> None:
    """The simulator's ElastiCo knows a job's work as every policy knows its length (Lucid-like orders by the
    same noisy estimate): the estimate at the default configuration's throughput, not the trace's exact work."""
    from elastico_core.sim.profiles import ProfileBook

    cluster = make_cluster(1, 2)
    store = ProfileStore.open(profiles_dir)
    policy = default_registry().get(PolicyKind.ELASTICO)(PolicyContext(store, NoInterference()))
    book = ProfileBook.for_cluster(store, cluster)
    spec = JobSpec("bert", PAPER_WORKLOADS["bert"], work=1e9)
    default = spec.default_knobs
    view = JobView(spec, SimStatus.PENDING, None, default, 1, 0.0, 0.0, 0.0, 0.0, 0.0, None, 0.0, 120.0)
    seen = policy.spec_for(view, policy.planning_cluster(cluster), book)  # type: ignore[attr-defined]
    profile = book.profile(spec.workload, default)
    assert profile is not None and seen.work == 120.0 * profile.throughput != spec.work
    assert policy.spec_for(view, policy.planning_cluster(cluster), book) is seen  # one object: the planner's caches hold
    unknown = JobView(JobSpec("open", PAPER_WORKLOADS["bert"]), SimStatus.PENDING, None, default, 1, 0.0, 0.0, 0.0, 0.0, 0.0,
                      None, 0.0, 120.0)
    assert policy.spec_for(unknown, cluster, book) is unknown.spec  # no work declared: nothing to estimate
