"""Copies of texts the learner learned lately are answered, not learned again (service/duplicates.py)."""

from __future__ import annotations

import numpy as np

from kernels import Batch
from service.duplicates import RecentTexts, text_hashes


def test_a_text_hash_is_its_bag_of_words() -> None:
    story = (np.array([3, 7, 11]), np.array([2.0, 1.0, 1.0]))
    shuffled = (np.array([11, 3, 7]), np.array([1.0, 2.0, 1.0]))
    recount = (np.array([3, 7, 11]), np.array([1.0, 2.0, 1.0]))
    fewer = (np.array([3, 7]), np.array([2.0, 1.0]))
    empty = (np.zeros(0, np.int64), np.zeros(0))
    h = text_hashes(Batch.from_docs([story, shuffled, recount, fewer, empty]))
    assert h.dtype == np.uint64 and h[0] == h[1] and h[4] == 0
    assert len({int(x) for x in h[[0, 2, 3]]}) == 3


def test_recent_texts_are_a_bounded_window() -> None:
    recent = RecentTexts(capacity=3)
    seen = recent.first_seen(np.array([5, 6, 5, 0, 0, 7], dtype=np.uint64))
    assert seen.tolist() == [True, True, False, True, True, True]  # a copy in the same batch; empty texts are new
    assert recent.first_seen(np.array([6, 8], dtype=np.uint64)).tolist() == [False, True]
    assert len(recent) == 3
    assert recent.first_seen(np.array([5], dtype=np.uint64)).tolist() == [True]  # forgotten: 5 was the oldest
