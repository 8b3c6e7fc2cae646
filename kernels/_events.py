"""What topic hygiene's moves emit and what they need from a kernel: :class:`Event` (one move, in the kernel's slot
ids; :mod:`service.lineage` turns events into stable topic ids with history) and :class:`SupportsTopicMoves` (the
methods :class:`kernels.hygiene.TopicHygiene` calls)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._batch import Batch

__all__ = ["Event", "SupportsTopicMoves"]

_EVENT_KINDS = ("birth", "merge", "split", "retire")


@dataclass(frozen=True)
class Event:
    """One topic move.

    ``kind``: ``"birth"`` (``topics`` = (new slot,)), ``"merge"`` (``topics`` = (merged-away slot,), ``into`` =
    the slot that now carries it), ``"split"`` (``topics`` = (split slot, new slot): the split slot keeps the
    larger half, the new slot gets the other), ``"retire"`` (``topics`` = (deleted slot,)).
    ``score``: the Hellinger distance of a merge, the weight of a retired topic, the held-out gain in nats per
    token of a birth or a split.
    """

    kind: str
    topics: tuple[int, ...]
    into: int | None = None
    score: float = 0.0
    #: A birth's proposal (word ids, their probabilities, share of tokens) or a split's (word ids, the fraction
    #: of each word's count that moves to the new slot, the fraction of every other word's), so that
    #: :meth:`kernels.hygiene.TopicHygiene.replay` can make the same move in another copy of the model.
    proposal: tuple[NDArray[np.int64], NDArray[np.float64], float] | None = field(
        default=None, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.kind not in _EVENT_KINDS:
            raise ValueError(f"event kind must be one of {_EVENT_KINDS}, got {self.kind!r}")


@runtime_checkable
class SupportsTopicMoves(Protocol):
    """What :meth:`kernels.hygiene.TopicHygiene.apply` may need from a kernel: all of it with every move on; settings
    that leave moves off need only the methods :meth:`~kernels.hygiene.TopicHygiene.missing_moves` checks (the
    particle filter has ``merge_topics`` alone)."""

    n_topics: int
    n_words: int
    n_docs_seen_: int

    def topic_word(self) -> NDArray[np.float64]: ...

    def topic_weights(self) -> NDArray[np.float64]: ...

    def token_shares(self) -> NDArray[np.float64]: ...

    def transform(self, docs: Batch) -> NDArray[np.float64]: ...

    def background_topic(self, phi: NDArray[np.float64] | None = None) -> int | None: ...

    def merge_topics(self, into: int, src: int) -> None: ...

    def delete_topic(self, k: int) -> None: ...

    def birth_topic(
        self, k: int, word_ids: ArrayLike, word_probs: ArrayLike, share: float
    ) -> tuple[float, Callable[[], None]]: ...

    def split_topic(
        self, k: int, j: int, word_ids: ArrayLike, fractions: ArrayLike, rest: float
    ) -> tuple[float, Callable[[], None]]: ...
