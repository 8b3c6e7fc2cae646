"""Delete moves accepted on document completion: the topics the recent documents do not need are emptied.

Hughes & Sudderth's delete move (NIPS 2013, "Memoized online variational inference for Dirichlet process mixture
models"; their ``bnpy`` library) gives a topic's expected tokens to the remaining topics and keeps the result only
if the objective does not drop. Here the objective is the held-out score a topic model is judged by, document
completion (``evaluation``; Asuncion et al. 2009, seed 002, §4 "perplexity"): each recent document's tokens are
split in two halves, θ is inferred from the first half with the topics fixed (``model.transform``), and the second
half is scored as the mean per-token log Σ_k θ_dk φ_kw. Scoring the same tokens that θ was fitted to (as the birth
and split acceptance of :mod:`kernels.hygiene` does, on whole held-out documents) rewards every extra topic, since
a topic can only help a document explain its own words; on the second half a topic that the data do not support
costs likelihood, so deleting it is accepted (measured in ``docs/ohdp.md``: on a planted corpus the score rises
monotonically as the splinters of the collapsed HDP are deleted, down to the planted topics;
``tests/test_hdp_chooses.py`` checks that the move keeps the planted number of topics at two truncations).

Candidates are the live topics lighter than ``candidates_below`` by their prevalence or by their share of the
tokens, whichever is smaller (``TopicModel.token_shares``): the online HDP's E[β] stays high for long for a topic
whose subject left the stream, when stray words still give its slot a table in most documents (a long-stream
review: E[β] 0.07–0.11 on 1.2–1.7 % of the tokens over the 80,000 documents after; a new subject later grew in
that slot under the old topic's id). Proposals, smallest topics first: the smallest half of the candidates is
deleted as a group (on a copy of the model); if the score does not drop by more than ``tolerance`` the group is
kept and the next group tried, otherwise the group is halved; at most ``max_tries`` scored proposals per call. A
kept group is replayed on the model in the same order, so the moves are the kernel's own ``delete_topic`` (retire
events for the lineage).
"""

from __future__ import annotations

import copy

import numpy as np
from numpy.typing import NDArray

from ._batch import Batch
from ._events import SupportsTopicMoves
from ._moves import mean_loglik

__all__ = ["completion_halves", "completion_score", "heldout_deletes"]


def completion_halves(docs: Batch) -> tuple[Batch, Batch]:
    """Each document's tokens dealt alternately into (observed, held-out) halves, in word-id order (deterministic;
    documents with fewer than two tokens are left out)."""
    first: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    second: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    for d in range(docs.n_docs):
        ids, cnts = docs.doc(d)
        tokens = np.repeat(ids, np.rint(cnts).astype(np.int64))
        if tokens.size < 2:
            continue
        for part, out in ((tokens[0::2], first), (tokens[1::2], second)):
            u, c = np.unique(part, return_counts=True)
            out.append((u.astype(np.int64), c.astype(np.float64)))
    return Batch.from_docs(first), Batch.from_docs(second)


def completion_score(model: SupportsTopicMoves, observed: Batch, held_out: Batch) -> float:
    """Document completion: the mean per-token log-likelihood of ``held_out`` with θ inferred from ``observed``
    (:func:`completion_halves`) and the model's topics fixed."""
    return mean_loglik(model.transform(observed), model.topic_word(), held_out)


def heldout_deletes(
    model: SupportsTopicMoves,
    docs: Batch,
    *,
    candidates_below: float,
    empty_below: float,
    tolerance: float,
    max_tries: int,
    keep: int | None = None,
) -> list[tuple[int, float]]:
    """Delete the live topics with weight < ``candidates_below`` that document completion on ``docs`` does not
    need (see the module docstring); return (topic, weight before) of each deletion, in order."""
    observed, held_out = completion_halves(docs)
    if observed.n_docs < 2:
        return []
    weights = model.topic_weights()
    live = weights >= empty_below
    # Light by its prevalence or by its tokens: the online HDP's E[β] stays high for a topic whose subject left the
    # stream but whose slot still gets a table in most documents from stray words (TopicModel.token_shares).
    light = np.minimum(weights, model.token_shares())
    cand = [int(k) for k in np.argsort(light, kind="stable") if live[k] and light[k] < candidates_below and k != keep]
    base = completion_score(model, observed, held_out)
    done: list[tuple[int, float]] = []
    size = (len(cand) + 1) // 2
    tries = 0
    while cand and size > 0 and tries < max_tries:
        group = cand[:size]
        if np.count_nonzero(live) - len(group) < 1:
            group = group[: max(0, int(np.count_nonzero(live)) - 1)]
            if not group:
                break
        trial = copy.deepcopy(model)
        for k in group:
            trial.delete_topic(k)
        score = completion_score(trial, observed, held_out)
        tries += 1
        if score >= base - tolerance:
            for k in group:
                done.append((k, float(weights[k])))
                model.delete_topic(k)
                live[k] = False
            base = score
            cand = cand[len(group) :]
            size = min(size, len(cand))
        else:
            size //= 2
    return done
