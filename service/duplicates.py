"""Texts the learner has learned lately, so that a copy is answered but not learned again.

A news stream repeats itself: a wire story syndicated by hundreds of outlets under their own ids, a feed that
re-sends its items, a producer replaying a batch. A one-pass model learns each copy as a new document. Measured on
SCVB0 (10 topics learned on BBC News, then 5,000 copies of one story): every topic was about that story afterwards,
and 8 of 10 still were after 700 ordinary articles. So the learner remembers a hash of each text it learned for the
last ``TOPICSTREAM_DUPLICATE_WINDOW`` texts, and an article whose text is among them gets its mixture from the model
as it stands (``transform``, as a replica would answer it) instead of being learned again; its words do not count
in the vocabulary either (a flood would otherwise push other words out of their slots).

A text is the bag of words the tokenizer makes of the title and body: the same story under other ids or URLs is
the same text, and so is one that differs only in what the tokenizer drops (numbers, stop words, words of one or
two letters). Any other edit makes another text. In the corpora of ``docs/benchmarks.md``, copies of an earlier
text are 4.9 % of BBC News (republished stories, in pairs), 2.5 % of the Reuters stream (short notices, up to 18
times) and 0.2 % of 20 Newsgroups. (``topicstream eval`` and the benchmarks feed the kernels directly and learn
every copy.)

The window is a bounded FIFO (about 90 bytes a text: 9 MB at the default 100,000). It goes into every snapshot
(``recent_texts``, 8 bytes a text, as it stands after the batches the snapshot holds), so a restarted learner still
answers the copies of texts learned before the restart; a snapshot of an older learner has none, and the window
then starts empty. Copies still count in a snapshot's ``articles_learned`` (the articles the learner has taken
in); the kernel's own document count (``n_docs_seen``) leaves them out.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from numpy.typing import NDArray

from .text import FlatBags

__all__ = ["RecentTexts", "text_hashes"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64's finaliser: every bit of the input reaches every bit of the output."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def text_hashes(bags: FlatBags) -> NDArray[np.uint64]:
    """A 64-bit hash of each document's bag of words (its words and their counts, in any order), 0 for a document
    without words. Computed from the words themselves, before the vocabulary maps them: a text is the same text
    whichever of its words hold slots."""
    with np.errstate(over="ignore"):
        counts = np.asarray(bags.counts, dtype=np.float64)
        pairs = _mix(bags.word_hashes() * _GOLDEN ^ _mix(counts.view(np.uint64)))
        sums = np.concatenate(([np.uint64(0)], np.cumsum(pairs, dtype=np.uint64)))  # wraps: a sum modulo 2^64
        ends = np.searchsorted(bags.doc, np.arange(bags.n_docs + 1))  # rows are sorted by document
        out = sums[ends[1:]] - sums[ends[:-1]]
    return np.asarray(out, dtype=np.uint64)


class RecentTexts:
    """The hashes of the last ``capacity`` distinct texts seen, oldest forgotten first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._order: deque[int] = deque()
        self._seen: set[int] = set()

    def __len__(self) -> int:
        return len(self._seen)

    def first_seen(self, hashes: NDArray[np.uint64]) -> NDArray[np.bool_]:
        """For each hash, in order: True unless it is remembered or came earlier in ``hashes`` (a copy); remembers
        the new ones. A hash of 0 (a document without words, nothing to learn twice) is always new."""
        new = np.ones(hashes.shape[0], dtype=np.bool_)
        for i, h in enumerate(hashes.tolist()):
            if h == 0:
                continue
            if h in self._seen:
                new[i] = False
                continue
            self._remember(h)
        return new

    def _remember(self, h: int) -> None:
        self._seen.add(h)
        self._order.append(h)
        if len(self._order) > self.capacity:
            self._seen.discard(self._order.popleft())

    def state(self) -> NDArray[np.uint64]:
        """The hashes remembered, oldest first: what a snapshot keeps."""
        return np.fromiter(self._order, dtype=np.uint64, count=len(self._order))

    def restore(self, hashes: NDArray[np.uint64]) -> None:
        """Remember ``hashes`` (a snapshot's :meth:`state`, oldest first) as if seen in that order: with a smaller
        capacity than the snapshot's, the newest of them."""
        for h in np.asarray(hashes, dtype=np.uint64)[-self.capacity :].tolist():
            if h != 0 and h not in self._seen:
                self._remember(h)
