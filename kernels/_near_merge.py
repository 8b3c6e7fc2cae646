"""Merge near pairs that held-out documents cannot tell apart: one subject learned as two topics.

A subject can end up in two topic slots that are too far apart for the merge by distance (Hellinger over the
threshold, 0.25 for SCVB0) and whose proportions do not rise and fall together (each article of the subject takes
one of the two, so the co-occurrence merge of :mod:`kernels._cooccur` sees them compete, not co-occur). SCVB0 keeps
such a pair for tens of thousands of articles: every document of the subject trains the half it chose. In
``make run`` a conflict desk stood as two topics 0.30 and over 0.45 apart in 2 of 13 runs (``docs/scvb0.md``,
"Not done"); forced into two halves 0.32 apart in the demo stream, one desk was still two topics 0.26 apart 6,000
articles later.

The move (Hughes & Sudderth's merge, NIPS 2013, "Memoized online variational inference for Dirichlet process
mixture models", accepted on an objective rather than on a distance; here the objective is document completion on
documents the model has not learned, :mod:`kernels._delete`): after the merges by distance, the live pairs between
``low`` (the merge threshold) and ``below`` apart are tried closest first, each merged on a copy, the smaller into
the larger. A kernel's background slot (``keep``) takes no part: every desk shares the generic words with it, so
a desk it held and that a split has just moved out lies near it, and its merge back cost the demo stream under
the tolerance (in one ``make run`` it put the markets desk back into the slot 10 s after the split took it out,
where it stayed for 6,000 more articles). The merge is kept
when document completion on ``docs`` drops by no more than ``tolerance`` nats per token *of the pair*: the drop
divided by the pair's share of the held-out tokens (its θ mass, weighted by document length). A merge of two
subjects loses what told them apart on exactly those tokens, so its cost per token of the pair does not shrink
with the pair's size, while the overall drop does: an absolute tolerance would merge small distinct topics and
refuse large duplicates.

Measured (completion on 256 unseen documents, per token of the pair): one demo desk in two halves 0.26–0.32 apart,
0.004–0.006; distinct planted topics of ``tests/test_near_merge.py``, over 0.1; distinct BBC topics 0.40–0.45 apart
after one pass at K = 50, 0.014–0.049 (the pairs whose merge gains are copies: two football topics, two music
topics). :data:`TOLERANCE` = 0.01 lies between.

What it costs: in one pass over 20 Newsgroups (K = 100) and BBC (K = 50) the merges joined the chatter of posts and
generic news words ("like know time writes", "said time bbc like") and a few related subjects, and cost 0.005–0.007
nats per word on the test documents while NPMI rose by 0.008–0.015 (``docs/topic-hygiene.md``, "Near pairs"). Many
of those merges gained on the documents they were scored on, some by far (up to 1 nat per token of the pair on
BBC), and the slots they freed filled again from the stream; the pass still ended lower. A stricter rule, the
change less two standard errors of its per-document sum, halved the cost on 20 Newsgroups but refused the planted
subject split in two as well: its cost, 0.003–0.005 per token of the pair, is within the noise of 300 documents
(standard error 0.006). Hence off by default (``TopicHygiene(near_merge_tries=0)``); ``make run``
turns it on, where one desk shown as two topics is what a reader notices first.
"""

from __future__ import annotations

import copy

import numpy as np

from ._batch import Batch
from ._cooccur import pair_correlations
from ._delete import completion_halves, completion_score
from ._events import Event, SupportsTopicMoves
from ._moves import mean_loglik, swap_for_merge

__all__ = ["BELOW", "CORRELATED", "TOLERANCE", "heldout_near_merges"]

#: Hellinger distance under which a pair is tried (the conflict desk of ``make run`` stood as two topics over 0.45
#: apart; distinct desks of the demo stream lie over 0.7 apart, distinct BBC topics from 0.40 on).
BELOW = 0.5
#: Correlation of two topics' proportions over the documents above which the pair is tried at any distance (the
#: co-occurrence merge's line for the online HDP, :mod:`kernels._cooccur`), and the fewest documents' worth of θ a
#: topic needs for its proportions to count.
CORRELATED, CORRELATION_MIN_DOCS = 0.3, 2.0
#: The drop of document completion per token of the pair (nats) still accepted (module docstring).
TOLERANCE = 0.01


def heldout_near_merges(
    model: SupportsTopicMoves,
    docs: Batch,
    *,
    low: float,
    below: float = BELOW,
    tolerance: float = TOLERANCE,
    empty_below: float,
    max_tries: int,
    keep: int | None = None,
) -> list[Event]:
    """Merge, in place, the live pairs of ``model`` between ``low`` and ``below`` apart (Hellinger) that document
    completion on ``docs`` accepts (module docstring); closest first, each topic in one merge at most, at most
    ``max_tries`` scored proposals, none with the background slot ``keep``. Returns the merge events (score: the
    pair's Hellinger distance)."""
    observed, held_out = completion_halves(docs)
    weights = model.topic_weights()
    live = np.flatnonzero(weights >= empty_below)
    live = live[live != keep] if keep is not None else live
    if max_tries < 1 or live.size < 2 or observed.n_docs < 2:
        return []
    root = np.sqrt(model.topic_word()[live])
    dist = np.sqrt(np.clip(1.0 - root @ root.T, 0.0, 1.0))
    theta = model.transform(observed)
    corr = pair_correlations(theta[:, live], CORRELATION_MIN_DOCS)
    together = corr > CORRELATED
    i, j = np.nonzero(np.triu(((dist >= low) & (dist < below)) | together, 1))
    order = np.lexsort((dist[i, j], ~together[i, j]))  # the pairs that share documents first, then the closest
    base = mean_loglik(theta, model.topic_word(), held_out)
    # Each topic's share of the held-out tokens: θ of each document (from its observed half) times its tokens.
    mass = held_out.doc_tokens() @ theta
    mass = mass / max(float(mass.sum()), 1e-300)
    done: set[int] = set()
    events: list[Event] = []
    for n in order[:max_tries]:
        a, b = int(live[i[n]]), int(live[j[n]])
        if a in done or b in done:
            continue
        if swap_for_merge(a, b, weights, None):
            a, b = b, a
        share = float(mass[a] + mass[b])
        trial = copy.deepcopy(model)
        trial.merge_topics(a, b)
        score = completion_score(trial, observed, held_out)
        if score < base - tolerance * share:
            continue
        model.merge_topics(a, b)
        events.append(Event("merge", (b,), a, float(dist[i[n], j[n]])))
        done.update((a, b))
        base = score
    return events
