"""Random numbers of the particle filter: a xoshiro256** generator whose state is a 4-word array.

The state array lives in the model's state (seeded from the model's ``rng_``), so every draw of the filter is
reproducible and a restored model continues bit-identically. Used by every other ``kernels._pf_*`` module;
:func:`sample_cat` is step 3 of ``docs/particle-filter.md`` (drawing z_i from the proposal).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["rng_below", "rng_next", "rng_uniform", "sample_cat", "sample_cumulative"]

_M5 = np.uint64(5)
_M9 = np.uint64(9)
_S17 = np.uint64(17)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0


@njit(cache=True, nogil=True)
def _rotl(x: np.uint64, k: int) -> np.uint64:
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True, nogil=True)
def rng_next(s: NDArray[np.uint64]) -> np.uint64:
    """xoshiro256** (Blackman & Vigna): the next 64-bit output; advances ``s`` in place."""
    s0 = s[0]
    s1 = s[1]
    s2 = s[2]
    s3 = s[3]
    result = _rotl(s1 * _M5, 7) * _M9
    t = s1 << _S17
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    s[0] = s0
    s[1] = s1
    s[2] = s2
    s[3] = s3
    return result


@njit(cache=True, nogil=True)
def rng_uniform(s: NDArray[np.uint64]) -> float:
    """Uniform double in [0, 1) from the top 53 bits."""
    return float(rng_next(s) >> _S11) * _INV53


@njit(cache=True, nogil=True)
def rng_below(s: NDArray[np.uint64], n: int) -> int:
    """Uniform integer in [0, n) (n ≥ 1)."""
    j = int(rng_uniform(s) * n)
    return j if j < n else n - 1


@njit(cache=True, nogil=True)
def sample_cat(q: NDArray[np.float64], K: int, total: float, s: NDArray[np.uint64]) -> int:
    """Draw k with probability q_k / total (step 3)."""
    u = rng_uniform(s) * total
    acc = 0.0
    for k in range(K):
        acc += q[k]
        if u < acc:
            return k
    # Rounding: fall back to the last topic with positive mass.
    for k in range(K - 1, -1, -1):
        if q[k] > 0.0:
            return k
    return K - 1


@njit(cache=True, nogil=True)
def sample_cumulative(cum: NDArray[np.float64], K: int, s: NDArray[np.uint64]) -> int:
    """Draw k with probability (cum_k − cum_{k−1}) / cum_{K−1}, given the running sums ``cum`` of K masses, by
    bisection: the first k with u·cum_{K−1} < cum_k (the topic :func:`sample_cat` draws from the same u)."""
    u = rng_uniform(s) * cum[K - 1]
    lo, hi = 0, K - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if u < cum[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo
