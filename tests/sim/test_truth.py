"""The interference ground truth, its calibration to Table 6, the memory truth and the costs of change."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastico_core.bench.instances import make_cluster
from elastico_core.iac.batch import PairBatch, profile_batch
from elastico_core.model.knobs import ChangeKind
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.calibration import fit_contention, table6_error
from elastico_core.sim.costs import CostModel
from elastico_core.sim.profiles import ProfileBook
from elastico_core.sim.truth import (
    ContentionParams,
    ContentionPredictor,
    ContentionTruth,
    TableTruth,
    contention,
    table6_predictor,
)

unit = st.floats(0.0, 1.0)


@given(ua=unit, da=unit, ub=unit, db=unit, ub2=unit)
@settings(max_examples=60, deadline=None)
def test_contention_is_at_least_one_and_grows_with_the_partner(ua: float, da: float, ub: float, db: float, ub2: float) -> None:
    p = ContentionParams()
    one = np.ones(1)

    def s(u: float) -> float:
        return float(contention(ua * one, da * one, 1e4 * one, u * one, db * one, 1e4 * one, 40960.0, p)[0])

    assert s(ub) >= 1.0 + p.mps_overhead - 1e-12
    lo, hi = sorted((ub, ub2))
    assert s(lo) <= s(hi) + 1e-12


@pytest.fixture(scope="module")
def book(store: ProfileStore) -> ProfileBook:
    return ProfileBook.for_cluster(store, make_cluster(1))


def test_the_shipped_constants_are_the_table6_fit(book: ProfileBook) -> None:
    shipped = table6_error(book)
    fitted = fit_contention(book)
    assert shipped.mae_decay <= 0.14  # documented: 0.13
    assert abs(fitted.mae_decay - shipped.mae_decay) < 0.01
    for name in ("alpha_sm", "alpha_bw", "theta", "gamma"):
        assert getattr(fitted.params, name) == pytest.approx(getattr(shipped.params, name), abs=0.05)
    decays = [d for row in shipped.rows for d in row[3:]]
    assert min(decays) > 0.45 and max(decays) < 0.99  # the model stays in Table 6's range


def test_noise_is_persistent_per_pair_and_seeded(book: ProfileBook) -> None:
    bert, resnet = PAPER_WORKLOADS["bert"], PAPER_WORKLOADS["resnet50"]
    pb, pr = book.profile(bert, bert.defaults), book.profile(resnet, resnet.defaults)
    assert pb is not None and pr is not None
    a, b = ContentionTruth(seed=1), ContentionTruth(seed=1)
    s1 = a.slowdown(bert, pb, resnet, pr, 40960.0)
    assert s1 == a.slowdown(bert, pb, resnet, pr, 40960.0) == b.slowdown(bert, pb, resnet, pr, 40960.0)
    assert s1 != ContentionTruth(seed=2).slowdown(bert, pb, resnet, pr, 40960.0)
    base = a.model(pb, pr, 40960.0)
    assert abs(np.log(s1 / base)) < 4 * a.noise_sigma
    # the noise-free predictor is the model the truth perturbs
    batch = PairBatch(profile_batch([(bert, pb)]), profile_batch([(resnet, pr)]), np.array([40960.0]))
    assert ContentionPredictor().predict(batch)[0] == pytest.approx(base)


def test_table6_truth_and_predictor_use_the_papers_pairs(book: ProfileBook) -> None:
    ppo, resnet = PAPER_WORKLOADS["ppo"], PAPER_WORKLOADS["resnet50"]
    pp, pr = book.profile(ppo, ppo.defaults), book.profile(resnet, resnet.defaults)
    assert pp is not None and pr is not None
    assert TableTruth(noise_sigma=0.0).model(pp, pr, 40960.0) == pytest.approx(1 / 0.54)
    batch = PairBatch(profile_batch([(resnet, pr)]), profile_batch([(ppo, pp)]), np.array([40960.0]))
    assert table6_predictor().predict(batch)[0] == pytest.approx(1 / 0.72)


def test_memory_truth(book: ProfileBook) -> None:
    truth = ContentionTruth(seed=0)
    usable = 40960.0 - 512
    qwen = PAPER_WORKLOADS["qwen-1.7b"]
    pq = book.profile(qwen, qwen.defaults)
    assert pq is not None and truth.memory_mib(qwen, pq, usable) == pq.resources.gpu_mem_mib  # vLLM pre-allocates
    for name in ("bert", "resnet50", "transformer", "ncf"):
        w = PAPER_WORKLOADS[name]
        p = book.profile(w, w.defaults)
        assert p is not None
        real = truth.memory_mib(w, p, usable)
        assert 0.97 * p.resources.gpu_mem_mib - 1e-6 <= real <= 1.06 * p.resources.gpu_mem_mib + 1e-6
        assert real <= max(usable, p.resources.gpu_mem_mib)  # what fits alone by its profile fits alone


def test_costs_of_change_follow_section_5_7() -> None:
    c = CostModel()
    ppo, bert, llama = PAPER_WORKLOADS["ppo"], PAPER_WORKLOADS["bert"], PAPER_WORKLOADS["llama-3-7b"]
    assert 0 < c.change_s(llama, ChangeKind.FLAG_TOGGLE) < 0.01
    assert 5 <= c.change_s(llama, ChangeKind.ENGINE_RESTART) <= 15
    for w in (ppo, bert):
        assert 15 <= c.change_s(w, ChangeKind.CHECKPOINT_RESUME) <= 45
    assert c.change_s(ppo, ChangeKind.CHECKPOINT_RESUME) < c.change_s(bert, ChangeKind.CHECKPOINT_RESUME)
    assert c.migrate_s(bert, None) > c.restart_s(bert) > 0  # migration = restart + state transfer
    assert c.migrate_s(llama, ChangeKind.FLAG_TOGGLE) == pytest.approx(c.restart_s(llama) + c.transfer_s(llama))
