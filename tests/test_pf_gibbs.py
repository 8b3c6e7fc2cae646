"""The particle filter's Gibbs runs (``kernels._pf_gibbs``): the sampler against collapsed Gibbs by definition,
the initial sample, and the refinements while the buffer doubles (``docs/particle-filter.md``, "Initialisation"
and "Refinement")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from kernels import Batch, ParticleFilterLDA
from kernels import _pf_state as st
from kernels._pf_gibbs import Tokens, gibbs_chain, new_chain
from kernels._pf_rng import rng_below, rng_uniform, sample_cat, sample_cumulative
from tests.naive import pf as naive
from tests.pf_support import check_invariants, random_stream
from tests.synthetic import block_topics_corpus


def test_gibbs_chain_draws_each_topic_from_the_collapsed_conditional() -> None:
    """``gibbs_chain`` (the Gibbs start and every refinement) against collapsed Gibbs by definition
    (``naive.gibbs_sweeps``: each conditional a ratio of LDA joints), both drawing from the same random stream: the
    same topic for every token after three sweeps, and counts (with 1/(n_k + Wβ)) that match those topics. The
    local vocabulary (V = 5) is smaller than W = 9, as in a buffer, so Wβ must be the full vocabulary's."""
    K, V, W, alpha, beta = 3, 5, 9, 0.3, 0.2
    rng = np.random.default_rng(4)
    doc_of = np.repeat(np.arange(4), [5, 3, 6, 4]).astype(np.int64)
    words = rng.integers(0, V, doc_of.size).astype(np.int64)
    prng = np.array([11, 12, 13, 14], dtype=np.uint64)
    ref_rng = prng.copy()
    z = np.zeros(words.size, dtype=np.int64)
    chain = new_chain(4, V, K)
    gibbs_chain(Tokens(words, doc_of, z), chain, st.Prior(alpha, beta, W * beta), 3, True, prng)
    start = [rng_below(ref_rng, K) for _ in range(words.size)]
    expected = naive.gibbs_sweeps(
        words.tolist(), doc_of.tolist(), start, K, W, alpha, beta, 3, lambda: rng_uniform(ref_rng)
    )
    assert z.tolist() == expected
    nwk, ndk = np.zeros((V, K), np.int64), np.zeros((4, K), np.int64)
    np.add.at(nwk, (words, z), 1)
    np.add.at(ndk, (doc_of, z), 1)
    np.testing.assert_array_equal(chain.nwk, nwk)
    np.testing.assert_array_equal(chain.ndk, ndk)
    np.testing.assert_array_equal(chain.nk, nwk.sum(axis=0))
    np.testing.assert_allclose(chain.inv, 1.0 / (nwk.sum(axis=0) + W * beta), rtol=1e-15)


def test_bisection_draws_what_the_linear_scan_draws() -> None:
    """``sample_cumulative`` (bisection over running sums, Gibbs) draws the same topic as ``sample_cat`` (a
    linear scan, the filter) from the same random number, zero masses included."""
    rng = np.random.default_rng(5)
    a, b = np.array([1, 2, 3, 4], dtype=np.uint64), np.array([1, 2, 3, 4], dtype=np.uint64)
    for _ in range(2000):
        K = int(rng.integers(1, 12))
        q = rng.random(K) * (rng.random(K) < 0.7)
        q[rng.integers(0, K)] += 0.1
        assert sample_cumulative(np.cumsum(q), K, a) == sample_cat(q, K, float(q.sum()), b)


def test_initialisation_buffer_and_mixtures() -> None:
    """Before initialisation documents get the prior mean; the batch that fills the buffer gets Gibbs mixtures
    for its buffered documents and filtered mixtures for the rest; the sample's tokens are in the counts."""
    K = 3
    m = ParticleFilterLDA(
        K, 30, 0, n_particles=4, ess_threshold=0.5, init_docs=5, init_sweeps=20, init_restarts=3,
        reservoir_size=20,
    )  # fmt: skip
    th = m.partial_fit_transform(random_stream(3, 6, 30, 0))
    np.testing.assert_allclose(th, 1.0 / K)
    assert m.diagnostics()["initialized"] == 0.0 and m.particles_.nk.sum() == 0
    th = m.partial_fit_transform(random_stream(4, 6, 30, 1))
    assert m.diagnostics()["initialized"] == 1.0
    np.testing.assert_allclose(th.sum(axis=1), 1.0)
    assert not np.allclose(th, 1.0 / K)
    assert np.all(m.particles_.nk.sum(axis=1) == 7 * 6)  # 5 initial documents + 2 filtered, 6 tokens each
    assert m.particles_.ctr[st.FILL] == 20 and m.particles_.ctr[st.TOKENS] == 42
    check_invariants(m)
    # The token cap ends buffering early.
    capped = ParticleFilterLDA(
        K, 30, 0, n_particles=2, ess_threshold=0.6, init_docs=100, init_max_tokens=10, init_sweeps=5
    )
    capped.partial_fit(random_stream(4, 4, 30, 2))
    assert capped.initialized_ and capped.particles_.nk[0].sum() == 16


@pytest.mark.parametrize("batch_size", [1, 5, 12])
def test_a_refinement_ended_by_the_token_cap_keeps_every_token(batch_size: int) -> None:
    """When the buffer's tokens run out mid-batch (a document does not fit: the last Gibbs run, which every
    particle restarts from), every token of the stream is still in every particle's counts and in the reservoir's
    count of tokens seen, whatever the batches: the documents past the cap are filtered after the run."""
    m = ParticleFilterLDA(
        3, 30, 0, n_particles=4, ess_threshold=0.5, init_docs=2, refine_docs=16, init_max_tokens=60,
        init_sweeps=5, reservoir_size=20,
    )  # fmt: skip
    stream = random_stream(12, 10, 30, 3)
    for lo in range(0, 12, batch_size):
        m.partial_fit(stream.slice(lo, min(12, lo + batch_size)))
    assert m.gibbs_at_ == 0 and m.buf_docs_ == 0  # the cap ended refining (6 documents of 10 tokens fit)
    assert np.all(m.particles_.nk.sum(axis=1) == 120)
    assert m.particles_.ctr[st.TOKENS] == 120
    check_invariants(m)


def _planted_cosines(m: ParticleFilterLDA, phi: np.ndarray) -> np.ndarray:
    """Cosine of each planted topic with the learned topic matched to it (best one-to-one matching)."""
    est = m.topic_word()
    sim = (est / np.linalg.norm(est, axis=1, keepdims=True)) @ (phi / np.linalg.norm(phi, axis=1, keepdims=True)).T
    r, c = linear_sum_assignment(-sim)
    return np.asarray(sim[r, c])


def test_refinement_doubles_keeps_slots_and_recovers_what_a_small_start_muddles() -> None:
    """From a 10-document start, Gibbs runs again when the buffer reaches 20, 40, …, 320 and 400 documents
    (``refine_docs``), then the buffer is emptied; each run keeps every topic in its slot (the best matching of
    the topics before and after is the identity); the refined model recovers all 8 planted topics, which the
    10-document start alone does not."""
    phi, docs = block_topics_corpus(seed=0, n_docs=800)
    refined = ParticleFilterLDA(8, 240, 0, init_docs=10, refine_docs=400)
    alone = ParticleFilterLDA(8, 240, 0, init_docs=10, refine_docs=0)
    due, prev = [refined.gibbs_at_], None
    for i in range(0, 800, 20):
        batch = Batch.from_docs(docs[i : i + 20])
        before = refined.gibbs_at_
        refined.partial_fit(batch)
        alone.partial_fit(batch)
        now = refined.topic_word()
        if refined.gibbs_at_ != before:
            due.append(refined.gibbs_at_)
            if prev is not None:
                dist = 1 - np.sqrt(prev) @ np.sqrt(now).T  # squared Hellinger distances, before × after
                rows, cols = linear_sum_assignment(dist)
                np.testing.assert_array_equal(cols, rows)
        prev = now
        check_invariants(refined)
    # 10 and 20 both fall in the first batch.
    assert due == [10, 40, 80, 160, 320, 400, 0]
    assert refined.diagnostics()["buffered_docs"] == 0 and not refined.buf_words_.any() and not refined.buf_z_.any()
    assert np.all(refined.particles_.ctr[st.RESAMPLES] > 0)
    assert _planted_cosines(refined, phi).min() > 0.99
    assert alone.gibbs_at_ == 0 and _planted_cosines(alone, phi).min() < 0.9


def test_reset_words_keeps_the_buffered_topics_with_their_tokens() -> None:
    """Dropping a word from the Gibbs buffer mid-refinement drops the topics of its tokens with it."""
    m = ParticleFilterLDA(3, 30, 0, n_particles=4, ess_threshold=0.5, init_docs=4, refine_docs=64, init_sweeps=10)
    m.partial_fit(random_stream(6, 8, 10, 0))  # Gibbs at 4 documents, 6 buffered, the next run at 8
    assert m.gibbs_docs_ == 4 and m.buf_docs_ == 6
    known = int(m.buf_doc_ptr_[m.gibbs_docs_])
    words, z = m.buf_words_[:known].copy(), m.buf_z_[:known].copy()
    gone = int(np.bincount(words).argmax())
    m.reset_words([gone])
    kept = words != gone
    assert 0 < kept.sum() < known
    np.testing.assert_array_equal(m.buf_words_[: kept.sum()], words[kept])
    np.testing.assert_array_equal(m.buf_z_[: kept.sum()], z[kept])
    assert int(m.buf_doc_ptr_[m.gibbs_docs_]) == kept.sum()
    m.partial_fit(random_stream(4, 8, 10, 1))  # the refinement at 8 documents runs on what is left
    assert m.gibbs_at_ == 16
    check_invariants(m)


def test_snapshots_from_before_refinement_load_and_never_refine() -> None:
    """A state written before ``refine_docs`` existed (no such setting, no ``buf_z``, ``gibbs_*``) loads as
    ``refine_docs = 0`` and continues exactly like a model with that setting."""
    params = {**ParticleFilterLDA._unit_test_params(), "refine_docs": 0}
    m = ParticleFilterLDA(4, 40, 3, **params)
    m.partial_fit(random_stream(2, 5, 40, 0))  # mid-buffer
    old = m.state_dict()
    del old["params"]["refine_docs"]
    for key in ("buf_z", "gibbs_docs", "gibbs_at"):
        del old["state"][key]
    r = ParticleFilterLDA.from_state(old)
    assert r.refine_docs == 0
    for x in (random_stream(6, 5, 40, 1), random_stream(8, 7, 40, 2)):
        np.testing.assert_array_equal(m.partial_fit_transform(x), r.partial_fit_transform(x))
    assert r.gibbs_at_ == 0 and r.initialized_
