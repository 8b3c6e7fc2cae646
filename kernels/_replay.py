"""Making on a live model the topic moves that :meth:`kernels.hygiene.TopicHygiene.apply` planned on a copy of it.

The service plans hygiene on a snapshot's copy, off the batch loop, and makes the moves on the live model at a
later capture, when they cost only row updates. The live model has learned a few more batches meanwhile, and a
slot near-empty in the copy may hold a new topic by then (the online HDP opens topics in free slots itself), so
each move is checked against the live model first and skipped when it no longer fits:

* a merge, unless both topics are live and still as close as planned: Hellinger distance at most the planned
  one (the event's score) plus :data:`REPLAY_DISTANCE_SLACK`;
* a retirement, unless the topic is live and its weight at most twice the planned one plus
  :data:`REPLAY_WEIGHT_SLACK`;
* a birth or a split, unless its slot is still free (a split divides the live topic's statistics of that moment by
  the planned per-word fractions).

Word ids whose vocabulary slots were given to other words since the copy (``forgotten``: the model's
``reset_words``) are left out of a birth's or a split's proposal, so the new topic takes none of the new words'
counts on the old words' account.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._events import Event, SupportsTopicMoves
from .summaries import hellinger

__all__ = ["REPLAY_DISTANCE_SLACK", "REPLAY_WEIGHT_SLACK", "replay_moves"]

#: A planned merge is made only if the two live topics are at most this much further apart (Hellinger) than when it
#: was planned: a few batches move a topic by a few hundredths, a slot that the online HDP refilled with another
#: topic meanwhile by more than half (measured: 0.86 and 0.90 for planned 0.1; three live topics were fused).
REPLAY_DISTANCE_SLACK = 0.1
#: ... and a planned retirement only if the live topic's weight is at most twice the planned one plus this.
REPLAY_WEIGHT_SLACK = 0.001


def replay_moves(
    model: SupportsTopicMoves, events: Sequence[Event], empty_below: float, forgotten: ArrayLike | None = None
) -> list[Event]:
    """Make ``events`` on ``model`` in order, each only if it still fits (module docstring); return those made.
    A topic is live when its weight is at least ``empty_below``."""
    gone = np.zeros(int(model.n_words), dtype=np.bool_)
    if forgotten is not None:
        gone[np.asarray(forgotten, dtype=np.int64)] = True
    made: list[Event] = []
    phi: NDArray[np.float64] | None = None
    touched: set[int] = set()
    for e in events:
        weights = model.topic_weights()
        live = weights >= empty_below
        k = e.topics[0]
        if e.kind == "retire":
            if not (live[k] and np.count_nonzero(live) > 1 and weights[k] <= 2.0 * e.score + REPLAY_WEIGHT_SLACK):
                continue
            model.delete_topic(k)
        elif e.kind == "merge" and e.into is not None and live[k] and live[e.into]:
            if phi is None or touched & {k, e.into}:  # rows a move made here has changed: read them again
                phi, touched = model.topic_word(), set()
            if hellinger(phi[k], phi[e.into]) > e.score + REPLAY_DISTANCE_SLACK:
                continue
            model.merge_topics(e.into, k)
        elif e.kind == "birth" and e.proposal is not None and not live[k]:
            ids, probs, share = e.proposal
            keep = ~gone[ids]
            if not keep.any():
                continue
            model.birth_topic(k, ids[keep], probs[keep] / probs[keep].sum(), share)
        elif e.kind == "split" and e.proposal is not None and live[k] and not live[e.topics[1]]:
            ids, fractions, rest = e.proposal
            keep = ~gone[ids]
            model.split_topic(k, e.topics[1], ids[keep], fractions[keep], rest)
        else:
            continue
        touched.update(e.topics)
        if e.into is not None:
            touched.add(e.into)
        made.append(e)
    return made
