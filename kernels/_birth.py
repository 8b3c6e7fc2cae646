"""A birth proposal: one new word distribution fitted to the documents the model explains worst.

The targeted-subsample birth of Hughes & Sudderth (NIPS 2013, and their ``bnpy``) and of Bryant & Sudderth (NIPS
2012): new topics are proposed from the documents the current topics explain worst. Here, the build documents'
per-token log-likelihood Σ c_w log Σ_k θ_dk φ_kw / N_d ranks them; on the worst ``quantile`` of them one word
distribution ψ is fitted by EM with the existing topics fixed, each document d mixing ψ with its current prediction
p_dw at its own weight π_d, started from the worst document's words weighted by their surprise c_w / p_dw.
:class:`kernels.hygiene.TopicHygiene` decides whether to keep it (held-out gain).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ._batch import Batch
from ._events import SupportsTopicMoves
from ._moves import token_probs

__all__ = ["birth_proposal"]


def birth_proposal(
    model: SupportsTopicMoves, build: Batch, phi: NDArray[np.float64], quantile: float, iterations: int
) -> tuple[NDArray[np.int64], NDArray[np.float64], float] | None:
    """``(words, psi, share)``: the words ψ covers, ψ on them, and its share of the build tokens, fitted by
    ``iterations`` EM steps to the worst ``quantile`` of the ``build`` documents (see the module docstring); None
    when the fit takes no tokens."""
    theta = model.transform(build)
    p = token_probs(theta, phi, build)
    doc_of = np.repeat(np.arange(build.n_docs), np.diff(build.indptr))
    c = build.counts
    n_d = np.bincount(doc_of, weights=c, minlength=build.n_docs)
    ll_d = np.bincount(doc_of, weights=c * np.log(p), minlength=build.n_docs) / np.maximum(n_d, 1e-300)
    ll_d[n_d <= 0] = np.inf
    n_worst = max(1, int(np.ceil(quantile * np.count_nonzero(n_d > 0))))
    worst = np.argsort(ll_d, kind="stable")[:n_worst]
    sel = np.zeros(build.n_docs, dtype=bool)
    sel[worst] = True
    entries = np.flatnonzero(sel[doc_of])
    words, w_of = np.unique(build.word_ids[entries], return_inverse=True)
    d_of = doc_of[entries]
    ce, pe = c[entries], p[entries]
    # start: the worst document's words, weighted by their surprise
    seed_doc = worst[0]
    psi: NDArray[np.float64] = np.bincount(
        w_of, weights=np.where(d_of == seed_doc, ce / pe, 0.0), minlength=words.size
    ).astype(np.float64)
    psi = psi / psi.sum() + 1e-12
    pi = np.where(np.arange(build.n_docs) == seed_doc, 0.5, 0.1)
    for _ in range(iterations):
        num = pi[d_of] * psi[w_of]
        r = num / (num + (1.0 - pi[d_of]) * pe)
        cr = ce * r
        pi = np.bincount(d_of, weights=cr, minlength=build.n_docs) / np.maximum(n_d, 1e-300)
        pi = np.clip(pi, 1e-6, 1.0 - 1e-6)
        psi = np.bincount(w_of, weights=cr, minlength=words.size).astype(np.float64) + 1e-12
        psi /= psi.sum()
    share = float(cr.sum() / c.sum())
    keep = psi > 1e-4 * psi.max()
    if not 0.0 < share < 1.0 or not keep.any():
        return None
    return words[keep], psi[keep], share
