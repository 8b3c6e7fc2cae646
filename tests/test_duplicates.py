"""Copies of texts the learner learned lately are answered, not learned again (service/duplicates.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from service.duplicates import RecentTexts, text_hashes
from service.text import FlatBags, Tokenizer, Vocabulary


def test_a_text_hash_is_its_bag_of_words() -> None:
    story = Counter({"oil": 2, "opec": 1, "crude": 1})
    shuffled = Counter({"crude": 1, "oil": 2, "opec": 1})
    recount = Counter({"oil": 1, "opec": 2, "crude": 1})
    fewer = Counter({"oil": 2, "opec": 1})
    h = text_hashes(FlatBags.from_counters([story, shuffled, recount, fewer, Counter()]))
    assert h.dtype == np.uint64 and h[0] == h[1] and h[4] == 0
    assert len({int(x) for x in h[[0, 2, 3]]}) == 3
    # the tokenizer's own bags (words hashed in polars) give the same hashes as bags built by hand
    tokenized = Tokenizer().count_many(["Oil, OPEC and oil crude", "crude oil opec oil"])
    assert text_hashes(tokenized).tolist() == [h[0], h[0]]


def test_copies_do_not_count_in_the_vocabulary() -> None:
    """Copies were answered, not learned, but their words still counted in the vocabulary: after a flood of one
    story, the next new words pushed real words out of their slots (198 of 2,000 in a reviewer's run)."""
    real = [Counter({f"real{i}": 1, f"real{i + 1}": 1, f"real{i + 2}": 1}) for i in range(0, 60, 3)]
    story = Counter({"flood": 5, "story": 3, "wire": 2})

    def after(counted_copies: bool) -> list[str | None]:
        vocab = Vocabulary(64, admit_count=1.0, half_life_tokens=100.0)
        vocab.encode([*real, story])
        copies = [story] * 500
        flags = np.full(len(copies), counted_copies)
        vocab.encode(copies, counted=flags)
        vocab.encode([Counter({f"new{i}": 1 for i in range(20)})])  # new words take the weakest slots
        return vocab.slot_words()

    assert sum(w is not None and w.startswith("real") for w in after(False)) == 60  # no real word lost its slot
    assert sum(w is not None and w.startswith("real") for w in after(True)) < 60  # counted, they would have been


def test_recent_texts_are_a_bounded_window() -> None:
    recent = RecentTexts(capacity=3)
    seen = recent.first_seen(np.array([5, 6, 5, 0, 0, 7], dtype=np.uint64))
    assert seen.tolist() == [True, True, False, True, True, True]  # a copy in the same batch; empty texts are new
    assert recent.first_seen(np.array([6, 8], dtype=np.uint64)).tolist() == [False, True]
    assert len(recent) == 3
    assert recent.first_seen(np.array([5], dtype=np.uint64)).tolist() == [True]  # forgotten: 5 was the oldest


def test_the_window_a_snapshot_keeps_is_remembered_again_in_order() -> None:
    recent = RecentTexts(capacity=4)
    recent.first_seen(np.array([5, 6, 0, 7, 8, 9], dtype=np.uint64))  # 5 is forgotten; 0 is never kept
    assert recent.state().tolist() == [6, 7, 8, 9]
    again = RecentTexts(capacity=4)
    again.restore(recent.state())
    assert again.first_seen(np.array([6, 9, 5], dtype=np.uint64)).tolist() == [False, False, True]
    smaller = RecentTexts(capacity=2)  # a window made smaller since the snapshot keeps its newest texts
    smaller.restore(recent.state())
    assert smaller.state().tolist() == [8, 9]
