"""The topic moves of ``kernels/_moves.py`` against the one-word-at-a-time versions of ``tests/naive/moves.py``,
and what the online HDP moves with them (its expected tables)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels._moves import Columns, birth_column, delete_column
from kernels.ohdp import OnlineHDP
from tests.naive import moves as naive
from tests.test_hygiene import lda_corpus


def _columns(rng: np.random.Generator, scale: float, scvb0_units: bool) -> tuple[Columns, np.ndarray]:
    """A random G = scale·M (9 words, 4 topics, a word topic 2 lacks) as SCVB0 (totals in count units) or the HDP
    (totals in units of M) hold it; and G itself."""
    M = rng.gamma(0.5, 2.0, size=(9, 4))
    M[3, 2] = 0.0
    unit = scale if scvb0_units else 1.0
    return Columns(M, M.sum(axis=0) * unit, unit, scale), M * scale


@pytest.mark.parametrize("scvb0_units", [True, False], ids=["scvb0", "hdp"])
def test_delete_matches_the_naive_move(scvb0_units: bool) -> None:
    rng = np.random.default_rng(0)
    cols, G = _columns(rng, 2.5, scvb0_units)
    prior = np.array([0.4, 0.1, 0.3, 0.2])
    got = delete_column(cols, 0.05, prior, 2, vocab=7)
    want = naive.delete(G, 0.05, prior, 2, vocab=7)
    np.testing.assert_allclose(cols.M * cols.scale, want, rtol=1e-12)
    np.testing.assert_allclose(cols.total * cols.scale / cols.total_unit, want.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(got * cols.scale, want.sum(axis=0) - G.sum(axis=0) + [0, 0, G[:, 2].sum(), 0])


@pytest.mark.parametrize("scvb0_units", [True, False], ids=["scvb0", "hdp"])
def test_birth_matches_the_naive_move_and_undoes_exactly(scvb0_units: bool) -> None:
    rng = np.random.default_rng(1)
    cols, G = _columns(rng, 0.5, scvb0_units)
    before = cols.M.copy(), cols.total.copy()
    ids = np.array([0, 3, 5, 8])
    want = np.array([0.2, 1.0, 50.0, 0.7])  # word 5 cannot give 50: it gives what the other topics hold
    moved, undo = birth_column(cols, 1, ids, want)
    expected = naive.birth(G, 1, ids, want)
    np.testing.assert_allclose(cols.M * cols.scale, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(cols.total * cols.scale / cols.total_unit, expected.sum(axis=0), rtol=1e-12)
    assert moved == pytest.approx(expected[:, 1].sum() - G[:, 1].sum(), rel=1e-12)
    undo()
    assert np.array_equal(cols.M, before[0]) and np.array_equal(cols.total, before[1])


def _hdp() -> OnlineHDP:
    truth, docs = lda_corpus(600, 6)
    model = OnlineHDP(12, truth.shape[1], seed=0, batch_size=100, window=600)
    model.partial_fit(docs)
    return model


def test_hdp_delete_moves_the_tables_where_the_tokens_go() -> None:
    """The deleted topic's expected tables go to the others in proportion to the tokens each received, so the
    total table count (β's statistic) is unchanged."""
    model = _hdp()
    k = int(np.argsort(model.tables_)[-3])
    tables, G = model.tables_.copy(), model.topic_stat_ * model.scale_
    model.delete_topic(k)
    received = (model.topic_stat_ * model.scale_ - G).sum(axis=0)
    received[k] = 0.0
    expected = tables + tables[k] * received / received.sum()
    expected[k] = 0.0
    np.testing.assert_allclose(model.tables_, expected, rtol=1e-9)
    assert model.tables_.sum() == pytest.approx(tables.sum(), rel=1e-12)


def test_hdp_birth_gives_the_new_topic_its_share_of_the_tables() -> None:
    """A birth that takes a fraction g of the window's tokens gives the new topic g of the tables, taken from every
    topic in proportion; undone exactly."""
    model = _hdp()
    k = int(np.argmin(model.topic_weights()))
    model.delete_topic(k)
    tables = model.tables_.copy()
    tokens = float(model.topic_total_.sum() * model.scale_)
    moved, undo = model.birth_topic(k, np.arange(10), np.full(10, 0.1), 0.05)
    g = moved / tokens
    assert 0.0 < g <= 0.05 + 1e-12
    expected = tables * (1 - g)
    expected[k] += g * tables.sum()
    np.testing.assert_allclose(model.tables_, expected, rtol=1e-12)
    undo()
    assert np.array_equal(model.tables_, tables)
