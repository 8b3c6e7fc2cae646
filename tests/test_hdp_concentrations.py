"""Learned concentrations of the online HDP (``learn_concentrations=True``; ``kernels/_concentration.py``):
the updates (C1)–(C3) against slow references (``tests/naive/ohdp.py``), their wiring into both estimators,
persistence, and what they learn on synthetic corpora with few and with many topics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import digamma as sp_digamma

from kernels._concentration import doc_log_aux, gamma_fixed_point, stick_log_rest
from kernels._hdp_base import OnlineHDPBase
from kernels.ohdp import OnlineHDP
from kernels.ohdp_stick import StickBreakingHDP
from tests.naive import ohdp as naive
from tests.synthetic import block_topics_corpus


def _corpus(n_topics: int, seed: int = 0, n_docs: int = 1500, W: int = 800, length: int = 80):
    """An HDP-like corpus: topics on disjoint word blocks, each document mostly one topic (θ ~ Dirichlet(0.05))."""
    return block_topics_corpus(seed, n_docs, n_topics, W, length, alpha=0.05)[1]


# ----------------------------------------------------------------------------------------- (C1), corpus level
def test_stick_rate_term_matches_numerical_expectations() -> None:
    rng = np.random.default_rng(1)
    u, v = rng.gamma(2.0, 1.0, 6) + 0.3, rng.gamma(2.0, 2.0, 6) + 0.3
    m = StickBreakingHDP(7, 20, seed=0, learn_concentrations=True, gamma_shape=2.0, gamma_rate=0.5)
    m.stick_u_, m.stick_v_ = u, v
    ref = naive.gamma_posterior_sticks(u, v, 2.0, 0.5)
    np.testing.assert_allclose(m._gamma_posterior(), ref, rtol=1e-8)
    numerical = -sum(naive.expect_log_rest(x, y) for x, y in zip(u, v, strict=True))
    assert stick_log_rest(u, v) == pytest.approx(numerical, rel=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_collapsed_gamma_is_the_fixed_point_of_c1(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = rng.gamma(0.5, 200.0, 30)
    m[rng.choice(30, 12, replace=False)] = 0.0  # empty topics
    m[3] = m[4]  # a tie
    shape, rate = gamma_fixed_point(m, 1.5, 0.8)
    ref_shape, ref_rate = naive.gamma_fixed_point_tables(m, 1.5, 0.8)
    assert shape == ref_shape
    assert rate == pytest.approx(ref_rate, rel=1e-9)
    # a fixed point: (C1) evaluated at E[γ] = shape/rate gives back the same rate
    g = shape / rate
    m_desc = np.sort(m)[::-1]
    tails = np.concatenate([np.cumsum(m_desc[::-1])[::-1][1:], [0.0]])[:29]
    lhs = 0.8 - np.sum(sp_digamma(g + tails) - sp_digamma(1.0 + m_desc[:29] + g + tails))
    assert lhs == pytest.approx(rate, rel=1e-9)


def test_collapsed_gamma_follows_the_topics_used_not_the_truncation() -> None:
    """Same tables on 3 or on 40 topics (3,000 in all): γ below 1 for 3, above for 40; and the empty sticks
    contribute exactly their prior share, so the truncation (50 or 300) does not move γ."""
    learned = {}
    for used in (3, 40):
        for K in (50, 300):
            m = np.zeros(K)
            m[:used] = 3000.0 / used
            shape, rate = gamma_fixed_point(m, 1.0, 1.0)
            learned[used, K] = shape / rate
    assert learned[3, 50] < 1.0 < learned[40, 50]
    for used in (3, 40):
        assert learned[used, 300] == pytest.approx(learned[used, 50], rel=1e-9)


# ----------------------------------------------------------------------------------------- (C2), (C3)
def test_doc_log_aux_matches_scipy() -> None:
    indptr = np.array([0, 2, 2, 5])  # the middle document is empty
    counts = np.array([1.0, 3.0, 2.0, 2.0, 7.0])
    lengths = np.array([4.0, 0.0, 11.0])
    ref = naive.collapsed_alpha_rate(lengths, 0.7)
    assert doc_log_aux(indptr, counts, 0.7) == pytest.approx(ref, rel=1e-12)


def test_collapsed_alpha_step_is_the_natural_gradient_toward_c2() -> None:
    docs = _corpus(3, n_docs=60, W=60, length=20)
    m = OnlineHDP(10, 60, seed=0, batch_size=30, window=600, learn_concentrations=True, alpha_shape=2.0)
    m.partial_fit(docs[:30])
    q0, tables0, alpha0 = m.alpha_q_.copy(), m.tables_.copy(), m._alpha()
    rho, mult = m._rho(m.n_updates_), 600 / 30
    m.partial_fit(docs[30:])
    mb_tables = (m.tables_.sum() - (1 - rho) * tables0.sum()) / (rho * mult)  # Σ_j E[m_j] of the minibatch
    lengths = np.array([c.sum() for _, c in docs[30:]])
    rate_t = naive.collapsed_alpha_rate(lengths, alpha0)  # (C2)'s shape term is the minibatch's tables
    expected = (1 - rho) * q0 + rho * np.array([2.0 + mult * mb_tables, 1.0 + mult * rate_t])
    np.testing.assert_allclose(m.alpha_q_, expected, rtol=1e-10)
    np.testing.assert_allclose(m.gamma_q_, gamma_fixed_point(m.tables_, 1.0, 1.0), rtol=1e-12)


def test_stick_alpha_shape_counts_t_minus_1_sticks_per_document() -> None:
    docs = [*_corpus(2, n_docs=19, W=40, length=10), (np.zeros(0, dtype=np.int64), np.zeros(0))]
    T = 4
    m = StickBreakingHDP(6, 40, seed=0, doc_topics=T, batch_size=20, window=200, learn_concentrations=True)
    q0, rho, mult = m.alpha_q_.copy(), m._rho(0), 200 / 20
    m.partial_fit(docs)
    assert m.alpha_q_[0] == pytest.approx((1 - rho) * q0[0] + rho * (1.0 + mult * 19 * (T - 1)), rel=1e-12)
    # the rate term: each document's Σ_t E[−log(1 − π'_t)] > 0
    assert m.alpha_q_[1] > (1 - rho) * q0[1] + rho * 1.0


# ----------------------------------------------------------------------------------------- wiring, state
@pytest.mark.parametrize("cls", [OnlineHDP, StickBreakingHDP])
def test_off_by_default_and_settings_used_unchanged(cls: type[OnlineHDPBase]) -> None:
    docs = _corpus(3, n_docs=40, W=60, length=20)
    a = cls(8, 60, seed=0, batch_size=20, window=100, gamma=2.0, alpha=0.5).partial_fit(docs)
    assert a.learn_concentrations is False
    assert a.diagnostics()["gamma"] == 2.0 and a.diagnostics()["alpha"] == 0.5
    b = cls(8, 60, seed=0, batch_size=20, window=100, gamma=2.0, alpha=0.5, learn_concentrations=True)
    assert b._gamma() == pytest.approx(2.0) and b._alpha() == pytest.approx(0.5)  # learning starts there
    b.partial_fit(docs)
    assert b._gamma() != pytest.approx(2.0) and b._alpha() != pytest.approx(0.5)


@pytest.mark.parametrize("cls", [OnlineHDP, StickBreakingHDP])
def test_learned_state_round_trips_and_old_snapshots_load(cls: type[OnlineHDPBase]) -> None:
    docs = _corpus(3, n_docs=80, W=60, length=20)
    kw = {"batch_size": 20, "window": 200, "max_iter": 10, "learn_concentrations": True}
    a = cls(8, 60, seed=3, **kw).partial_fit(docs[:40])
    b = cls.from_state(a.state_dict())
    a.partial_fit(docs[40:])
    b.partial_fit(docs[40:])
    for key, value in a.state_dict()["state"].items():
        assert np.array_equal(value, b.state_dict()["state"][key]), key
    old = cls(8, 60, seed=3, **{**kw, "learn_concentrations": False}).partial_fit(docs[:40]).state_dict()
    del old["state"]["gamma_q"], old["state"]["alpha_q"]
    restored = cls.from_state(old)
    assert restored._gamma() == 1.0 and restored.set_params(learn_concentrations=True)._gamma() == pytest.approx(1.0)


def test_bad_concentration_settings_are_refused() -> None:
    for bad in ({"gamma_shape": 0.0}, {"gamma_rate": -1.0}, {"alpha_shape": float("inf")}, {"alpha_rate": 0.0}):
        for cls in (OnlineHDP, StickBreakingHDP):
            with pytest.raises(ValueError, match=next(iter(bad))):
                cls(10, 20, **bad)
    with pytest.raises(ValueError, match="learn_concentrations"):
        OnlineHDP(10, 20, learn_concentrations="yes")


# ----------------------------------------------------------------------------------------- what is learned
@pytest.mark.parametrize(("cls", "kw"), [(OnlineHDP, {"eta": 0.1}), (StickBreakingHDP, {"doc_topics": 5})])
def test_learned_gamma_is_smaller_for_few_topics_than_for_many(cls: type[OnlineHDPBase], kw: dict) -> None:
    learned = {}
    for n_topics in (2, 40):
        docs = _corpus(n_topics)
        m = cls(60, 800, seed=0, window=len(docs), batch_size=100, max_iter=30, learn_concentrations=True, **kw)
        for d0 in range(0, len(docs), 100):
            m.partial_fit(docs[d0 : d0 + 100])
        learned[n_topics] = m._gamma()
    assert learned[2] < 0.85 * learned[40], learned
