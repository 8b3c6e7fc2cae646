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
from collections.abc import Callable, Sequence

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


def gibbs_sweeps(
    words: Sequence[int],
    docs: Sequence[int],
    z: Sequence[int],
    K: int,
    W: int,
    alpha: float,
    beta: float,
    sweeps: int,
    uniform: Callable[[], float],
) -> list[int]:
    """Collapsed Gibbs sampling by its definition: token after token, z_i is drawn from
    P(z_i = k | z_¬i, w) ∝ P(w, z with z_i = k) (ratios of :func:`log_joint`), by inversion with ``uniform()``:
    the first k whose running sum of the K probabilities exceeds u times their total. Returns the topics."""
    z = list(z)
    for _ in range(sweeps):
        for i in range(len(words)):
            logs = [log_joint(words, docs, [*z[:i], k, *z[i + 1 :]], K, W, alpha, beta) for k in range(K)]
            top = max(logs)
            probs = [math.exp(v - top) for v in logs]
            u = uniform() * sum(probs)
            acc = 0.0
            z[i] = K - 1
            for k, p in enumerate(probs):
                acc += p
                if u < acc:
                    z[i] = k
                    break
    return z


def reservoir_inclusion(n: int, R: int, runs: int, seed: int, recency: float = 1.0) -> np.ndarray:
    """How often each of n stream items ends in an Algorithm-R reservoir of size R, over ``runs`` runs (numpy
    Generator draws; a second, independent implementation to compare distributions with).

    ``recency`` > 1 gives a *wrong* reservoir that admits item i with probability recency·R/(i+1) instead of
    R/(i+1), favouring recent items: the sampler a test of Algorithm R must be able to reject."""
    rng = np.random.default_rng(seed)
    hits = np.zeros(n, dtype=np.int64)
    for _ in range(runs):
        res = list(range(min(R, n)))
        for i in range(R, n):
            if rng.random() < min(1.0, recency * R / (i + 1)):
                res[int(rng.integers(0, R))] = i
        hits[res] += 1
    return hits


class DenseFilter:
    """The particle filter with plain dense per-particle counts (no shared rows, no slots, no divergent lists):
    n_kw^(p) as a P×K×W array, n_dk^(p) per document id, the reservoir as a list, every particle copied whole
    on resampling. It draws from the same xoshiro256** stream (``kernels._pf_rng``, started from ``prng``) in
    the same order as the kernel (``docs/particle-filter.md``, steps 1–6), so with no collapse and no
    initialisation its mixtures and counts must equal the kernel's exactly. The generator and its samplers are
    checked on their own in ``tests/test_pf_rng.py`` (the reference C code's outputs, chi-square).
    """

    def __init__(
        self, K: int, W: int, P: int, alpha: float, beta: float, ess_threshold: float, n_rejuv: int, R: int, prng
    ) -> None:
        self.K, self.W, self.P, self.R = K, W, P, R
        self.alpha, self.beta, self.ess_threshold, self.n_rejuv = alpha, beta, ess_threshold, n_rejuv
        self.rng = np.array(prng, dtype=np.uint64)
        self.nkw = np.zeros((P, K, W), dtype=np.int64)
        self.nk = np.zeros((P, K), dtype=np.int64)
        self.ndk: dict[int, np.ndarray] = {}  # document id -> P×K
        self.reservoir: list[tuple[int, int, np.ndarray]] = []  # (word, document id, z per particle)
        self.weights = np.full(P, 1.0 / P)
        self.tokens = 0
        self.docs = 0

    def _draw(self, q: np.ndarray, total: float) -> int:
        from kernels._pf_rng import sample_cat

        return int(sample_cat(q, q.shape[0], total, self.rng))

    def _below(self, n: int) -> int:
        from kernels._pf_rng import rng_below

        return int(rng_below(self.rng, n))

    def fit_document(self, word_ids: Sequence[int], counts: Sequence[int]) -> np.ndarray:
        """Filter one document; returns its mixture θ_d."""
        K, W, P, alpha, beta = self.K, self.W, self.P, self.alpha, self.beta
        d = self.docs
        self.docs += 1
        toks = [w for w, c in zip(word_ids, counts, strict=True) for _ in range(c)]
        if not toks:
            return np.full(K, 1.0 / K)
        for t in range(len(toks) - 1, 0, -1):  # the same Fisher–Yates draws as the kernel
            u = self._below(t + 1)
            toks[t], toks[u] = toks[u], toks[t]
        ndk = self.ndk[d] = np.zeros((P, K), dtype=np.int64)
        for nd, w in enumerate(toks):
            zcur = np.zeros(P, dtype=np.int64)
            total = 0.0
            for p in range(P):
                q = np.array(
                    [
                        (self.nkw[p, kk, w] + beta)
                        / (self.nk[p, kk] + W * beta)
                        * (ndk[p, kk] + alpha)
                        / (nd + K * alpha)
                        for kk in range(K)
                    ]
                )
                inc = 0.0
                for v in q:
                    inc += v
                k = self._draw(q, inc)
                zcur[p] = k
                self.nkw[p, k, w] += 1
                self.nk[p, k] += 1
                ndk[p, k] += 1
                self.weights[p] *= inc
                total += self.weights[p]
            sq = 0.0
            for p in range(P):
                self.weights[p] /= total
                sq += self.weights[p] * self.weights[p]
            self.tokens += 1
            self._reservoir_add(w, d, zcur)
            if 1.0 / sq < self.ess_threshold * P:
                self._resample()
                self._rejuvenate()
        theta = np.empty(K)
        for k in range(K):
            acc = 0.0
            for p in range(P):
                acc += self.weights[p] * (ndk[p, k] + alpha)
            theta[k] = acc / (len(toks) + K * alpha)
        return theta

    def _reservoir_add(self, w: int, d: int, z: np.ndarray) -> None:
        """Algorithm R: append while there is room, else overwrite a uniform slot among the first R of i."""
        if self.R == 0:
            return
        if len(self.reservoir) < self.R:
            self.reservoir.append((w, d, z.copy()))
            return
        u = self._below(self.tokens)
        if u < self.R:
            self.reservoir[u] = (w, d, z.copy())

    def _resample(self) -> None:
        """Multinomial resampling; a particle drawn n ≥ 1 times keeps its place and its extra copies go to the
        places of particles drawn zero times, in order."""
        P = self.P
        total = 0.0
        for p in range(P):
            total += self.weights[p]
        offspring = [0] * P
        for _ in range(P):
            offspring[self._draw(self.weights, total)] += 1
        dead = 0
        for a in range(P):
            while offspring[a] > 1:
                while offspring[dead] != 0:
                    dead += 1
                self.nkw[dead] = self.nkw[a]
                self.nk[dead] = self.nk[a]
                for counts in self.ndk.values():
                    counts[dead] = counts[a]
                for _, _, z in self.reservoir:
                    z[dead] = z[a]
                offspring[dead] = -1
                offspring[a] -= 1
        self.weights[:] = 1.0 / P

    def _rejuvenate(self) -> None:
        """r tokens drawn uniformly from the reservoir; one collapsed Gibbs step each, in every particle."""
        if not self.reservoir or self.n_rejuv == 0:
            return
        K, W, alpha, beta = self.K, self.W, self.alpha, self.beta
        picks = [self._below(len(self.reservoir)) for _ in range(self.n_rejuv)]
        for p in range(self.P):
            for j in picks:
                w, d, z = self.reservoir[j]
                ndk = self.ndk[d]
                k = z[p]
                self.nkw[p, k, w] -= 1
                self.nk[p, k] -= 1
                ndk[p, k] -= 1
                q = np.array(
                    [
                        (self.nkw[p, kk, w] + beta) / (self.nk[p, kk] + W * beta) * (ndk[p, kk] + alpha)
                        for kk in range(K)
                    ]
                )
                tot = 0.0
                for v in q:
                    tot += v
                k = self._draw(q, tot)
                self.nkw[p, k, w] += 1
                self.nk[p, k] += 1
                ndk[p, k] += 1
                z[p] = k
