"""Merge pairs that held-out documents cannot tell apart: one subject learned as two topics.

A subject can end up in two topic slots that the merge by distance (Hellinger under the threshold, 0.25 for SCVB0)
does not join, in two ways. The two may compete: each article of the subject takes one of them, and trains it, so
SCVB0 keeps both for tens of thousands of articles (forced into two halves 0.32 apart in the demo stream, one desk
was still two topics 0.26 apart 6,000 articles later). Or they may share the subject's words between them, and
every article of the subject uses both: in one ``make run`` the conflict desk stood as two such topics 0.59–0.61
apart from 18,000 articles to the end (50,000), their proportions correlated 0.93, and merging them gained
0.0022–0.0029 nats per token on fresh articles. In ``make run`` one desk stood as two topics in 3 of 16 runs before
this move, and in one of 14–17 with its first version, which tried pairs by distance alone (``docs/topic-hygiene.md``,
"Near pairs"). The co-occurrence merge of :mod:`kernels._cooccur` would take the second kind without
asking the data, and it is off for SCVB0: on real news distinct subjects share articles too.

The move (Hughes & Sudderth's merge, NIPS 2013, "Memoized online variational inference for Dirichlet process mixture
models", accepted on an objective rather than on a distance; here the objective is document completion on documents the
model has not learned, :mod:`kernels._delete`): after the merges by distance, the live pairs whose proportions in
``docs`` correlate above :data:`CORRELATED` (0.3), whatever their distance, then those between ``low`` (the merge
threshold) and ``below`` apart, closest first, are each merged on a copy, the smaller into the larger. A kernel's
background slot (``keep``) takes no part: every desk shares the generic words with it, so a desk it held and that a
split has just moved out lies near it, and its merge back cost the demo stream under the tolerance (in one ``make run``
it put the markets desk back into the slot 10 s after the split took it out, where it stayed for 6,000 more articles).
The merge is kept when document completion on ``docs`` drops by no more than ``tolerance`` nats per token *of the pair*:
the drop divided by the pair's share of the held-out tokens (its θ mass, weighted by document length). A merge of two
subjects loses what told them apart on exactly those tokens, so its cost per token of the pair does not shrink with the
pair's size, while the overall drop does: an absolute tolerance would merge small distinct topics and refuse large
duplicates.

Measured (completion on 256 unseen documents, per token of the pair): one demo desk in two halves 0.26–0.32 apart,
0.004–0.006; a planted subject split by its words (two topics 0.99 apart, correlated 0.84–0.88), a gain of
0.004–0.017; distinct planted topics of ``tests/test_near_merge.py``, over 0.1 (their proportions correlate under
−0.11); distinct BBC topics 0.40–0.45 apart
after one pass at K = 50, 0.014–0.049 (the pairs whose merge gains are copies: two football topics, two music
topics). :data:`TOLERANCE` = 0.01 lies between.

What it costs: in one pass over 20 Newsgroups (K = 100) and BBC (K = 50) the merges joined the chatter of posts
("don say know like", 20 Newsgroups), generic news words ("said year told bbc") and related subjects (two Labour
topics, two football topics, two music topics: BBC), and cost
0.002 (20 Newsgroups) and 0.007 (BBC) nats per word on the test documents while NPMI rose by 0.010–0.012
(``docs/topic-hygiene.md``, "Near pairs"). Many of those merges gained on the documents they were scored on, some by
far (up to 1 nat per token of the pair on BBC), and the slots they freed filled again from the stream; the pass
still ended lower. A stricter rule, the change less two standard errors of its per-document sum, refused the
planted subject split in two as well: its cost, 0.003–0.005 per token of the pair, is within the noise of 300
documents (standard error 0.006). Hence off by default (``TopicHygiene(near_merge_tries=0)``); ``make run``
turns it on, where one desk shown as two topics is what a reader notices first.
"""

from __future__ import annotations

import copy

import numpy as np

from ._batch import Batch
from ._cooccur import CORRELATION_MIN_DOCS, pair_correlations
from ._delete import completion_halves, completion_score
from ._events import Event, SupportsTopicMoves
from ._moves import mean_loglik, swap_for_merge

__all__ = ["BELOW", "CORRELATED", "TOLERANCE", "heldout_near_merges"]

#: Hellinger distance under which a pair is tried (the conflict desk of ``make run`` stood as two topics over 0.45
#: apart; distinct desks of the demo stream lie over 0.7 apart, distinct BBC topics from 0.40 on).
BELOW = 0.5
#: Correlation of two topics' proportions over the documents above which the pair is tried at any distance (the
#: co-occurrence merge's line for the online HDP, :mod:`kernels._cooccur`; a topic's proportions count from
#: :data:`kernels._cooccur.CORRELATION_MIN_DOCS` documents' worth of θ on).
CORRELATED = 0.3
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
    """Merge, in place, the live pairs of ``model`` that document completion on ``docs`` accepts (module
    docstring): those whose proportions correlate above :data:`CORRELATED` first, then those between ``low`` and
    ``below`` apart (Hellinger), closest first; each topic in one merge at most, at most ``max_tries`` scored
    proposals, none with the background slot ``keep``. Returns the merge events (score: the
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
