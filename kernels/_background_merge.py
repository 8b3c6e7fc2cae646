"""Join a background split in two: merge the two most generic topics when held-out documents do not object.

Every news document uses the same generic words ("said", "told", "year"). A model that gathers them in one topic
can show that topic as the background (:mod:`kernels.background`); the online HDP sometimes learns them as two
topics instead, in one pass over the demo stream 0.56 apart (Hellinger). Neither
merge of :mod:`kernels.hygiene` sees such a pair: they are too far apart for a merge by distance, and their
proportions do not rise and fall together (correlation 0.16): they compete for the same words.

The move: the model's two heaviest topics are merged on a copy, the smaller into the larger (the words every
document uses hold the most mass, so a background learned as two topics shows as the two heaviest). The merge is
kept when the merged topic is the background the model then marks (``model.background_topic()``) and document
completion on ``docs`` (documents the model has not learned: :mod:`kernels._delete`) does not drop by more than
``tolerance`` nats per token. On the demo stream (one pass, T = 20) the model marks its first generic topic as the
background, and a second one grows beside it until neither is marked (32 % and 7 % of the mass after 10,000
articles, 35 % and 23 % after 74,000); merging the two does not lower completion on the next articles, while
merging the background with a desk does, by 0.055–0.062 nats per token (docs/ohdp.md, "Splinters, and the co-
occurrence merge"). Where the second heaviest topic is a subject, completion drops and the copy is thrown away
(``tests/test_background_merge.py``).

Topic hygiene accepts a drop of :data:`TOLERANCE`: with over-relaxed document sweeps (the online HDP's default) the
two halves' merge cost 0.0009 nats per token on the demo stream, and without them it gained; merging a background
with a desk costs 0.055–0.062, two planted subjects 0.10.
"""

from __future__ import annotations

import copy

import numpy as np

from ._batch import Batch
from ._delete import completion_halves, completion_score
from ._events import Event, SupportsTopicMoves
from ._moves import swap_for_merge
from .summaries import hellinger

__all__ = ["TOLERANCE", "heldout_background_merge"]

#: The drop of document completion (nats per token) topic hygiene accepts for this merge (module docstring).
TOLERANCE = 0.005


def heldout_background_merge(
    model: SupportsTopicMoves, docs: Batch, *, tolerance: float, keep: int | None = None
) -> Event | None:
    """Merge the two heaviest topics of ``model`` in place if the module docstring's tests pass; the merge event
    (score: the pair's Hellinger distance), or None. The lighter goes into the heavier, into ``keep`` (a background
    slot) when it is one of them."""
    weights = model.topic_weights()
    observed, held_out = completion_halves(docs)
    if weights.size < 2 or observed.n_docs < 2:
        return None
    into, src = (int(k) for k in np.argsort(-weights, kind="stable")[:2])
    if swap_for_merge(into, src, weights, keep):
        into, src = src, into
    trial = copy.deepcopy(model)
    trial.merge_topics(into, src)
    if trial.background_topic() != into:  # the cheap test first: no inference unless the merge makes a background
        return None
    if completion_score(trial, observed, held_out) < completion_score(model, observed, held_out) - tolerance:
        return None
    phi = model.topic_word()
    distance = hellinger(phi[into], phi[src])
    model.merge_topics(into, src)
    return Event("merge", (src,), into, distance)
