"""Topic hygiene judges on distinct documents (kernels/_distinct.py): copies of one story, or documents with no
token, in its windows are one document's evidence, not a thousand's."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import Batch, OnlineHDP
from kernels._distinct import distinct_rows
from kernels.hygiene import TopicHygiene
from tests.synthetic import block_topics_corpus


def test_copies_and_empty_documents_count_once() -> None:
    story = (np.arange(40), np.ones(40))
    changed = (np.r_[np.arange(39), 99], np.ones(40))  # one word of forty changed: cosine 0.975
    other = (np.arange(20, 60), np.ones(40))  # half the words shared: cosine 0.5
    docs = Batch.from_docs([story, story, (np.zeros(0, np.int64), np.zeros(0)), changed, other, story])
    assert distinct_rows(docs).tolist() == [0, 4]
    assert distinct_rows(docs, similar=0.99).tolist() == [0, 3, 4]


def test_taking_documents_keeps_each_whole_in_the_order_asked() -> None:
    rng = np.random.default_rng(0)
    docs = [(rng.choice(50, size=n, replace=False), rng.integers(1, 5, size=n).astype(float)) for n in (3, 0, 5, 1, 4)]
    batch = Batch.from_docs(docs)
    rows = [4, 1, 0, 4, 2]
    taken = batch.take(rows)
    assert taken.n_docs == len(rows)
    for i, d in enumerate(rows):
        np.testing.assert_array_equal(taken.doc(i)[0], docs[d][0])
        np.testing.assert_array_equal(taken.doc(i)[1], docs[d][1])
    assert batch.take([]).n_docs == 0
    with pytest.raises(TypeError, match="not a boolean mask"):
        batch.take(np.array([True, False, True, False, True]))


def _trained() -> tuple[OnlineHDP, TopicHygiene, Batch]:
    _, docs = block_topics_corpus(seed=0)
    model = OnlineHDP(n_topics=12, n_words=240, seed=0, window=len(docs), batch_size=100, eta=0.1)
    for d0 in range(0, len(docs), 100):
        model.partial_fit(docs[d0 : d0 + 100])
    hygiene = TopicHygiene(**{**OnlineHDP.hygiene_defaults, "warmup_docs": 0})
    return model, hygiene, Batch.from_docs(docs[:1024])


def test_a_window_of_copies_or_of_empty_documents_moves_no_topic() -> None:
    """The online HDP's hygiene, on a window of 1,024 copies of one story or of articles with no word the
    vocabulary keeps, merged topics 0.56–0.75 apart (every proportion column was constant and rounding made them
    correlate ±1) and deleted the topics the copies did not use."""
    model, hygiene, normal = _trained()
    used = int(np.count_nonzero(model.topic_weights() >= 0.01))
    assert used >= 6
    one = normal.doc(0)
    windows = {
        "copies": Batch.from_docs([one] * 1024),
        "copies with one word changed": Batch.from_docs(
            [(np.r_[one[0][:-1], 200 + d % 40], one[1]) for d in range(1024)]
        ),
        "empty": Batch.from_docs([(np.zeros(0, np.int64), np.zeros(0))] * 1024),
    }
    # Without documents hygiene makes only the moves that need none (merges by distance, retirements): the windows
    # may add no move to those.
    without = hygiene.apply(OnlineHDP.from_state(model.state_dict()), None)
    for name, window in windows.items():
        copy = OnlineHDP.from_state(model.state_dict())
        events = hygiene.apply(copy, window, window)
        assert [e for e in events if e.kind in ("merge", "retire")] == without, name
    # the same windows with real documents in them still allow the moves the documents support
    copy = OnlineHDP.from_state(model.state_dict())
    mixed = Batch.from_docs([one] * 512 + [normal.doc(d) for d in range(1, 513)])
    assert distinct_rows(mixed).size == 1 + distinct_rows(normal.slice(1, 513)).size  # the copies count once
    hygiene.apply(copy, mixed, mixed)  # runs; whether it moves topics is the data's business
