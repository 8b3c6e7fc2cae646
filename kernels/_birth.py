"""A birth proposal: one new word distribution fitted to the documents the model explains worst.

The targeted-subsample birth of Hughes & Sudderth (NIPS 2013, and their ``bnpy``) and of Bryant & Sudderth (NIPS
2012): new topics are proposed from the documents the current topics explain worst. Here, the build documents'
per-token log-likelihood Σ c_w log Σ_k θ_dk φ_kw / N_d ranks them; on the worst ``quantile`` of them one word
distribution ψ is fitted by EM with the existing topics fixed, each document d mixing ψ with its current prediction
p_dw at its own weight π_d, started from the worst document's words weighted by their surprise c_w / p_dw.
:class:`kernels.hygiene.TopicHygiene` decides whether to keep it (held-out gain).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ._batch import Batch
from ._events import SupportsTopicMoves
from ._moves import token_probs

__all__ = ["BirthFit", "birth_proposal", "fit_birth"]


@dataclass(frozen=True)
class BirthFit:
    """The EM fit behind a birth proposal, on the entries of the worst documents: the words ψ covers
    (``words``; ``w_of`` maps each entry to one of them), each entry's document ``d_of``, count ``counts`` and
    current prediction ``pred`` (p_dw), the fitted ``psi`` over ``words`` and each document's weight ``pi`` of it,
    and ``taken``: c·r per entry at the last E-step (the tokens the new topic took)."""

    words: NDArray[np.int64]
    w_of: NDArray[np.int64]
    d_of: NDArray[np.int64]
    counts: NDArray[np.float64]
    pred: NDArray[np.float64]
    psi: NDArray[np.float64]
    pi: NDArray[np.float64]
    taken: NDArray[np.float64]


def fit_birth(
    model: SupportsTopicMoves, build: Batch, phi: NDArray[np.float64], quantile: float, iterations: int
) -> BirthFit:
    """``iterations`` (≥ 1) EM steps of the fit the module docstring describes, on the worst ``quantile`` of the
    ``build`` documents. It maximises Σ_entries c log(π_d ψ_w + (1 − π_d) p_dw) (π_d kept inside (10⁻⁶, 1 − 10⁻⁶))."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
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
    cr = np.zeros_like(ce)
    for _ in range(iterations):
        num = pi[d_of] * psi[w_of]
        r = num / (num + (1.0 - pi[d_of]) * pe)
        cr = ce * r
        pi = np.bincount(d_of, weights=cr, minlength=build.n_docs) / np.maximum(n_d, 1e-300)
        pi = np.clip(pi, 1e-6, 1.0 - 1e-6)
        psi = np.bincount(w_of, weights=cr, minlength=words.size).astype(np.float64) + 1e-12
        psi /= psi.sum()
    return BirthFit(words.astype(np.int64), w_of.astype(np.int64), d_of, ce, pe, psi, pi, cr)


def birth_proposal(
    model: SupportsTopicMoves, build: Batch, phi: NDArray[np.float64], quantile: float, iterations: int
) -> tuple[NDArray[np.int64], NDArray[np.float64], float] | None:
    """``(words, psi, share)``: the words ψ covers, ψ on them, and its share of the build tokens, fitted by
    ``iterations`` EM steps to the worst ``quantile`` of the ``build`` documents (:func:`fit_birth`); None when
    the fit takes no tokens."""
    fit = fit_birth(model, build, phi, quantile, iterations)
    share = float(fit.taken.sum() / build.counts.sum())
    keep = fit.psi > 1e-4 * fit.psi.max()
    if not 0.0 < share < 1.0 or not keep.any():
        return None
    return fit.words[keep], fit.psi[keep], share
