"""Summaries of a topic-word matrix φ (K×W, rows sum to 1) that the service computes at every snapshot.

Each is one pass over φ in numba without the GIL and without K×W temporaries: the snapshot writer runs them on
its own thread while the batch loop goes on, and at K = 100, W = 65,536 numpy's version of the same work
(argpartition per row; square roots, difference and product of two K×W matrices) took ~0.2 s of a core and
allocated ~100 MB per snapshot. :func:`hellinger` is the distance between two single distributions (topic
hygiene's merge and split scores), in NumPy.

>>> import numpy as np
>>> phi = np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]])
>>> top_words(phi, 2)
array([[1, 2],
       [0, 1]])
>>> hellinger_rows(phi, phi[::-1]).round(3)
array([0.339, 0.339])
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import NDArray

__all__ = ["hellinger", "hellinger_rows", "top_words"]


@numba.njit(cache=True, nogil=True)
def _top_words(phi: NDArray[np.floating], n: int) -> NDArray[np.int64]:  # pragma: no cover (compiled)
    k_topics, n_words = phi.shape
    out = np.empty((k_topics, n), dtype=np.int64)
    vals = np.empty(n, dtype=np.float64)
    for k in range(k_topics):
        # Insertion into a sorted list of the n best so far: O(W) for a row, as n is small (~10).
        filled = 0
        for w in range(n_words):
            v = phi[k, w]
            if filled == n and not v > vals[n - 1]:
                continue
            j = filled if filled < n else n - 1
            while j > 0 and v > vals[j - 1]:  # ties: the lower word id stays first
                vals[j] = vals[j - 1]
                out[k, j] = out[k, j - 1]
                j -= 1
            vals[j] = v
            out[k, j] = w
            if filled < n:
                filled += 1
    return out


@numba.njit(cache=True, nogil=True)
def _hellinger_rows(p: NDArray[np.floating], q: NDArray[np.floating]) -> NDArray[np.float64]:  # pragma: no cover
    k_topics, n_words = p.shape
    out = np.empty(k_topics, dtype=np.float64)
    for k in range(k_topics):
        s = 0.0
        for w in range(n_words):
            d = np.sqrt(np.float64(p[k, w])) - np.sqrt(np.float64(q[k, w]))
            s += d * d
        out[k] = np.sqrt(0.5 * s)
    return out


def top_words(phi: NDArray[np.floating], n: int) -> NDArray[np.int64]:
    """The ids of each row's ``min(n, W)`` largest entries, largest first (ties: lower id first)."""
    phi = np.ascontiguousarray(phi)
    if phi.ndim != 2:
        raise ValueError(f"phi must be a K×W matrix, got shape {phi.shape}")
    return _top_words(phi, max(0, min(int(n), phi.shape[1])))


def hellinger_rows(p: NDArray[np.floating], q: NDArray[np.floating]) -> NDArray[np.float64]:
    """Hellinger distance between matching rows of two row-stochastic matrices of the same shape,
    H(p, q) = sqrt(½ Σ_w (√p_w − √q_w)²), in [0, 1]."""
    p, q = np.ascontiguousarray(p), np.ascontiguousarray(q)
    if p.shape != q.shape or p.ndim != 2:
        raise ValueError(f"need two 2-d matrices of the same shape, got shapes {p.shape} and {q.shape}")
    return _hellinger_rows(p, q)


def hellinger(p: NDArray[np.floating], q: NDArray[np.floating]) -> float:
    """Hellinger distance between two distributions over the same words, H(p, q) = sqrt(1 − Σ_w sqrt(p_w q_w)),
    in [0, 1]: the score of topic hygiene's merge and split events, and what a replayed merge is checked against."""
    return float(np.sqrt(max(0.0, 1.0 - float(np.sqrt(p * q).sum()))))
