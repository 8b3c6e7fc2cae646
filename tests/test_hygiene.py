"""Topic hygiene (kernels.hygiene) on planted topics: duplicates merged, planted topics recovered, births.

Two planted corpora: the demo generator's news desks (service.dev.generator), and a corpus drawn here from an LDA
with known φ (8 topics on disjoint word blocks with Zipf-like weights and a little shared mass). Recovery
thresholds: a learned topic within Hellinger 0.40 of each generator desk (the learned topics also hold the
generator's background and headline words, so even a clean recovery sits at 0.2–0.35) and within 0.25 of each
LDA topic (clean recoveries sit at 0.06–0.16).
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

from kernels import SCVB0, Batch, OnlineHDP, ParticleFilterLDA
from kernels.hygiene import (
    DEFAULT_THRESHOLD,
    Event,
    RecentDocs,
    TopicHygiene,
    hellinger_matrix,
    mass_topics,
    recent_batch,
)
from kernels.ohdp_stick import StickBreakingHDP
from kernels.scvb0 import minka_alpha

GEN_RECOVERY = 0.40
LDA_RECOVERY = 0.25


# ------------------------------------------------------------------------------------------------ corpora
def lda_corpus(n_docs: int, seed: int, *, late_topic: bool = False) -> tuple[np.ndarray, Batch]:
    """Documents of 100 tokens drawn from an LDA with 8 known topics over 400 words, α = 0.1.

    With ``late_topic`` the last topic appears only in the second half of the stream.
    """
    rng = np.random.default_rng(seed)
    n_topics, n_words, per = 8, 400, 50
    phi = np.full((n_topics, n_words), 1e-3)
    for k in range(n_topics):
        phi[k, k * per : (k + 1) * per] += 1.0 / np.arange(1, per + 1) ** 0.8
    phi /= phi.sum(axis=1, keepdims=True)
    docs = []
    for d in range(n_docs):
        alive = n_topics - 1 if late_topic and d < n_docs // 2 else n_topics
        cnt = rng.multinomial(100, rng.dirichlet(np.full(alive, 0.1)))
        ws = np.concatenate([rng.choice(n_words, size=c, p=phi[k]) for k, c in enumerate(cnt) if c])
        ids, c = np.unique(ws, return_counts=True)
        docs.append((ids, c.astype(np.float64)))
    return phi, Batch.from_docs(docs)


@pytest.fixture(scope="module")
def generator_corpus() -> tuple[np.ndarray, Batch]:
    """8,000 demo articles in stream order, and the planted desks' word distributions over the same vocabulary."""
    from evaluation import prepare_corpus
    from service.dev.generator import generate_articles, planted_distributions

    arts = list(generate_articles(8001, seed=0))
    c = prepare_corpus(arts[:8000], arts[8000:], vocab_size=5000, seed=0, shuffle=False)
    return planted_distributions(c.vocab), c.train


def stream(model: SCVB0 | OnlineHDP, docs: Batch, hygiene: TopicHygiene | None, batch: int, every: int) -> list:
    """One pass in batches of ``batch``; hygiene every ``every`` batches on the last 256 documents, and at the end."""
    events: list[tuple[int, Event]] = []
    for n, start in enumerate(range(0, docs.n_docs, batch), 1):
        stop = min(docs.n_docs, start + batch)
        model.partial_fit(docs.slice(start, stop))
        if hygiene is not None and n % every == 0:
            events += [(stop, e) for e in hygiene.apply(model, docs.slice(max(0, stop - 256), stop))]
    if hygiene is not None:
        events += [(docs.n_docs, e) for e in hygiene.apply(model, None)]
    return events


def recovery(truth: np.ndarray, model: SCVB0 | OnlineHDP) -> tuple[np.ndarray, np.ndarray, float]:
    """Per planted topic: distance to its best learned topic and that topic's slot; the closest learned pair."""
    phi, w = model.topic_word(), model.topic_weights()
    live = np.flatnonzero(w >= 1e-4)
    d = np.sqrt(np.clip(1.0 - np.sqrt(truth) @ np.sqrt(phi[live]).T, 0.0, 1.0))
    pairs = hellinger_matrix(phi[live])
    np.fill_diagonal(pairs, np.inf)
    return d.min(axis=1), live[d.argmin(axis=1)], float(pairs.min())


# ------------------------------------------------------------------------------------------------ planted
def test_generator_duplicates_appear_without_hygiene_and_are_merged_with_it(generator_corpus):
    truth, docs = generator_corpus
    k = len(truth) + 5
    raw = SCVB0(n_topics=k, n_words=int(docs.word_ids.max()) + 1, seed=0)
    stream(raw, docs, None, 256, 10)
    _, _, raw_closest = recovery(truth, raw)
    assert raw_closest < DEFAULT_THRESHOLD  # the failure hygiene exists for

    clean = SCVB0(n_topics=k, n_words=int(docs.word_ids.max()) + 1, seed=0)
    events = stream(clean, docs, TopicHygiene(), 256, 10)
    dist, slot, closest = recovery(truth, clean)
    assert any(e.kind == "merge" for _, e in events)
    assert closest >= DEFAULT_THRESHOLD
    assert dist.max() < GEN_RECOVERY, dist.round(3)
    assert len(set(slot.tolist())) == len(truth)  # no learned topic matched to two planted ones


@pytest.mark.parametrize("seed", [0, 1])
def test_lda_corpus_recovered_without_duplicates(seed):
    truth, docs = lda_corpus(3000, seed)
    raw = SCVB0(n_topics=len(truth) + 5, n_words=truth.shape[1], seed=seed)
    stream(raw, docs, None, 64, 5)
    assert recovery(truth, raw)[2] < DEFAULT_THRESHOLD
    model = SCVB0(n_topics=len(truth) + 5, n_words=truth.shape[1], seed=seed)
    stream(model, docs, TopicHygiene(), 64, 5)
    dist, slot, closest = recovery(truth, model)
    assert dist.max() < LDA_RECOVERY, dist.round(3)
    assert closest >= DEFAULT_THRESHOLD
    assert len(set(slot.tolist())) == len(truth)


def test_birth_after_a_topic_appears_mid_stream():
    truth, docs = lda_corpus(3000, 0, late_topic=True)
    model = SCVB0(n_topics=len(truth), n_words=truth.shape[1], seed=0, batch_size=64)  # a step per batch
    events = stream(model, docs, TopicHygiene(), 64, 5)
    births = [(at, e) for at, e in events if e.kind == "birth"]
    assert births and all(at > docs.n_docs // 2 for at, _ in births)
    dist, slot, _ = recovery(truth, model)
    assert dist[-1] < LDA_RECOVERY
    assert slot[-1] in {e.topics[0] for _, e in births}  # the late topic lives in a born slot


def test_hygiene_waits_while_scvb0_gathers_its_first_documents():
    """SCVB0 learns its first ``start_docs`` documents again as one batch from the random start, which would undo
    a move made before: a duplicate is merged once the start is over, not while it lasts."""
    truth, docs = lda_corpus(3000, 0)

    def with_a_duplicate(start_docs: int) -> SCVB0:
        model = SCVB0(n_topics=len(truth) + 1, n_words=truth.shape[1], seed=0, start_docs=start_docs)
        model.partial_fit(docs.slice(0, 1000))
        w = model.topic_weights()
        k, j = int(np.argmax(w)), int(np.argmin(w))
        model.phi_[:, j], model.nz_[j] = model.phi_[:, k], model.nz_[k]
        return model

    hygiene = TopicHygiene(warmup_docs=0, max_births=0)
    starting = with_a_duplicate(start_docs=2000)
    assert starting.starting and hygiene.apply(starting, docs.slice(744, 1000)) == []
    assert [e.kind for e in hygiene.apply(with_a_duplicate(start_docs=0), docs.slice(744, 1000))] == ["merge"]


def test_moves_planned_on_a_copy_and_replayed_later_still_clean_the_model():
    """The service plans hygiene on a snapshot's copy (writer thread) and makes the moves on the live model at
    the next snapshot, a few batches later (``TopicHygiene.replay``): duplicates still go, the late topic is
    still born."""
    truth, docs = lda_corpus(3000, 0, late_topic=True)
    model = SCVB0(n_topics=len(truth) + 2, n_words=truth.shape[1], seed=0, batch_size=64)  # a step per batch
    hygiene, planned, made = TopicHygiene(), [], []
    for n, start in enumerate(range(0, docs.n_docs, 64), 1):
        stop = min(docs.n_docs, start + 64)
        model.partial_fit(docs.slice(start, stop))
        if n % 5 == 0:
            made += [(stop, e) for e in hygiene.replay(model, planned)]
            copy = SCVB0.from_state(model.state_dict())
            planned = hygiene.apply(copy, docs.slice(max(0, stop - 256), stop))
    made += [(docs.n_docs, e) for e in hygiene.replay(model, planned)]
    made += [(docs.n_docs, e) for e in hygiene.apply(model, None)]
    dist, slot, closest = recovery(truth, model)
    assert any(e.kind == "merge" for _, e in made)
    assert any(e.kind == "birth" and at > docs.n_docs // 2 for at, e in made)
    assert closest >= DEFAULT_THRESHOLD
    assert dist.max() < LDA_RECOVERY, dist.round(3)
    assert len(set(slot.tolist())) == len(truth)


def test_replay_on_an_identical_model_makes_exactly_the_planned_moves():
    truth, docs = lda_corpus(1200, 2, late_topic=True)
    # 20 updates of 50 documents: few enough that duplicates are left for the merge to find
    model = SCVB0(n_topics=len(truth) + 3, n_words=truth.shape[1], seed=0, batch_size=50)
    model.partial_fit(docs.slice(0, 1000))
    twin = SCVB0.from_state(model.state_dict())
    hygiene = TopicHygiene(warmup_docs=0, threshold=0.35)
    planned = hygiene.apply(twin, docs.slice(1000, 1200))
    assert {e.kind for e in planned} >= {"merge"}
    assert hygiene.replay(model, planned) == planned
    np.testing.assert_allclose(model.phi_ * model.scale_, twin.phi_ * twin.scale_, rtol=1e-12, atol=1e-12)
    # Replaying again finds nothing left to do: merged-away topics are no longer live, born slots not free.
    assert hygiene.replay(model, planned) == []


def test_replay_skips_moves_whose_topics_changed_since_the_plan():
    """Planned on a copy where slots 0 and 1 were duplicates and slot 2 nearly empty; by replay time the live
    model holds distinct topics there (as the online HDP refills near-empty slots): the merge and the retirement
    are skipped, not made on topics they were never planned for. On a model where the plan still fits, both are
    made."""
    truth, docs = lda_corpus(1200, 4)
    model = SCVB0(n_topics=len(truth), n_words=truth.shape[1], seed=0, batch_size=50)
    model.partial_fit(docs)
    dist = hellinger_matrix(model.topic_word())
    weights = model.topic_weights()
    a = int(np.argmax(weights))
    b = int(np.argmax(dist[a]))
    assert dist[a, b] > 0.5  # two distinct topics now
    planned = [Event("merge", (int(b),), int(a), 0.05), Event("retire", (int(a),), None, 0.0002)]
    hygiene = TopicHygiene()
    assert hygiene.replay(model, planned) == []
    assert np.array_equal(model.topic_weights(), weights)  # untouched
    fits = [Event("merge", (int(b),), int(a), float(dist[a, b])), Event("retire", (int(a),), None, 0.9)]
    assert hygiene.replay(model, fits) == fits


def test_a_replayed_birth_takes_no_counts_of_recycled_words():
    """A birth planned on a copy whose proposal holds words whose vocabulary slots were recycled before the
    replay: the born topic takes none of those slots' counts (they now belong to other words)."""
    truth, docs = lda_corpus(1000, 5)
    model = SCVB0(n_topics=len(truth) + 1, n_words=truth.shape[1], seed=0, batch_size=50)
    model.partial_fit(docs)
    free = int(np.argmin(model.topic_weights()))
    model.delete_topic(free)  # a free slot for the birth
    ids = np.arange(0, 20, dtype=np.int64)  # topic 0's top words
    probs = np.full(20, 1 / 20)
    planned = [Event("birth", (free,), None, 0.01, proposal=(ids, probs, 0.1))]
    twin = SCVB0.from_state(model.state_dict())
    assert TopicHygiene().replay(twin, planned) == planned
    assert TopicHygiene().replay(model, planned, forgotten=ids[:10]) == planned
    kept, plain = model.topic_word()[free], twin.topic_word()[free]
    assert plain[:10].sum() > 0.2  # without the recycled words left out, the born topic takes their counts
    assert kept[:10].sum() < 0.01 and kept[10:20].sum() > 0.5


# ------------------------------------------------------------------------------------------------ the moves
def _fitted(cls: type, **kw) -> SCVB0 | OnlineHDP:
    truth, docs = lda_corpus(400, 3)
    m = cls(n_topics=6, n_words=truth.shape[1], seed=0, **kw)
    m.partial_fit(docs)
    return m


@pytest.mark.parametrize("cls", [SCVB0, OnlineHDP])
def test_moves_reassign_tokens_without_losing_any(cls):
    m = _fitted(cls)
    stat, scale = (m.phi_, m.scale_) if cls is SCVB0 else (m.topic_stat_, m.scale_)
    rows = stat.sum(axis=1) * scale
    w = m.topic_weights()
    a, b = np.argsort(-w)[:2]
    m.merge_topics(int(a), int(b))
    assert m.topic_weights()[b] < 1e-12 or cls is OnlineHDP
    np.testing.assert_allclose(stat.sum(axis=1) * scale, rows, rtol=1e-9)
    m.delete_topic(int(np.argsort(-m.topic_weights())[1]))
    np.testing.assert_allclose(stat.sum(axis=1) * scale, rows, rtol=1e-9)
    before = stat.copy()
    moved, undo = m.birth_topic(int(b), np.arange(5), np.ones(5), 0.01)
    assert moved > 0
    np.testing.assert_allclose(stat.sum(axis=1) * scale, rows, rtol=1e-9)
    undo()
    np.testing.assert_array_equal(stat, before)


def test_particle_filter_merges_a_planted_duplicate():
    """The particle filter's hygiene (its ``hygiene_defaults``: merges only). An initial model that puts half of
    one planted topic's tokens, at random, in a second slot keeps the two as near copies while it filters; one
    ``apply`` merges them (no other move), and then each planted topic is one learned topic."""
    phi, docs = lda_corpus(1200, 0)
    init = docs.slice(0, 300)
    words = np.repeat(init.word_ids, np.maximum(1, np.rint(init.counts)).astype(np.int64))
    z = words // 50  # the planted topic whose block the word is in
    z[(z == 0) & (np.random.default_rng(0).random(z.size) < 0.5)] = 8
    m = ParticleFilterLDA(n_topics=9, n_words=400, seed=0, init_docs=0)
    m.initialize_from(init, z)
    for start in range(300, 1200, 100):
        m.partial_fit(docs.slice(start, start + 100))
    assert hellinger_matrix(m.topic_word())[0, 8] < DEFAULT_THRESHOLD
    defaults = ParticleFilterLDA.hygiene_defaults
    assert defaults is not None
    hygiene = TopicHygiene(**defaults, warmup_docs=0)
    events = hygiene.apply(m, docs.slice(1000, 1200))
    assert [(e.kind, {e.topics[0], e.into}) for e in events] == [("merge", {0, 8})]
    live = np.flatnonzero(m.topic_weights() > 0)
    assert live.size == 8
    learned = m.topic_word()[live]
    pairs = hellinger_matrix(learned)
    np.fill_diagonal(pairs, np.inf)
    assert pairs.min() > DEFAULT_THRESHOLD
    nearest = np.sqrt(np.clip(1.0 - np.sqrt(phi) @ np.sqrt(learned).T, 0.0, 1.0)).min(axis=1)
    assert nearest.max() < LDA_RECOVERY
    with pytest.raises(TypeError, match="no birth_topic"):
        TopicHygiene().apply(m, docs.slice(1000, 1200))


def test_hygiene_refuses_kernels_without_moves_and_bad_settings():
    pf = ParticleFilterLDA(n_topics=3, n_words=10, seed=0)
    with pytest.raises(TypeError, match="topic moves these settings use"):
        TopicHygiene(max_splits=1).apply(pf, None)
    with pytest.raises(TypeError, match="topic moves"):
        TopicHygiene().apply(StickBreakingHDP(n_topics=4, n_words=10, seed=0), None)
    with pytest.raises(ValueError, match="threshold"):
        TopicHygiene(threshold=0.0)
    with pytest.raises(ValueError, match="recent_window"):
        TopicHygiene(recent_window=0)
    with pytest.raises(ValueError, match="max_docs"):
        RecentDocs(0)
    with pytest.raises(ValueError, match="kind"):
        Event("mystery", (0,))
    m = SCVB0(n_topics=3, n_words=10, seed=0)
    with pytest.raises(ValueError, match="into itself"):
        m.merge_topics(1, 1)
    with pytest.raises(ValueError, match="topic id"):
        m.merge_topics(0, 3)


def test_recent_batch_keeps_the_newest_documents_in_order():
    _, docs = lda_corpus(30, 5)
    parts = [docs.slice(0, 10), docs.slice(10, 25), docs.slice(25, 30)]
    got = recent_batch(parts, max_docs=12)
    assert got is not None and got.n_docs == 12
    for i in range(12):
        np.testing.assert_array_equal(got.doc(i)[0], docs.doc(18 + i)[0])
    assert recent_batch([], 5) is None


def test_recent_docs_keeps_whole_batches_holding_the_newest_documents():
    """Bounded by documents, not batches: every batch it keeps is needed for the newest ``max_docs``."""
    _, docs = lda_corpus(60, 5)
    recent = RecentDocs(12)
    assert recent.batch() is None
    for start, stop in ((0, 10), (10, 25), (25, 30), (30, 31), (31, 60)):
        recent.append(docs.slice(start, stop))
        sizes = [b.n_docs for b in recent._batches]
        assert sum(sizes) - sizes[0] < 12  # the oldest kept batch still holds some of the newest 12
        got = recent.batch()
        assert got is not None and got.n_docs == min(12, stop)
        for i in range(got.n_docs):
            np.testing.assert_array_equal(got.doc(i)[0], docs.doc(stop - got.n_docs + i)[0])


def test_apply_plans_on_the_latest_recent_window_documents():
    """Given more recent documents than ``recent_window``, the moves see only the newest that many: the same
    events as when given exactly those."""
    truth, docs = lda_corpus(1500, 3)
    model = SCVB0(n_topics=len(truth) + 4, n_words=truth.shape[1], seed=3)
    for start in range(0, 1200, 100):
        model.partial_fit(docs.slice(start, start + 100))
    settings = {"warmup_docs": 0, "merge_correlation": 0.05}  # merges by co-occurrence: they depend on the documents
    window = TopicHygiene(**settings, recent_window=200)
    exact = TopicHygiene(**settings, recent_window=200)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    got = window.apply(a, docs.slice(900, 1200))
    want = exact.apply(b, docs.slice(1000, 1200))
    assert [(e.kind, e.topics, e.into) for e in got] == [(e.kind, e.topics, e.into) for e in want]
    np.testing.assert_array_equal(a.topic_word(), b.topic_word())
    assert got  # the test means something: the moves were made ...
    c = copy.deepcopy(model)  # (20 documents hold too little of each topic to correlate: kernels/_cooccur.py)
    fewer = TopicHygiene(**settings, recent_window=20).apply(c, docs.slice(900, 1200))
    assert len(fewer) < len(got)  # ... and depend on how many documents are seen


def test_mass_topics_counts_the_topics_that_hold_the_mass():
    assert mass_topics([0.5, 0.3, 0.15, 0.05]) == 3
    assert mass_topics([0.96, 0.04]) == 1
    assert mass_topics(np.full(10, 0.1)) == 10


# ------------------------------------------------------------------------------------------------ learned α
@pytest.mark.parametrize("alpha_true", [0.05, 0.3, 2.0])
def test_minka_fixed_point_recovers_a_dirichlet_alpha(alpha_true):
    rng = np.random.default_rng(1)
    theta = rng.dirichlet(np.full(20, alpha_true), size=2000)
    counts = np.array([rng.multinomial(200, t) for t in theta], dtype=np.float64)
    est = minka_alpha(counts, 1.0, iterations=200)
    assert abs(est - alpha_true) < 0.15 * alpha_true


def test_learned_alpha_moves_and_round_trips():
    truth, docs = lda_corpus(600, 4)
    m = SCVB0(n_topics=len(truth), n_words=truth.shape[1], seed=0, alpha=1.0, learn_alpha=True, batch_size=50)
    for start in range(0, 600, 100):
        m.partial_fit(docs.slice(start, start + 100))
    # The corpus was drawn with α = 0.1; from 1.0 the learned α falls (to ≈ 0.66 after 600 documents, ≈ 0.35 in
    # the long run: CVB0's expected counts are smoother than sampled ones, so the fixed point overestimates α).
    assert m.alpha_ < 0.8
    again = SCVB0.from_state(m.state_dict())
    assert again.alpha_ == m.alpha_
    fixed = SCVB0(n_topics=len(truth), n_words=truth.shape[1], seed=0, alpha=1.0)
    fixed.partial_fit(docs.slice(0, 100))
    assert fixed.alpha_ == 1.0
    with pytest.raises(ValueError, match="learn_alpha"):
        SCVB0(n_topics=3, n_words=10, learn_alpha="yes")


def test_the_birth_em_never_lowers_its_objective_and_finds_the_missing_topic():
    """The birth's EM (kernels/_birth.py) checked against its objective, written from the module docstring
    rather than the code: Σ_entries c log(π_d ψ_w + (1 − π_d) p_dw) never falls from one iteration to the next,
    at convergence every π_d inside its bounds is stationary, and ψ is the planted topic the model lacks."""
    from kernels._birth import fit_birth

    truth, docs = lda_corpus(1600, 0, late_topic=True)
    model = SCVB0(n_topics=len(truth) - 1, n_words=truth.shape[1], seed=0, batch_size=64)
    for start in range(0, 800, 64):  # the first half: the late topic has not appeared
        model.partial_fit(docs.slice(start, min(800, start + 64)))
    build, phi = docs.slice(1200, 1600), model.topic_word()

    def objective(fit):
        return float(fit.counts @ np.log(fit.pi[fit.d_of] * fit.psi[fit.w_of] + (1 - fit.pi[fit.d_of]) * fit.pred))

    values = [objective(fit_birth(model, build, phi, 0.25, t)) for t in range(1, 30)]
    assert all(b >= a - 1e-9 * abs(a) for a, b in itertools.pairwise(values)), np.diff(values)
    assert values[-1] > values[0]
    fit = fit_birth(model, build, phi, 0.25, 500)
    mix = fit.pi[fit.d_of] * fit.psi[fit.w_of] + (1 - fit.pi[fit.d_of]) * fit.pred
    grad = np.bincount(fit.d_of, weights=fit.counts * (fit.psi[fit.w_of] - fit.pred) / mix, minlength=build.n_docs)
    inside = (fit.pi > 1e-5) & (fit.pi < 1 - 1e-5) & (np.bincount(fit.d_of, minlength=build.n_docs) > 0)
    assert inside.any() and np.abs(grad[inside]).max() < 1e-3 * fit.counts.sum() / inside.sum()
    late = truth[-1, fit.words] / truth[-1, fit.words].sum()
    assert np.sqrt(max(0.0, 1 - np.sqrt(late * fit.psi).sum())) < 0.3
