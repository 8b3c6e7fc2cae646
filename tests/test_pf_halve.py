"""The particle filter's topic–word counts are halved before an int32 count could wrap (``kernels/_pf_halve.py``),
and whenever they hold more than ``window`` tokens, so that the filter follows the stream.

A real stream needs days at full speed to reach the int32 limit, so these tests lower it; the halving itself is
checked against what it must keep: the copy-on-write bookkeeping, n_k = Σ_w n_kw, the reservoir's tokens in their
counts, and the topics."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import ParticleFilterLDA, _pf_halve
from kernels import _pf_state as st
from kernels.hygiene import hellinger_matrix
from tests.pf_support import batch_of, check_invariants, random_stream, reservoir_tokens
from tests.test_hygiene import lda_corpus


def _planted_docs(rng: np.random.Generator, n: int) -> list[list[int]]:
    """Three topics on disjoint words 0–9, 10–19, 20–29; each document 20 tokens of one topic."""
    return [(rng.integers(0, 10, 20) + 10 * rng.integers(0, 3)).tolist() for _ in range(n)]


def _model() -> ParticleFilterLDA:
    return ParticleFilterLDA(3, 30, 0, n_particles=6, reservoir_size=200, n_rejuvenate=10, init_docs=20)


def _check_reservoir_floor(m: ParticleFilterLDA) -> None:
    """Every particle's count of (word, topic) holds at least its reservoir tokens with that word and topic."""
    words = m.words_
    for p in range(m.n_particles):
        w, _, z = reservoir_tokens(m, p)
        held = np.zeros((m.n_words, m.n_topics), dtype=np.int64)
        np.add.at(held, (np.asarray(w), np.asarray(z)), 1)
        counts = words.rows[words.ptr[:, p]]
        assert np.all(counts >= held)


def test_halving_keeps_the_topics_and_every_invariant() -> None:
    rng = np.random.default_rng(0)
    m = _model()
    m.partial_fit(batch_of(_planted_docs(rng, 400)))
    phi = m.topic_word()
    before = m.words_.rows.copy()
    used = m.words_.refcnt > 0
    _pf_halve.halve_counts(m._bundles())
    after = m.words_.rows
    assert np.all(after[used] >= before[used] // 2)  # halved, rounded down, or raised to the reservoir's floor
    assert np.all(after[used] <= np.maximum(before[used] // 2, m.reservoir_size))
    assert after[used].sum() < 0.6 * before[used].sum()
    check_invariants(m)  # n_k = Σ_w n_kw again, the pools untouched
    _check_reservoir_floor(m)
    # The topics stay where they were (only small counts move: a count of 1 goes, unless the reservoir holds it).
    assert np.diag(hellinger_matrix(np.vstack([phi, m.topic_word()]))[:3, 3:]).max() < 0.05
    # Rejuvenation keeps taking reservoir tokens out of their counts: no count goes negative.
    for _ in range(5):
        m.partial_fit(batch_of(_planted_docs(rng, 100)))
        check_invariants(m)


def test_counts_are_halved_before_a_batch_could_pass_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the limit lowered to 1,000, a stream of 60,000 tokens keeps every count below it, each batch of 500
    tokens included, and the filter still tells the three planted topics apart."""
    monkeypatch.setattr(_pf_halve, "COUNT_LIMIT", 1_000)
    rng = np.random.default_rng(1)
    m = _model()
    halvings = 0
    for _ in range(120):
        top = int(m.words_.rows.max())
        m.partial_fit(batch_of(_planted_docs(rng, 25)))
        halvings += int(m.words_.rows.max()) < top
        assert m.words_.rows.max() <= 1_000
        check_invariants(m)
    assert halvings >= 3
    _check_reservoir_floor(m)
    phi = m.topic_word()
    blocks = np.array([[phi[k, 10 * b : 10 * b + 10].sum() for b in range(3)] for k in range(3)])
    assert sorted(blocks.argmax(axis=1).tolist()) == [0, 1, 2] and blocks.max(axis=1).min() > 0.9


def test_a_count_never_falls_below_the_reservoir_tokens_it_holds() -> None:
    """A reservoir larger than the stream holds every token, so each count is exactly its reservoir tokens:
    halving must leave them all as they are, or rejuvenation would later take tokens out of counts that no
    longer hold them (a negative count)."""
    rng = np.random.default_rng(2)
    m = ParticleFilterLDA(3, 30, 0, n_particles=6, reservoir_size=5_000, n_rejuvenate=10, init_docs=20)
    m.partial_fit(batch_of(_planted_docs(rng, 100)))
    assert m.particles_.ctr[st.FILL] == m.particles_.ctr[st.TOKENS] == 2_000
    before = m.words_.rows.copy()
    _pf_halve.halve_counts(m._bundles())
    np.testing.assert_array_equal(m.words_.rows, before)
    check_invariants(m)
    for _ in range(3):
        m.partial_fit(batch_of(_planted_docs(rng, 50)))
        check_invariants(m)


def test_a_window_lets_a_topic_that_starts_late_in_a_long_stream_be_learned() -> None:
    """Without forgetting, a topic that starts after N articles must outweigh the whole history, so the filter
    learns it ever more slowly as N grows (a long-stream review: 7 planted topics for 200,000 articles, then the
    8th; after 41,000 more it was still 0.51 from every learned topic). With a window of 1,000,000 tokens it was
    learned after 6,144 articles, the old topics intact. Here at a small scale: 6,000 articles of 7 topics (600,000
    tokens), then all 8; no refinement, so that Gibbs does not learn the new topic from its buffer."""
    phi, docs = lda_corpus(12_000, seed=3, late_topic=True)  # topic 7 from article 6,000 on

    def after(window: int, late_docs: int) -> tuple[float, float]:
        """(distance of the late topic, of the worst old topic) to their nearest learned topics."""
        m = ParticleFilterLDA(n_topics=8, n_words=400, seed=0, window=window, refine_docs=0)
        for start in range(0, 6000 + late_docs, 100):
            m.partial_fit(docs.slice(start, start + 100))
        if window:
            assert m.diagnostics()["model_tokens"] <= window + 100 * 100  # halved before the next batch
        nearest = hellinger_matrix(np.vstack([phi, m.topic_word()]))[:8, 8:].min(axis=1)
        return float(nearest[7]), float(nearest[:7].max())

    late, old = after(50_000, 1000)
    assert late < 0.25 and old < 0.25, (late, old)
    late, old = after(0, 1000)  # the counts hold every token: 690,000 by then
    assert late > 0.3 and old < 0.25, (late, old)


def test_after_a_refinement_the_counts_are_halved_down_to_the_window() -> None:
    """A Gibbs refinement installs its whole buffer in every particle (here 64 documents, 1,280 tokens); the next
    batch halves until the counts hold at most ``window`` tokens (or as few as the reservoir's tokens allow), not
    once a batch (a review's learner with a window of 20,000 tokens held 529,160 after its last refinement)."""
    m = ParticleFilterLDA(
        4, 30, 0, n_particles=4, ess_threshold=0.5, reservoir_size=50, init_docs=4, refine_docs=64, window=400
    )
    m.partial_fit(random_stream(64, 20, 30, 0))  # ends with the refinement at 64 documents
    assert m.gibbs_at_ == 0 and m.diagnostics()["model_tokens"] > 1000
    m.partial_fit(random_stream(1, 20, 30, 1))
    assert m.diagnostics()["model_tokens"] <= 400 + 20
    check_invariants(m)


def test_the_history_mode_keeps_its_own_memory_and_no_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rejuvenation="history"`` holds its documents' tokens in the counts, above any smaller window: halving
    there would cost a K×C scan every batch and free nothing, so the window is not applied."""
    halvings = []
    halve = _pf_halve.halve_counts
    monkeypatch.setattr(_pf_halve, "halve_counts", lambda state: (halvings.append(1), halve(state)))
    m = ParticleFilterLDA(3, 30, 0, rejuvenation="history", init_docs=0, window=100)
    for seed in range(4):
        m.partial_fit(random_stream(10, 20, 30, seed))
    assert m.diagnostics()["model_tokens"] == 4 * 10 * 20 and not halvings


def test_a_state_from_before_the_window_never_forgot_and_restores_as_such() -> None:
    """A snapshot written before ``window`` existed reads as ``window = 0`` (its model never forgot), so the
    service's restore names the change to the default as it applies it, rather than forgetting silently."""
    from service.compat import restore_plan
    from service.settings import load_settings
    from service.snapshot import pack, unpack
    from service.text import Vocabulary

    m = ParticleFilterLDA(4, 40, 3, **ParticleFilterLDA._unit_test_params())
    m.partial_fit(random_stream(6, 5, 40, 0))
    old = m.state_dict()
    del old["params"]["window"]
    assert ParticleFilterLDA.from_state(old).window == 0
    params = {k: v for k, v in m.get_params().items() if k not in ("n_topics", "n_words", "seed", "window")}
    s = load_settings(algorithm="pf", topics=4, vocab_size=40, seed=3, kernel_params=params)
    payload = unpack(pack({"kernel": old, "vocabulary": Vocabulary(40).state_dict(), "offsets": []}))
    plan = restore_plan(s, payload)
    assert plan.ok and plan.kernel == {"window": 1_000_000}
    assert any(line.startswith("TOPICSTREAM_KERNEL_PARAMS window: 0 in the snapshot") for line in plan.applied)


def test_a_window_below_the_distinct_word_topic_cells_keeps_the_topics() -> None:
    """Halving rounded up kept every count of 1 for good, so the counts could never hold fewer tokens than their
    distinct (word, topic) cells, which a stream only adds to; halving towards a window below that left every count
    at 1 (a review: Reuters with a window of 50,000, 99.8 % of the counts 1, held-out −8.43 nats/word against −6.76
    without forgetting). Rounded down, a word a topic holds once leaves it, and the topics stay: 3,000 articles of
    8 planted topics with a window of 1,500 tokens, each planted topic within Hellinger 0.25 of a learned one
    (rounded up: 0.33)."""
    phi, docs = lda_corpus(3000, seed=4)
    m = ParticleFilterLDA(n_topics=8, n_words=400, seed=0, window=1500, refine_docs=0)
    for start in range(0, 3000, 100):
        m.partial_fit(docs.slice(start, start + 100))
    nearest = hellinger_matrix(np.vstack([phi, m.topic_word()]))[:8, 8:].min(axis=1)
    assert nearest.max() < 0.25, nearest
    check_invariants(m)
