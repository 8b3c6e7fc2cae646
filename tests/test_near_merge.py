"""The held-out merge of near pairs (kernels/_near_merge.py): one subject learned as two topics, too far apart for
the merge by distance, is joined when unseen documents cannot tell the two apart; distinct subjects are not."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import ALGORITHMS, SCVB0, Batch
from kernels._near_merge import heldout_near_merges
from kernels.hygiene import DEFAULT_THRESHOLD, TopicHygiene, hellinger_matrix
from tests.synthetic import block_topics_corpus


def split_subject(seed: int, words: bool = False) -> tuple[SCVB0, tuple[int, int], Batch, np.ndarray]:
    """SCVB0 (K = 7) after one pass over 1,500 documents of six planted topics; the slot no planted topic is nearest
    to is emptied, planted topic 0's topic is split into it, and 800 more documents are learned. Split so, each word's
    count dealt by a Beta(2, 2) fraction, the two halves compete for the subject's documents; with ``words``, each
    word goes whole to one half, and every document of the subject uses both. Returns the model, the pair, 300 unseen
    documents and the planted topics."""
    phi_true, docs = block_topics_corpus(seed=seed, K=6, n_docs=2600)
    model = SCVB0(7, int(phi_true.shape[1]), seed=0, start_docs=0)
    for start in range(0, 1500, 100):
        model.partial_fit(Batch.from_docs(docs[start : start + 100]))
    nearest = hellinger_matrix(np.vstack([phi_true, model.topic_word()]))[:6, 6:]
    spare = next(j for j in range(7) if j not in nearest.argmin(axis=1))
    model.delete_topic(spare)
    k = int(nearest[0].argmin())
    rng = np.random.default_rng(seed)
    fractions = (rng.random(model.n_words) < 0.5).astype(np.float64) if words else rng.beta(2.0, 2.0, model.n_words)
    model.split_topic(k, spare, np.arange(model.n_words), fractions, 0.5)
    for start in range(1500, 2300, 100):
        model.partial_fit(Batch.from_docs(docs[start : start + 100]))
    return model, (k, spare), Batch.from_docs(docs[2300:]), phi_true


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_subject_learned_as_two_topics_is_joined(seed: int) -> None:
    """The two halves stay apart by more than the merge threshold, so hygiene without the move leaves them; with it,
    they are merged into one topic (the only event), which is then planted topic 0's nearest."""
    model, pair, unseen, phi_true = split_subject(seed)
    assert DEFAULT_THRESHOLD < hellinger_matrix(model.topic_word()[list(pair)])[0, 1] < 0.5
    off = TopicHygiene(warmup_docs=0, max_births=0).apply(model, None, unseen)
    assert off == []
    events = TopicHygiene(warmup_docs=0, max_births=0, near_merge_tries=4).apply(model, None, unseen)
    assert [(e.kind, {e.into, *e.topics}) for e in events] == [("merge", set(pair))]
    nearest = hellinger_matrix(np.vstack([phi_true, model.topic_word()]))[0, len(phi_true) :]
    assert int(nearest.argmin()) == events[0].into


@pytest.mark.parametrize("seed", [0, 1])
def test_a_subject_whose_words_two_topics_share_is_joined_however_far_apart(seed: int) -> None:
    """Split by its words, a subject is two topics almost disjoint (Hellinger near 1) that every document of the
    subject uses together: their proportions correlate, so the pair is tried at any distance, and joined."""
    model, pair, unseen, _ = split_subject(seed, words=True)
    assert hellinger_matrix(model.topic_word()[list(pair)])[0, 1] > 0.9
    events = TopicHygiene(warmup_docs=0, max_births=0, near_merge_tries=4).apply(model, None, unseen)
    assert [(e.kind, {e.into, *e.topics}) for e in events] == [("merge", set(pair))]


def test_distinct_subjects_are_not_joined_however_near_they_are_allowed_to_be() -> None:
    """Every pair of a model of six distinct planted topics tried (``below`` = 1): each merge costs the unseen
    documents more than the tolerance, so the model is left as it was."""
    model, _, unseen, _ = split_subject(1)
    heldout_near_merges(model, unseen, low=0.0, empty_below=1e-4, max_tries=4)  # join the split first
    before = model.topic_word().copy()
    events = heldout_near_merges(model, unseen, low=0.0, below=1.0, empty_below=1e-4, max_tries=100)
    assert events == []
    np.testing.assert_array_equal(model.topic_word(), before)


def test_the_move_needs_unseen_documents_and_is_checked() -> None:
    """Without unseen documents nothing is tried (documents already learned would favour the halves they trained);
    the setting is a count of tries, and asking for it is what makes hygiene collect unseen documents."""
    model, _, _, _ = split_subject(1)
    assert TopicHygiene(warmup_docs=0, max_births=0, near_merge_tries=4).apply(model, None, None) == []
    assert TopicHygiene(near_merge_tries=1).scores_unseen and not TopicHygiene().scores_unseen
    with pytest.raises(ValueError, match="near_merge_tries"):
        TopicHygiene(near_merge_tries=-1)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_kernel_takes_the_move(algorithm: str) -> None:
    """The setting is open to every kernel (each has ``merge_topics``): on a model that learned six planted topics in
    eight slots the move runs, merges only live pairs into live topics, and leaves every topic a distribution."""
    _, docs = block_topics_corpus(seed=2, K=6, n_docs=900)
    model = ALGORITHMS[algorithm](n_topics=8, n_words=240, seed=0)
    for start in range(0, 600, 100):
        model.partial_fit(Batch.from_docs(docs[start : start + 100]))
    live = set(np.flatnonzero(model.topic_weights() >= 1e-4).tolist())
    events = heldout_near_merges(
        model, Batch.from_docs(docs[600:]), low=0.0, below=1.0, tolerance=1.0, empty_below=1e-4, max_tries=2
    )
    assert events and all(e.kind == "merge" and {e.into, *e.topics} <= live for e in events)
    phi = model.topic_word()
    np.testing.assert_allclose(phi.sum(axis=1), 1.0)
    assert all(model.topic_weights()[e.topics[0]] < model.topic_weights()[e.into] for e in events)


def test_the_background_slot_takes_no_part() -> None:
    """A kernel's background slot shares the generic words with every desk, so a desk that a split has just moved
    out of it lies near it: the move never merges into or out of the slot (``keep``), however cheap the merge."""
    model, pair, unseen, _ = split_subject(1)
    kept = heldout_near_merges(model, unseen, low=0.0, empty_below=1e-4, max_tries=4, keep=pair[0])
    assert all(pair[0] not in (e.into, *e.topics) for e in kept)
    assert [
        {e.into, *e.topics} for e in heldout_near_merges(model, unseen, low=0.0, empty_below=1e-4, max_tries=4)
    ] == [set(pair)]
