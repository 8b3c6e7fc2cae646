"""The held-out background merge (kernels/_background_merge.py): the generic words learned as two topics are
joined into one background topic; two subjects are not joined."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import Batch, OnlineHDP
from kernels._background_merge import TOLERANCE
from kernels._delete import completion_halves
from kernels._moves import mean_loglik
from kernels.hygiene import TopicHygiene
from tests.synthetic import block_topics_corpus


@pytest.fixture(scope="module")
def demo_stream() -> tuple[Batch, Batch]:
    """20,000 demo articles in stream order (training) and the next 256 (unseen), over one vocabulary."""
    from evaluation import prepare_corpus
    from service.dev.generator import generate_articles

    arts = list(generate_articles(22_000, seed=0))
    c = prepare_corpus(arts[:20_000], arts[20_000:], vocab_size=5000, seed=0, shuffle=False)
    return c.train, c.test.slice(0, 256)


def one_pass(docs: Batch, n_topics: int, batch: int) -> OnlineHDP:
    model = OnlineHDP(n_topics, int(docs.word_ids.max()) + 1, seed=0)
    for start in range(0, docs.n_docs, batch):
        model.partial_fit(docs.slice(start, min(docs.n_docs, start + batch)))
    return model


def completion(model: OnlineHDP, docs: Batch) -> float:
    observed, held_out = completion_halves(docs)
    return mean_loglik(model.transform(observed), model.topic_word(), held_out)


@pytest.mark.parametrize("on", [True, False])
def test_the_generic_words_in_two_topics_are_joined_only_by_the_move(demo_stream, on: bool) -> None:
    """One pass of the online HDP (T = 20) over the demo stream learns the generic words as its two heaviest topics,
    neither marked as the background; the move merges them into one marked background topic, and document
    completion on the unseen articles does not drop by more than the move's tolerance."""
    train, unseen = demo_stream
    model = one_pass(train, 20, 500)
    assert model.background_topic() is None
    pair = set(np.argsort(-model.topic_weights())[:2].tolist())
    before = completion(model, unseen)
    events = TopicHygiene(warmup_docs=0, threshold=0.01, max_births=0, merge_background=on).apply(
        model, None, unseen_docs=unseen
    )
    if on:
        assert [(e.kind, {e.topics[0], e.into}) for e in events] == [("merge", pair)]
        assert model.background_topic() == events[0].into
        assert completion(model, unseen) >= before - TOLERANCE
    else:
        assert events == [] and model.background_topic() is None


def test_two_subjects_are_not_joined() -> None:
    """Without generic words the two heaviest topics are two subjects: the copy that merges them loses held-out
    likelihood, so it is thrown away and the model is unchanged."""
    _, docs = block_topics_corpus(seed=1, K=6, n_docs=1800)
    train = Batch.from_docs(docs[:1500])
    model = one_pass(train, 20, 100)
    before = model.topic_word().copy()
    events = TopicHygiene(warmup_docs=0, threshold=0.01, max_births=0, merge_background=True).apply(
        model, None, unseen_docs=Batch.from_docs(docs[1500:])
    )
    assert events == []
    np.testing.assert_array_equal(model.topic_word(), before)
