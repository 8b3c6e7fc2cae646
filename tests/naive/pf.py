"""Naive references for the reservoir particle filter (``kernels.particle_filter``): brute force, pure Python.

The collapsed LDA joint (Griffiths & Steyvers 2004), with θ and φ integrated out:

    P(w, z) = Π_d Γ(Kα)/Γ(n_d + Kα) Π_k Γ(n_dk + α)/Γ(α) · Π_k Γ(Wβ)/Γ(n_k + Wβ) Π_w Γ(n_kw + β)/Γ(β).

From it: the exact marginal P(w_1..w_n) = Σ_z P(w, z) by enumerating all K^n assignments, and the particle
filter's optimal proposal P(z_i = k | z_<i, w_≤i) and incremental weight P(w_i | z_<i, w_<i) as ratios of
joints (steps 1–2 of ``docs/particle-filter.md``), without any of the kernel's count bookkeeping.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np


def log_joint(
    words: Sequence[int], docs: Sequence[int], z: Sequence[int], K: int, W: int, alpha: float, beta: float
) -> float:
    """log P(w, z) of the collapsed LDA model for tokens ``words`` in documents ``docs`` with topics ``z``."""
    ndk: dict[tuple[int, int], int] = {}
    nd: dict[int, int] = {}
    nkw: dict[tuple[int, int], int] = {}
    nk = [0] * K
    for w, d, k in zip(words, docs, z, strict=True):
        ndk[d, k] = ndk.get((d, k), 0) + 1
        nd[d] = nd.get(d, 0) + 1
        nkw[k, w] = nkw.get((k, w), 0) + 1
        nk[k] += 1
    lg = math.lgamma
    out = 0.0
    for d, n in nd.items():
        out += lg(K * alpha) - lg(n + K * alpha)
        for k in range(K):
            out += lg(ndk.get((d, k), 0) + alpha) - lg(alpha)
    for k in range(K):
        out += lg(W * beta) - lg(nk[k] + W * beta)
        for w in range(W):
            out += lg(nkw.get((k, w), 0) + beta) - lg(beta)
    return out


def exact_log_marginal(words: Sequence[int], docs: Sequence[int], K: int, W: int, alpha: float, beta: float) -> float:
    """log P(w_1..w_n) = log Σ_z P(w, z) over all K^n topic assignments."""
    terms = [log_joint(words, docs, z, K, W, alpha, beta) for z in itertools.product(range(K), repeat=len(words))]
    m = max(terms)
    return m + math.log(sum(math.exp(t - m) for t in terms))


def proposal(
    words: Sequence[int],
    docs: Sequence[int],
    z: Sequence[int],
    w_new: int,
    d_new: int,
    K: int,
    W: int,
    alpha: float,
    beta: float,
) -> tuple[np.ndarray, float]:
    """(P(z_new = k | z, w, w_new), P(w_new | z, w)) by ratios of full joints."""
    base = log_joint(words, docs, z, K, W, alpha, beta)
    joint = np.array(
        [math.exp(log_joint([*words, w_new], [*docs, d_new], [*z, k], K, W, alpha, beta) - base) for k in range(K)]
    )
    return joint / joint.sum(), float(joint.sum())


def reservoir_inclusion(n: int, R: int, runs: int, seed: int) -> np.ndarray:
    """How often each of n stream items ends in an Algorithm-R reservoir of size R, over ``runs`` runs (numpy
    Generator draws; a second, independent implementation to compare distributions with)."""
    rng = np.random.default_rng(seed)
    hits = np.zeros(n, dtype=np.int64)
    for _ in range(runs):
        res = list(range(min(R, n)))
        for i in range(R, n):
            u = int(rng.integers(0, i + 1))
            if u < R:
                res[u] = i
        hits[res] += 1
    return hits
