"""Which topic, if any, is the background topic: the one that holds the words every document uses.

A topic model of news gathers words such as "said", "told", "people", "year" either in one topic that every
document mixes in, or spreads them over all topics (then each topic's top words start with them). Only the first
can be shown as what it is. :func:`background_topic` finds it from the topics alone: the model's corpus-wide word
distribution is p = Σ_k w_k φ_k (w = topic weights, summing to 1), and the background topic is, among the topics
that hold at least an average share of the mass (w_k ≥ 1/K), the one closest to p in Hellinger distance,
H(φ_k, p) = sqrt(1 − Σ_w sqrt(φ_kw p_w)), provided it is *clearly* closer than the others: by at least ``margin``.
The share condition leaves out nearly empty topics, whose few tokens are a sample of the common words and so lie
close to p without explaining anything.

Calibration (one pass of SCVB0 over the benchmark corpora, seeds 0–2, ``docs/scvb0.md``, "Background topic"): with
a background slot (``SCVB0(background=0.05)``) the slot is closer to p than the next topic by 0.088–0.172; without
one, the two closest topics are within 0.000–0.027 of each other and none is a background. ``margin`` = 0.04
separates the two cases (with ``background=0.02`` the margin is 0.006–0.082, so that slot is not always distinct).
No kernel marks its background with it any more: on the online HDP's model of the demo generator's stream the
planted background is nearest by 0.040, at the margin's edge, although the HDP's own test, by tables, marks it
clearly (``tests/test_background.py``); on SCVB0's and the particle filter's models of that stream it picked the
football desk, and nothing at all for an SCVB0 slot holding the generic words once hygiene had merged the duplicate
desks. The kernels judge by documents instead (:func:`background_by_documents`, the particle filter's own rule,
the online HDP's tables).

>>> import numpy as np
>>> generic = np.array([0.25, 0.25, 0.25, 0.25, 0.0, 0.0])
>>> phi = np.array([generic, [0.0, 0.1, 0.0, 0.0, 0.9, 0.0], [0.1, 0.0, 0.0, 0.0, 0.0, 0.9]])
>>> background_topic(phi, np.array([0.5, 0.25, 0.25]))
0
>>> background_topic(phi[1:], np.array([0.5, 0.5])) is None
True
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BACKGROUND_DOC_RATIO",
    "BACKGROUND_DOC_SHARE",
    "BACKGROUND_MARGIN",
    "TOPIC_USE_SHARE",
    "background_by_documents",
    "background_distances",
    "background_topic",
]

#: How much closer (Hellinger distance) to the corpus-wide word distribution than every other topic a topic
#: must be to count as the background topic (calibration in the module docstring).
BACKGROUND_MARGIN = 0.04
_BLOCK = 16  # rows of φ per step of background_distances


def background_distances(phi: NDArray[np.floating], weights: NDArray[np.floating]) -> NDArray[np.float64]:
    """H(φ_k, p) for every topic k, p = Σ_k w_k φ_k / Σ_k w_k (``phi`` K×W rows summing to 1, ``weights`` K)."""
    phi = np.asarray(phi, dtype=np.float64)
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    if phi.ndim != 2 or w.shape != (phi.shape[0],):
        raise ValueError(f"phi must be K×W and weights length K, got {phi.shape} and {w.shape}")
    total = w.sum()
    w = w / total if total > 0 else np.full(phi.shape[0], 1.0 / phi.shape[0])
    p = w @ phi
    bc = np.empty(phi.shape[0])  # Bhattacharyya coefficient of each row with p, a block of rows at a time: the
    for k in range(0, phi.shape[0], _BLOCK):  # service calls this at every snapshot, so no second K×W temporary
        bc[k : k + _BLOCK] = np.sqrt(phi[k : k + _BLOCK] * p).sum(axis=1)
    return np.sqrt(np.maximum(1.0 - bc, 0.0))


def background_topic(
    phi: NDArray[np.floating], weights: NDArray[np.floating], margin: float = BACKGROUND_MARGIN
) -> int | None:
    """The background topic of ``phi`` (K×W) with topic ``weights`` (K), or None (see the module docstring):
    among the topics holding at least an average share of the mass, the one nearest the corpus-wide word
    distribution, if the next is ``margin`` farther."""
    h = background_distances(phi, weights)
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    total = w.sum()
    heavy = np.flatnonzero(w >= total / w.size) if total > 0 else np.arange(w.size)
    order = heavy[np.argsort(h[heavy], kind="stable")]
    if order.size == 0:
        return None
    if order.size == 1 or h[order[1]] - h[order[0]] >= margin:
        return int(order[0])
    return None


#: A document *uses* a topic when the topic holds at least this share of the document's tokens (its own counts,
#: without the prior's).
TOPIC_USE_SHARE = 0.05
#: The background topic by documents (:func:`background_by_documents`): at least this share of the documents use
#: it...
BACKGROUND_DOC_SHARE = 0.5
#: ...and at least this many times as many documents as use the next topic.
BACKGROUND_DOC_RATIO = 2.0


def background_by_documents(using: NDArray[np.floating], n_docs: float) -> int | None:
    """The topic that the most documents use, if it is the background by the rule below, else None.

    ``using[k]``: how many of ``n_docs`` documents use topic k (:data:`TOPIC_USE_SHARE`; counts may be decayed).
    Every article uses the generic words, a desk's words only its own articles, so the background stands out by
    documents, as the particle filter's does (``ParticleFilterLDA.background_topic``) and the online HDP's by
    tables. Calibration (SCVB0, one pass, seed 0, on held-out documents; ``docs/scvb0.md``, "Background topic"):
    a background slot that holds the generic words is used by 78–100 % of the documents and by 4.7–8.3 times as
    many as the next topic (demo generator's stream at b = 0.2, BBC at b = 0.05 and 0.2); without a slot, or with
    a slot that took a desk, the most used topic is a subject (football: 20–22 % of the generator's articles,
    BBC's sport) used by 1.4–1.6 times as many documents as the next. The rule asks for half the documents and
    twice the next topic's.

    >>> background_by_documents(np.array([95.0, 20.0, 15.0]), 100.0)
    0
    >>> background_by_documents(np.array([22.0, 14.0, 13.0]), 100.0) is None
    True
    """
    using = np.asarray(using, dtype=np.float64)
    if using.size < 2 or not n_docs > 0:
        return None
    first, second = np.argsort(-using, kind="stable")[:2]
    if using[first] >= BACKGROUND_DOC_SHARE * n_docs and using[first] >= BACKGROUND_DOC_RATIO * using[second]:
        return int(first)
    return None
