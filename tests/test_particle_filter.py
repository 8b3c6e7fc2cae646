"""Tests of the reservoir particle filter (``kernels.particle_filter`` and its numba modules ``kernels._pf_*``).

Brute-force references are in ``tests/naive/pf.py``. Exactness checks use tiny vocabularies and a handful of
tokens, so that every topic assignment can be enumerated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from kernels import ALGORITHMS, ParticleFilterLDA
from kernels import _pf_state as st
from kernels._pf_filter import proposal
from tests.naive import pf as naive
from tests.pf_support import batch_of, check_invariants, ndk_of, random_stream, reservoir_tokens, single_token_docs


# ------------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize(("seed", "ess_threshold"), [(0, 0.6), (1, 0.6), (2, 0.9)])
def test_matches_dense_reference_filter(seed: int, ess_threshold: float) -> None:
    """Steps 1–6 end to end: the kernel (copy-on-write rows, document slots, divergent lists, partial copies on
    resampling) gives exactly the counts, and to rounding the mixtures and weights, of a filter with dense
    per-particle counts that copies whole particles (``naive.DenseFilter``), drawing the same random numbers."""
    K, W, P, R, r, alpha, beta = 3, 12, 4, 15, 3, 0.3, 0.05
    m = ParticleFilterLDA(
        K, W, seed, n_particles=P, ess_threshold=ess_threshold, n_rejuvenate=r, reservoir_size=R, alpha=alpha,
        beta=beta, init_docs=0, pool_factor=float(P),
    )  # fmt: skip
    ref = naive.DenseFilter(K, W, P, alpha, beta, ess_threshold, r, R, m.particles_.prng.copy())
    rng = np.random.default_rng(seed)
    for _ in range(4):
        docs = []
        for _ in range(8):
            ids = np.unique(rng.integers(0, W, int(rng.integers(0, 6))))
            docs.append((ids, rng.integers(1, 4, ids.size).astype(np.float64)))
        theta = m.partial_fit_transform(docs)
        expected = [ref.fit_document(ids.tolist(), c.astype(int).tolist()) for ids, c in docs]
        np.testing.assert_allclose(theta, np.array(expected), rtol=1e-12)
    for p in range(P):
        np.testing.assert_array_equal(m.words_.rows[m.words_.ptr[:, p]].T, ref.nkw[p])
    np.testing.assert_array_equal(m.particles_.nk, ref.nk)
    np.testing.assert_allclose(m.particles_.weights, ref.weights, rtol=1e-12)
    d = m.diagnostics()
    assert d["resamples"] > 0 and d["rejuvenations"] > 0 and d["collapses"] == 0 and d["reservoir_tokens"] == R
    check_invariants(m)


@pytest.mark.parametrize("seed", [0, 1])
def test_proposal_and_counts_match_brute_force(seed: int) -> None:
    """Step 1–2: the kernel's proposal and incremental weight equal the ratios of full collapsed joints, for
    counts that the filter itself produced (with resampling and rejuvenation)."""
    K, W, alpha, beta = 3, 4, 0.3, 0.2
    m = ParticleFilterLDA(
        K, W, seed, n_particles=3, ess_threshold=0.99, rejuvenation="history", n_rejuvenate=4,
        history_tokens=64, history_docs=8, alpha=alpha, beta=beta, init_docs=0, pool_factor=3.0,
    )  # fmt: skip
    m.partial_fit(batch_of([[0, 1, 1, 2], [3, 3, 0, 2, 1], [2, 0]]))
    assert (
        m.particles_.ctr[st.FILL] == 11
        and m.particles_.ctr[st.RESAMPLES] > 0
        and m.particles_.ctr[st.REJUVENATIONS] > 0
    )
    q = np.empty(K)
    for p in range(3):
        words, slots, z = reservoir_tokens(m, p)
        # The counts are exactly those implied by the particle's assignments.
        nkw = np.zeros((K, W), dtype=np.int64)
        np.add.at(nkw, (z, words), 1)
        np.testing.assert_array_equal(m.words_.rows[m.words_.ptr[:, p]].T, nkw)
        for s in set(slots):
            zs = [k for k, t in zip(z, slots, strict=True) if t == s]
            np.testing.assert_array_equal(ndk_of(m, s, p), np.bincount(zs, minlength=K))
        for w_new in range(W):
            for s in [slots[-1], 7]:  # an existing document, and a new one (slot 7 unused: empty counts)
                nd = float(m.doc_rows_.slot_len[s]) if s in slots else 0.0
                ndk = ndk_of(m, s, p) if s in slots else np.zeros(K, dtype=np.int32)
                total = proposal(
                    m.words_.rows,
                    int(m.words_.ptr[w_new, p]),
                    m.particles_.nk[p],
                    ndk,
                    nd,
                    st.Prior(alpha, beta, W * beta),
                    q,
                )
                ref_q, ref_w = naive.proposal(words, slots, z, w_new, s, K, W, alpha, beta)
                np.testing.assert_allclose(np.diff(q, prepend=0.0) / total, ref_q, rtol=1e-10, atol=1e-15)
                assert q[-1] == total == pytest.approx(ref_w, rel=1e-12)


def test_weight_estimate_matches_exact_marginal() -> None:
    """The filter's evidence estimate Π_i Σ_p ω^(p) Σ_k q_k^(p) is unbiased for P(w_1..w_n): its mean over
    many seeded runs (with resampling and reservoir rejuvenation active) matches the enumerated marginal."""
    K, W, alpha, beta = 2, 3, 0.5, 0.3
    docs = [[0, 0, 1], [2, 1, 2, 0], [1, 1]]
    words = [w for d in docs for w in d]
    doc_of = [i for i, d in enumerate(docs) for _ in d]
    exact = naive.exact_log_marginal(words, doc_of, K, W, alpha, beta)
    batch = batch_of(docs)
    ratios, rejuvenations = [], 0
    for seed in range(2000):
        m = ParticleFilterLDA(
            K, W, seed, n_particles=8, ess_threshold=0.99, n_rejuvenate=3, reservoir_size=4, alpha=alpha,
            beta=beta, init_docs=0,
        )  # fmt: skip
        m.partial_fit(batch)
        ratios.append(math.exp(m.log_evidence_ - exact))
        rejuvenations += int(m.particles_.ctr[st.REJUVENATIONS])
    assert rejuvenations > 2000  # resampling and rejuvenation were exercised
    r = np.asarray(ratios)
    se = r.std(ddof=1) / math.sqrt(r.size)
    assert se < 0.01
    assert abs(r.mean() - 1.0) < 4 * se, (r.mean(), se)
    # One run with many particles is close too (consistency).
    m = ParticleFilterLDA(K, W, 0, n_particles=2000, alpha=alpha, beta=beta, init_docs=0)
    m.partial_fit(batch)
    assert m.log_evidence_ == pytest.approx(exact, abs=0.01)


def test_log_evidence_per_token_divides_by_the_tokens_filtered() -> None:
    """The evidence sums the predictive log-probabilities of the tokens the filter scored, not of the Gibbs
    sample's (nor of a refinement's new sample): the per-token diagnostic divides by those, also after a
    snapshot's round trip. (Divided by every token seen, it read a third of the true value here.)"""
    init, refine, n, length = 20, 80, 200, 5
    m = ParticleFilterLDA(3, 40, 0, n_particles=8, init_docs=init, refine_docs=refine)
    m.partial_fit(random_stream(n, length, 40, 0))
    filtered = (n - init) * length  # from the first document after the initial sample, refinements included
    assert m.diagnostics()["log_evidence_per_token"] == pytest.approx(m.log_evidence_ / filtered, rel=1e-12)
    assert m.log_evidence_ / filtered < -math.log(40) / 2  # a sensible value: near log(1/W), far below 0
    r = ParticleFilterLDA.from_state(m.state_dict())
    more = random_stream(10, length, 40, 1)
    m.partial_fit(more)
    r.partial_fit(more)
    for model in (m, r):
        expected = model.log_evidence_ / (filtered + 10 * length)
        assert model.diagnostics()["log_evidence_per_token"] == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------------------------------ reservoir
def _chi2_uniform(hits: np.ndarray, expected: float) -> float:
    return float(stats.chisquare(hits, np.full(hits.size, expected)).pvalue)


def test_reservoir_keeps_every_token_with_probability_R_over_i() -> None:
    """Algorithm R through the whole kernel: after i tokens each is in the reservoir with probability R/i
    (chi-square over many runs, at i = 100 and i = 300), like an independent numpy implementation."""
    n1, n, R, runs = 100, 300, 30, 400
    hits1 = np.zeros(n1, dtype=np.int64)
    hits = np.zeros(n, dtype=np.int64)
    first, rest = single_token_docs(0, n1), single_token_docs(n1, n - n1)
    for seed in range(runs):
        m = ParticleFilterLDA(2, n, seed, n_particles=1, n_rejuvenate=0, reservoir_size=R, init_docs=0, pool_factor=1.0)
        m.partial_fit(first)
        assert m.particles_.ctr[st.FILL] == R
        hits1[m.reservoir_.res_w] += 1
        m.partial_fit(rest)
        assert m.particles_.ctr[st.FILL] == R and len(set(m.reservoir_.res_w.tolist())) == R
        # Every reservoir token keeps a document slot of its own (never the scratch slot).
        assert np.all(m.reservoir_.res_slot < m.doc_rows_.dptr.shape[0] - 1)
        hits[m.reservoir_.res_w] += 1
    assert _chi2_uniform(hits1, runs * R / n1) > 1e-3
    assert _chi2_uniform(hits, runs * R / n) > 1e-3
    ref = naive.reservoir_inclusion(n, R, runs, seed=1)
    assert _chi2_uniform(ref, runs * R / n) > 1e-3
    assert stats.chi2_contingency(np.vstack([hits, ref])).pvalue > 1e-3
    # The test has power: a real but wrong sampler (recent items admitted with probability 1.5·R/i) run the same
    # number of times is rejected by the same check.
    biased = naive.reservoir_inclusion(n, R, runs, seed=2, recency=1.5)
    assert _chi2_uniform(biased, runs * R / n) < 1e-3


def test_reservoir_stays_uniform_after_reset_words() -> None:
    """``reset_words`` empties the slots of the words it forgets; the tokens that follow must not take them all:
    each remaining token is still in the reservoir with probability R/i (i counts every token seen)."""
    n1, n, R, runs = 100, 300, 30, 400
    forgotten = np.arange(50)  # one word a token: these 50 tokens leave the reservoir
    hits = np.zeros(n, dtype=np.int64)
    emptied = 0
    first, rest = single_token_docs(0, n1), single_token_docs(n1, n - n1)
    for seed in range(runs):
        m = ParticleFilterLDA(2, n, seed, n_particles=1, n_rejuvenate=0, reservoir_size=R, init_docs=0, pool_factor=1.0)
        m.partial_fit(first)
        m.reset_words(forgotten)
        emptied += R - int(m.particles_.ctr[st.FILL])
        m.partial_fit(rest)
        kept = m.reservoir_.res_w[: m.particles_.ctr[st.FILL]]
        assert not np.isin(kept, forgotten).any()
        hits[kept] += 1
    assert emptied > runs * R // 3  # half the first 100 tokens were forgotten: about half the slots emptied
    # Every remaining token equally likely, R/i each (the slots still empty stand for forgotten tokens; filling
    # them with whatever came next would give the remaining tokens 30/250 = 48 runs each, and the first ones more).
    remaining = hits[50:]
    assert _chi2_uniform(remaining, remaining.mean()) > 1e-3
    assert abs(remaining.mean() - runs * R / n) < 2.0


def _array_bytes(value: object) -> int:
    """Bytes of the arrays in ``value`` (an array, or a bundle of arrays such as ``m.words_``)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, tuple):
        return sum(_array_bytes(v) for v in value)
    return 0


def test_memory_constant_over_stream() -> None:
    """State size and every array's size are the same after 10,000 and 100,000 documents (within 5%: exactly),
    and the count-row pool never needs more rows than it has."""
    m = ParticleFilterLDA(3, 200, 0, n_particles=4, ess_threshold=0.6, n_rejuvenate=5, reservoir_size=100, init_docs=20)

    def nbytes() -> tuple[int, int]:
        state = m.state_dict()["state"]
        s = sum(v.nbytes for v in state.values() if isinstance(v, np.ndarray))
        a = sum(_array_bytes(v) for v in vars(m).values())
        return s, a

    for b in range(10):
        m.partial_fit(random_stream(1000, 3, 200, b))
    at_10k = nbytes()
    for b in range(10, 100):
        m.partial_fit(random_stream(1000, 3, 200, b))
    at_100k = nbytes()
    assert m.n_docs_seen_ == 100_000 and m.diagnostics()["resamples"] > 100
    assert abs(at_100k[0] - at_10k[0]) <= 0.05 * at_10k[0]
    assert abs(at_100k[1] - at_10k[1]) <= 0.05 * at_10k[1]
    assert at_10k[1] == m.memory_bytes()
    assert m.diagnostics()["pool_peak_fill"] <= 1.0
    check_invariants(m)


def test_resampling_shares_rows_copy_on_write() -> None:
    """Copy on write: after many resamplings the pool holds far fewer rows than P × (words seen), a resampling
    copies pointers, not K·W counts, and the bookkeeping stays consistent, also through pool-full
    collapses."""
    P, K, W, R = 8, 20, 5000, 200
    m = ParticleFilterLDA(K, W, 3, n_particles=P, ess_threshold=0.5, n_rejuvenate=10, reservoir_size=R, init_docs=10)
    for b in range(20):
        m.partial_fit(random_stream(50, 20, W, b))
    d = m.diagnostics()
    assert d["resamples"] > 50
    rows_used = d["pool_fill"] * (m.words_.rows.shape[0] - 1)
    seen = np.count_nonzero(m.words_.ptr.max(axis=1))
    assert rows_used < 0.5 * P * seen
    # Copying whole particles (a plain P·(K·W + R + R·K) layout) writes (P - 1)·(K·W + R + R·K) numbers.
    dense_bytes_per_resample = (P - 1) * (K * W + R + R * K) * 4
    assert d["resample_copied_mb"] * 1e6 / d["resamples"] < 0.2 * dense_bytes_per_resample
    check_invariants(m)
    tight = ParticleFilterLDA(4, 60, 1, n_particles=6, ess_threshold=0.9, n_rejuvenate=5, init_docs=0)
    for b in range(30):
        tight.partial_fit(random_stream(20, 10, 60, 100 + b))
        check_invariants(tight)
    assert tight.diagnostics()["collapses"] > 0
    theta = tight.transform(random_stream(5, 10, 60, 7))
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)


# ------------------------------------------------------------------------------------------ behaviour
def _dense_counts(m: ParticleFilterLDA, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Particle p's n_kw (W×K) and n_dk of every document slot (D×K), read through its row pointers."""
    return m.words_.rows[m.words_.ptr[:, p]].astype(np.int64), m.doc_rows_.drows[m.doc_rows_.dptr[:, p]]


def test_merge_relabels_every_token_of_one_topic_in_every_particle() -> None:
    """After ``merge_topics(a, b)`` each particle's counts are what its assignments would give with b read as a:
    column a holds both, column b none, the other columns are unchanged; the reservoir's z and the Gibbs buffer's
    topics say a where they said b; the pools stay consistent and the filter goes on from there."""
    m = ParticleFilterLDA(4, 30, 0, n_particles=4, ess_threshold=0.6, init_docs=4, refine_docs=64, init_sweeps=10)
    m.partial_fit(random_stream(12, 8, 30, 0))  # refined at 8 documents; 12 buffered, the next run at 16
    assert m.gibbs_at_ == 16 and m.gibbs_docs_ == 8
    a, b = 2, 1
    before = [_dense_counts(m, p) for p in range(m.n_particles)]
    nk, weights = m.particles_.nk.copy(), m.topic_weights()
    fill = int(m.particles_.ctr[st.FILL])
    res_z = m.reservoir_.res_z[:fill].copy()
    known = int(m.buf_doc_ptr_[m.gibbs_docs_])
    buf_z = m.buf_z_[:known].copy()
    assert (res_z == b).any() and (buf_z == b).any()
    m.merge_topics(a, b)
    for p in range(m.n_particles):
        for old, new in zip(before[p], _dense_counts(m, p), strict=True):
            np.testing.assert_array_equal(new[:, a], old[:, a] + old[:, b])
            assert not new[:, b].any()
            keep = [k for k in range(4) if k not in (a, b)]
            np.testing.assert_array_equal(new[:, keep], old[:, keep])
    np.testing.assert_array_equal(m.particles_.nk[:, a], nk[:, a] + nk[:, b])
    np.testing.assert_allclose(m.topic_weights()[a], weights[a] + weights[b])
    assert m.topic_weights()[b] == 0.0
    np.testing.assert_array_equal(m.reservoir_.res_z[:fill], np.where(res_z == b, a, res_z))
    np.testing.assert_array_equal(m.buf_z_[:known], np.where(buf_z == b, a, buf_z))
    check_invariants(m)
    m.partial_fit(random_stream(6, 8, 30, 1))  # the refinement at 16 documents starts from the merged topics
    assert m.gibbs_at_ == 32
    check_invariants(m)
    with pytest.raises(ValueError, match="into itself"):
        m.merge_topics(a, a)
    with pytest.raises(ValueError, match="topic id"):
        m.merge_topics(0, 4)


def test_recovers_planted_topics() -> None:
    """Two topics with disjoint vocabularies, no Gibbs initialisation: the filter separates them."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    docs = [rng.integers(0, 10, 15) + 10 * lab for lab in labels]
    m = ParticleFilterLDA(2, 20, 0, n_particles=8, init_docs=0)
    theta = m.partial_fit_transform(batch_of([d.tolist() for d in docs]))
    pred = theta[100:].argmax(axis=1)
    acc = max(np.mean(pred == labels[100:]), np.mean(pred != labels[100:]))
    assert acc > 0.95
    phi = m.topic_word()
    np.testing.assert_allclose(phi.sum(axis=1), 1.0)
    assert max(phi[0, :10].sum(), phi[0, 10:].sum()) > 0.9


def test_reproducible_and_state_round_trip() -> None:
    """Same seed → identical state; from_state(state_dict()) continues bit-identically, also mid-buffer."""
    params = ParticleFilterLDA._unit_test_params()
    batches = [random_stream(2, 5, 40, 0), random_stream(3, 5, 40, 1), random_stream(8, 7, 40, 2)]
    a = ParticleFilterLDA(4, 40, 11, **params)
    b = ParticleFilterLDA(4, 40, 11, **params)
    c = ParticleFilterLDA(4, 40, 12, **params)
    for x in batches:
        a.partial_fit(x)
        b.partial_fit(x)
        c.partial_fit(x)
    sa, sb = a.state_dict()["state"], b.state_dict()["state"]
    for key, v in sa.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(v, sb[key])
        else:
            assert v == sb[key]
    assert not np.array_equal(sa["res_z"], c.state_dict()["state"]["res_z"])
    # Restore mid-buffer (after batch 0: 2 of init_docs = 3 documents) and mid-refinement (after batch 1:
    # initialised at 3 documents, 5 buffered, the next Gibbs run due at 6).
    for cut in (1, 2):
        m = ParticleFilterLDA(4, 40, 5, **params)
        for x in batches[:cut]:
            m.partial_fit(x)
        r = ParticleFilterLDA.from_state(m.state_dict())
        for x in batches[cut:]:
            np.testing.assert_array_equal(m.partial_fit_transform(x), r.partial_fit_transform(x))
        np.testing.assert_array_equal(m.words_.ptr, r.words_.ptr)
        np.testing.assert_array_equal(m.particles_.prng, r.particles_.prng)


def test_reset_words_forgets() -> None:
    m = ParticleFilterLDA(3, 30, 0, n_particles=4, ess_threshold=0.5, init_docs=4, init_sweeps=10, reservoir_size=40)
    m.partial_fit(random_stream(30, 8, 10, 0))  # words 0..9 only
    before = m.topic_word()[:, 4].sum()
    m.reset_words([4])
    after = m.topic_word()[:, 4].sum()
    assert after * 10 <= before
    assert 4 not in m.reservoir_.res_w[: m.particles_.ctr[st.FILL]].tolist()
    check_invariants(m)
    m.partial_fit(random_stream(10, 8, 10, 1))
    check_invariants(m)


def test_registered_and_validates() -> None:
    assert ALGORITHMS["pf"] is ParticleFilterLDA
    for bad in (
        {"n_particles": 0},
        {"ess_threshold": 0.0},
        {"rejuvenation": "all"},
        {"n_rejuvenate": -1},
        {"reservoir_size": 0},
        {"alpha": 0.0},
        {"beta": float("nan")},
        {"init_docs": 1.5},
        {"init_holdout": 1.0},
        {"pool_factor": 0.5},
        {"n_particles": 2, "pool_factor": 3.0},
    ):
        with pytest.raises(ValueError):
            ParticleFilterLDA(3, 10, 0, **bad)
    m = ParticleFilterLDA(3, 10, 0, init_docs=0)
    with pytest.raises(ValueError):
        m.partial_fit([([10], [1.0])])
    assert m.partial_fit_transform([]).shape == (0, 3)
    th = m.partial_fit_transform([(np.zeros(0, dtype=np.int64), np.zeros(0))])
    np.testing.assert_allclose(th, 1.0 / 3)


@pytest.mark.parametrize("P", [2, 3, 4, 5])
def test_ess_threshold_must_allow_resampling(P: int) -> None:
    """ESS ≥ 1, so with ess_threshold·P ≤ 1 (the default P/5 for P ≤ 5) resampling could never trigger: that is
    refused with a clear message; above 1/P the filter does resample and rejuvenate."""
    with pytest.raises(ValueError, match="resampling could never trigger"):
        ParticleFilterLDA(3, 20, 0, n_particles=P, ess_threshold=0.2)
    with pytest.raises(ValueError, match="ess_threshold > 1/n_particles"):
        ParticleFilterLDA(3, 20, 0, n_particles=P, ess_threshold=1.0 / P)
    m = ParticleFilterLDA(3, 20, 0, n_particles=P, ess_threshold=min(1.0, 1.0 / P + 0.3), n_rejuvenate=3, init_docs=0)
    m.partial_fit(random_stream(40, 10, 20, P))
    assert m.diagnostics()["resamples"] > 0 and m.diagnostics()["rejuvenations"] > 0
    check_invariants(m)
    ParticleFilterLDA(3, 20, 0, n_particles=1, ess_threshold=0.2, pool_factor=1.0)  # one particle: no resampling


def test_counts_the_filter_cannot_hold_as_tokens_are_refused_and_nothing_changes() -> None:
    """The filter samples a topic per token: a count of 1e19 wrapped to a negative token total (the evidence per
    token went from −1.2 to −25 for good) and 1e12 asked for 7 TiB. Both are refused before any state changes."""
    import copy

    from kernels.particle_filter import MAX_BATCH_TOKENS, MAX_DOC_TOKENS

    m = ParticleFilterLDA(n_topics=3, n_words=10, init_docs=0, seed=0)
    m.partial_fit([([1, 2], [3.0, 1.0])] * 5)
    before = copy.deepcopy(m.state_dict())
    for count in (1e19, 1e12, MAX_DOC_TOKENS + 1.0):
        with pytest.raises(ValueError, match=r"document 1 has .* tokens"):
            m.partial_fit_transform([([1], [1.0]), ([1, 2], [count, 1.0])])
    many = [([1], [float(MAX_DOC_TOKENS)])] * (MAX_BATCH_TOKENS // MAX_DOC_TOKENS + 1)
    with pytest.raises(ValueError, match=r"the batch has .* tokens"):
        m.partial_fit(many)
    after = m.state_dict()
    assert set(after) == set(before)
    for key, value in before.items():
        np.testing.assert_equal(after[key], value)
    assert m.transform([([1, 2], [1e19, 1.0])]).shape == (1, 3)  # transform weighs counts; nothing is sampled


def test_initialize_from_checks_its_documents_like_partial_fit() -> None:
    """Its only way in that skipped the checks: an id of 10^6 in a vocabulary of 10 wrote out of bounds (a
    segfault, or silently)."""
    m = ParticleFilterLDA(n_topics=3, n_words=10, seed=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.initialize_from([([10**6], [1.0])], [0])
    theta = m.initialize_from([([1, 2], [2.0, 1.0])], [0, 0, 1])  # pairs, as every other method takes
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)


def test_no_topics_before_the_initial_sample_then_the_gibbs_runs_mixtures() -> None:
    """What README's "Events" says of the service's first outputs: batches that end before the initial sample
    (``init_docs``) is complete get the uniform mixture; the batch that completes it gets the Gibbs run's."""
    from tests.synthetic import block_topics_corpus

    _, docs = block_topics_corpus(seed=1, n_docs=260)
    m = ParticleFilterLDA(n_topics=8, n_words=240, seed=0, n_particles=10, init_docs=200)
    early = m.partial_fit_transform(docs[:150])
    np.testing.assert_array_equal(early, np.full((150, 8), 1 / 8))
    completing = m.partial_fit_transform(docs[150:260])
    assert completing[:50].max(axis=1).min() > 0.2  # the sample's last 50 documents: the Gibbs run's mixtures
    assert completing[50:].max(axis=1).min() > 0.2  # then filtered
