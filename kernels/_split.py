"""The proposal of a split move: is a topic two topics, and if so, which of its words go to which half?

Given a topic k and recent documents, each token's share in k is its responsibility r_ik = θ_dk φ_kw / p_i
(p_i = Σ_j θ_dj φ_jw), so document d holds x_dw = c_dw r_dwk of topic k's tokens. A two-topic model is fitted
to these tokens alone by EM (a two-topic pLSA restricted to k's share: each document mixes the halves A and B at
its own weight π_d, so words that co-occur in documents go to the same half):

    E:  ρ_dw = π_d ψ_B(w) / (π_d ψ_B(w) + (1 − π_d) ψ_A(w))
    M:  π_d ∝ Σ_w x_dw ρ_dw (+ ½ each side),   ψ_B ∝ Σ_d x_dw ρ_dw + λ φ_k,   ψ_A ∝ Σ_d x_dw (1 − ρ_dw) + λ φ_k

started from the document with the most topic-k tokens (ψ_A) and what topic k has beyond it (ψ_B ∝ max(φ_k −
½ψ_A, 0)). A topic is *muddled* when the halves are far apart (Hellinger distance) and each holds a real share of
the tokens; a clean topic's halves differ only by sampling noise. This is the restricted two-topic refinement of
a split proposal in Bryant & Sudderth (NIPS 2012, "Truly nonparametric online variational inference for HDPs":
a topic split in two, refined on the current minibatch, kept only if the objective improves) and of the
targeted proposals of Hughes & Sudderth (NIPS 2013, ``bnpy``: fresh components fitted to the data one
component explains, then accepted or rejected on the whole-data objective). The acceptance test is the
caller's (:class:`kernels.hygiene.TopicHygiene`: held-out likelihood).

The move itself divides topic k's *whole-window* statistics (not only the recent documents'): word w's expected
count in k goes to the smaller half in the proportion f_w = n_S ψ_S(w) / (n_A ψ_A(w) + n_B ψ_B(w)) (n_A, n_B the
halves' tokens), every word not seen in the recent documents in the smaller half's overall share
(``kernels._moves.split_column``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ._batch import Batch
from .summaries import hellinger

__all__ = ["SplitProposal", "muddled_topics", "propose_split"]

_PRIOR = 0.1  # λ: the halves' pseudo-counts, as a share of the topic's recent tokens, spread like φ_k
_MIN_ENTRY = 1e-3  # entries holding less of topic k than this (tokens) are left out of the fit


@dataclass(frozen=True)
class SplitProposal:
    """Two halves of topic k: their Hellinger distance, the smaller half's share of k's recent tokens, and the
    move (word ids, the fraction of each word's count in k that goes to the new topic, the fraction of every
    other word); and the fit itself: the halves ψ_A, ψ_B over ``word_ids`` and each document's weight π_d of
    half B (for checks and diagnostics)."""

    distance: float
    share: float
    tokens: float
    word_ids: NDArray[np.int64]
    fractions: NDArray[np.float64]
    rest: float
    psi_a: NDArray[np.float64]
    psi_b: NDArray[np.float64]
    pi: NDArray[np.float64]
    #: Whether half B (else A) is the one that goes to the new topic: the smaller, unless :meth:`keeping_nearer`.
    moves_b: bool = True

    def keeping_nearer(self, target: NDArray[np.float64]) -> SplitProposal:
        """This split with the half nearer ``target`` (a word distribution over the vocabulary, Hellinger
        distance over the proposal's words) left in the topic, the other moved, whichever is smaller. The
        background slot keeps its generic half: a desk it took early may hold more of its tokens."""
        t = target[self.word_ids]
        t = t / max(float(t.sum()), 1e-300)
        moved, kept = (self.psi_b, self.psi_a) if self.moves_b else (self.psi_a, self.psi_b)
        if hellinger(kept, t) <= hellinger(moved, t):
            return self
        return replace(
            self, fractions=1.0 - self.fractions, rest=1.0 - self.rest, share=1.0 - self.share, moves_b=not self.moves_b
        )


def propose_split(
    x: NDArray[np.float64], doc_of: NDArray[np.int64], docs: Batch, phi_k: NDArray[np.float64], iterations: int
) -> SplitProposal | None:
    """Fit two halves to topic k's tokens ``x`` (one per entry of ``docs``: document ``doc_of``) by EM.

    ``phi_k``: topic k's word distribution over the whole vocabulary (the halves' prior). ``None`` when topic k
    holds too few tokens in these documents to split (fewer than two documents).
    """
    n_docs = docs.n_docs
    keep = x > _MIN_ENTRY
    x, doc_of = x[keep], doc_of[keep]
    words, w_of = np.unique(docs.word_ids[keep], return_inverse=True)
    n_d = np.bincount(doc_of, weights=x, minlength=n_docs)
    if np.count_nonzero(n_d > 0.5) < 2:
        return None
    n = float(x.sum())
    prior = phi_k[words] / max(float(phi_k[words].sum()), 1e-300) * (_PRIOR * n)
    # start: the document with the most topic-k tokens, and what the topic holds beyond it
    seed = int(np.argmax(n_d))
    psi_a = np.bincount(w_of, weights=np.where(doc_of == seed, x, 0.0), minlength=words.size) + prior
    psi_a /= psi_a.sum()
    whole = phi_k[words] / max(float(phi_k[words].sum()), 1e-300)
    psi_b = np.maximum(whole - 0.5 * psi_a, 0.0) + 1e-9
    psi_b /= psi_b.sum()
    pi = np.full(n_docs, 0.5)
    pi[seed] = 0.1
    rho = np.zeros_like(x)
    for _ in range(iterations):
        num = pi[doc_of] * psi_b[w_of]
        rho = num / np.maximum(num + (1.0 - pi[doc_of]) * psi_a[w_of], 1e-300)
        xb = x * rho
        pi = (np.bincount(doc_of, weights=xb, minlength=n_docs) + 0.5) / (n_d + 1.0)
        psi_b = np.bincount(w_of, weights=xb, minlength=words.size) + prior
        psi_a = np.bincount(w_of, weights=x - xb, minlength=words.size) + prior
        psi_b /= psi_b.sum()
        psi_a /= psi_a.sum()
    n_b = float((x * rho).sum())
    n_a = n - n_b
    distance = hellinger(psi_a, psi_b)
    small, n_s, n_l, psi_l = (psi_b, n_b, n_a, psi_a) if n_b <= n_a else (psi_a, n_a, n_b, psi_b)
    fractions = n_s * small / np.maximum(n_s * small + n_l * psi_l, 1e-300)
    share = n_s / n if n > 0 else 0.0
    return SplitProposal(
        distance, share, n, words.astype(np.int64), fractions, share, psi_a, psi_b, pi, moves_b=n_b <= n_a
    )


def muddled_topics(
    phi: NDArray[np.float64],
    theta: NDArray[np.float64],
    p: NDArray[np.float64],
    docs: Batch,
    candidates: list[int],
    *,
    min_tokens: float,
    threshold: float,
    min_share: float,
    iterations: int,
) -> list[tuple[int, SplitProposal]]:
    """The ``candidates`` whose halves lie more than ``threshold`` apart, the smaller with at least ``min_share``
    of the topic's tokens, most separated first; topics holding fewer than ``min_tokens`` of ``docs``' tokens are
    not considered. ``theta``: the documents' mixtures; ``p``: Σ_k θ_dk φ_kw for every entry of ``docs``."""
    doc_of = np.repeat(np.arange(docs.n_docs), np.diff(docs.indptr))
    c_over_p = docs.counts / p
    found: list[tuple[int, SplitProposal]] = []
    for k in candidates:
        x = c_over_p * theta[doc_of, k] * phi[k, docs.word_ids]  # topic k's expected tokens per entry
        if not x.sum() >= min_tokens:
            continue
        prop = propose_split(x, doc_of, docs, phi[k], iterations)
        if prop is not None and prop.distance > threshold and prop.share >= min_share:
            found.append((k, prop))
    found.sort(key=lambda kp: -kp[1].distance)
    return found
