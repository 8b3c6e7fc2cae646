"""Read-outs of the particle filter: the weighted mean topic–word distribution φ over the particles, and the
deterministic fold-in that ``transform`` uses with φ fixed (``docs/particle-filter.md``, "Read-outs")."""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._batch import CSR
from ._pf_state import WordRows

__all__ = ["fold_in_mean_field", "mean_phi_columns"]


@njit(cache=True, nogil=True)
def mean_phi_columns(
    cols: NDArray[np.int64], weights: NDArray[np.float64], beta: float, words: WordRows, nk: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Columns ``cols`` of φ = Σ_p ω^(p) (n_kw^(p) + β)/(n_k^(p) + Wβ), shape (K, len(cols)); ``weights`` are
    the normalised ω, ``nk`` the particles' n_k (P×K)."""
    rows = words.rows
    ptr = words.ptr
    W, P = ptr.shape
    K = nk.shape[1]
    wbeta = W * beta
    inv = np.empty((P, K), dtype=np.float64)
    for p in range(P):
        for k in range(K):
            inv[p, k] = weights[p] / (nk[p, k] + wbeta)
    out = np.zeros((K, cols.shape[0]), dtype=np.float64)
    for c in range(cols.shape[0]):
        pw = ptr[cols[c]]
        for p in range(P):
            r = pw[p]
            for k in range(K):
                out[k, c] += (rows[r, k] + beta) * inv[p, k]
    return out


@njit(cache=True, nogil=True)
def fold_in_mean_field(docs: CSR, phi: NDArray[np.float64], alpha: float, iters: int) -> NDArray[np.float64]:
    """Deterministic fold-in for ``transform``: with φ fixed, iterate
    θ_dk ∝ α + Σ_w c_w θ_dk φ_kw / Σ_k' θ_dk' φ_k'w (the EM fixed point of the document's posterior mean).
    ``docs.ids`` index the columns of ``phi``. Rows sum to 1; an empty document gets the prior mean."""
    indptr, local, counts = docs
    K = phi.shape[0]
    n_docs = indptr.shape[0] - 1
    theta = np.empty((n_docs, K), dtype=np.float64)
    acc = np.empty(K, dtype=np.float64)
    for d in range(n_docs):
        for k in range(K):
            theta[d, k] = 1.0 / K
        lo = indptr[d]
        hi = indptr[d + 1]
        if hi == lo:
            continue
        for _ in range(iters):
            for k in range(K):
                acc[k] = alpha
            for j in range(lo, hi):
                c = local[j]
                norm = 0.0
                for k in range(K):
                    norm += theta[d, k] * phi[k, c]
                f = counts[j] / norm
                for k in range(K):
                    acc[k] += f * theta[d, k] * phi[k, c]
            tot = 0.0
            for k in range(K):
                tot += acc[k]
            for k in range(K):
                theta[d, k] = acc[k] / tot
    return theta
