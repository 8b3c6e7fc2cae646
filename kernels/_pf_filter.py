"""Filtering and rejuvenation: the particle filter's token step over a batch (steps 1–6 of
``docs/particle-filter.md``, "One token"), the reservoir (Vitter's Algorithm R) and resampling.

The algorithm is the Rao-Blackwellized particle filter of Canini, Shi & Griffiths (2009) with the rejuvenation
sequence drawn from a reservoir, as studied in seed 003: (1) the optimal proposal q_k, (2) the incremental
weight Σ_k q_k, (3) drawing z_i, (4) ESS-triggered multinomial resampling, (5) rejuvenation from the reservoir,
(6) resetting the weights. The state is that of :mod:`kernels._pf_state`, kept by :mod:`kernels._pf_pools`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._batch import CSR
from ._pf_pools import close_slot, copy_pairs, mark_divergent_token, open_slot, own_drow, own_row
from ._pf_rng import rng_below, sample_cat, sample_cumulative
from ._pf_state import (
    COLLAPSES,
    FILL,
    LAST_ESS,
    LOG_EVIDENCE,
    N_FREE,
    REJUVENATIONS,
    RESAMPLES,
    SLOT_TOP,
    TOKENS,
    Config,
    DocRows,
    Prior,
    Reservoir,
    State,
)

__all__ = ["filter_docs", "proposal", "reservoir_position", "store_token"]


@njit(cache=True, nogil=True)
def proposal(
    rows: NDArray[np.int32],
    r: int,
    nk_p: NDArray[np.int64],
    ndk_ps: NDArray[np.int32],
    nd: float,
    prior: Prior,
    q: NDArray[np.float64],
) -> float:
    """Step 1 for one particle: q_k = (n_kw + β)/(n_k + Wβ) · (n_dk + α)/(n_d + Kα), as running sums
    ``q[k]`` = q_0 + … + q_k (step 3 draws from them by bisection, :func:`kernels._pf_rng.sample_cumulative`).

    ``r`` is the pool row of the word, ``nk_p`` the particle's n_k, ``ndk_ps`` its n_d· for the document,
    ``nd`` the document's tokens so far (token i excluded). Returns Σ_k q_k, the incremental weight of step 2.
    """
    alpha, beta, wbeta = prior
    K = q.shape[0]
    scale = 1.0 / (nd + K * alpha)
    total = 0.0
    for k in range(K):
        total += (rows[r, k] + beta) / (nk_p[k] + wbeta) * (ndk_ps[k] + alpha) * scale
        q[k] = total
    return total


@njit(cache=True, nogil=True)
def reservoir_position(i: int, fill: int, R: int, rng: NDArray[np.uint64]) -> int:
    """Vitter's Algorithm R for token number ``i`` (counted from 1): the slot it goes to, or -1.

    The first R tokens are appended; after them u is uniform on 1..i and the token takes slot u if u ≤ R, so each
    of the i tokens seen so far is in the reservoir with probability R/i. Slots that
    :func:`kernels.particle_filter.ParticleFilterLDA.reset_words` emptied (``fill`` < R after the first R tokens)
    stand for the forgotten tokens that held them: a token drawn into one of them is appended, so each remaining
    token keeps its probability R/i (appending every token while slots were free would fill the reservoir with
    the tokens that follow a reset).
    """
    if R == 0:
        return -1
    if i <= R:
        return fill
    u = rng_below(rng, i)  # 0..i-1
    if u >= R:
        return -1
    return u if u < fill else fill


@njit(cache=True, nogil=True)
def store_token(
    pos: int, w: int, s: int, zcur: NDArray[np.int64], res: Reservoir, docs: DocRows, ctr: NDArray[np.int64]
) -> None:
    """Put a token (word w of the document in slot s, z^(p) = zcur[p]) into reservoir slot ``pos``.

    An evicted token releases its document slot when no other reservoir token (and no open document) uses it.
    """
    res_z = res.res_z
    slot_refs = docs.slot_refs
    scratch = slot_refs.shape[0] - 1
    P = res_z.shape[1]
    if pos == ctr[FILL]:
        ctr[FILL] += 1
    else:
        old = res.res_slot[pos]
        slot_refs[old] -= 1
        if slot_refs[old] == 0 and old != scratch:
            docs.slot_free[ctr[SLOT_TOP]] = old
            ctr[SLOT_TOP] += 1
    res.res_w[pos] = w
    res.res_slot[pos] = s
    z0 = zcur[0]
    same = True
    for p in range(P):
        res_z[pos, p] = zcur[p]
        if zcur[p] != z0:
            same = False
    if not same:
        mark_divergent_token(res, ctr, pos)
    slot_refs[s] += 1


@njit(cache=True, nogil=True, inline="always")
def _weight_total(weights: NDArray[np.float64]) -> float:
    """Σ_p ω^(p), summed in particle order (step 4 draws particles with probability ω^(p) / Σ ω)."""
    total = 0.0
    for p in range(weights.shape[0]):
        total += weights[p]
    return total


@njit(cache=True, nogil=True)
def _resample(offspring: NDArray[np.int64], zcur: NDArray[np.int64], state: State) -> None:
    """Step 4: multinomial resampling, P draws with probability ∝ ω, then ω = 1/P (step 6).

    A particle drawn at least once stays in its own slot; only the slots of particles drawn zero times are
    overwritten with the extra copies, so a resampling copies P − (number of distinct survivors) particles.
    """
    weights = state.parts.weights
    P = weights.shape[0]
    total = _weight_total(weights)
    offspring[:] = 0
    for _ in range(P):
        offspring[sample_cat(weights, P, total, state.parts.prng)] += 1
    src = np.empty(P, dtype=np.int64)
    dst = np.empty(P, dtype=np.int64)
    n_pairs = 0
    dead = 0
    for a in range(P):
        while offspring[a] > 1:
            while offspring[dead] != 0:
                dead += 1
            src[n_pairs] = a
            dst[n_pairs] = dead
            n_pairs += 1
            zcur[dead] = zcur[a]
            offspring[dead] = -1  # filled
            offspring[a] -= 1
    copy_pairs(src, dst, n_pairs, state)
    for p in range(P):
        weights[p] = 1.0 / P


@njit(cache=True, nogil=True)
def _collapse(zcur: NDArray[np.int64], state: State) -> None:
    """Pool-full fallback: draw one particle a with probability ω_a and make every particle a copy of it.

    This is a valid (if maximally degenerate) resampling — every particle's expected number of copies is P·ω_a
    — so the filter stays consistent and its evidence estimate unbiased. Afterwards the pool holds one
    particle's rows only (≤ W), which the validated pool size always leaves room for.
    """
    parts = state.parts
    weights = parts.weights
    P = weights.shape[0]
    a = sample_cat(weights, P, _weight_total(weights), parts.prng)
    src = np.full(P - 1, a, dtype=np.int64)
    dst = np.empty(P - 1, dtype=np.int64)
    n_pairs = 0
    for b in range(P):
        if b != a:
            dst[n_pairs] = b
            n_pairs += 1
            zcur[b] = zcur[a]
    copy_pairs(src, dst, n_pairs, state)
    for p in range(P):
        weights[p] = 1.0 / P
    parts.ctr[COLLAPSES] += 1


@njit(cache=True, nogil=True)
def _rejuvenate(n_rejuv: int, prior: Prior, idx: NDArray[np.int64], q: NDArray[np.float64], state: State) -> None:
    """Step 5: draw r = ``n_rejuv`` reservoir tokens uniformly (with replacement); for every particle and every
    drawn token j, remove z_j from the counts and redraw it from P(z_j = k | rest) ∝ (n_kw¬j + β)/(n_k¬j + Wβ)·(n_dk¬j
    + α) (one collapsed Gibbs step), then add it back. Needs up to r free pool rows per particle."""
    words, docs, res, parts = state
    alpha, beta, wbeta = prior
    ctr = parts.ctr
    nk = parts.nk
    P, K = nk.shape
    fill = ctr[FILL]
    if fill == 0 or n_rejuv == 0:
        return
    for t in range(n_rejuv):
        j = rng_below(parts.prng, fill)
        idx[t] = j
        mark_divergent_token(res, ctr, j)
    for p in range(P):
        for t in range(n_rejuv):
            j = idx[t]
            k_old = res.res_z[j, p]
            r = own_row(words, ctr, p, res.res_w[j])
            rd = own_drow(docs, ctr, res.res_slot[j], p)
            words.rows[r, k_old] -= 1
            nk[p, k_old] -= 1
            docs.drows[rd, k_old] -= 1
            total = 0.0
            for k in range(K):
                total += (words.rows[r, k] + beta) / (nk[p, k] + wbeta) * (docs.drows[rd, k] + alpha)
                q[k] = total
            k_new = sample_cumulative(q, K, parts.prng)
            words.rows[r, k_new] += 1
            nk[p, k_new] += 1
            docs.drows[rd, k_new] += 1
            res.res_z[j, p] = k_new
    ctr[REJUVENATIONS] += 1


@njit(cache=True, nogil=True)
def _shuffled_tokens(batch: CSR, d: int, tok: NDArray[np.int64], rng: NDArray[np.uint64]) -> int:
    """Write document d's tokens (``counts[j]`` copies of ``ids[j]`` for its entries j; int64 counts) into
    ``tok`` in a random order (Fisher–Yates); returns their number."""
    word_ids = batch.ids
    counts = batch.counts
    lo = batch.indptr[d]
    hi = batch.indptr[d + 1]
    n = 0
    for j in range(lo, hi):
        for _ in range(counts[j]):
            tok[n] = word_ids[j]
            n += 1
    if n == 0:
        return 0
    for t in range(n - 1, 0, -1):
        u = rng_below(rng, t + 1)
        tmp = tok[t]
        tok[t] = tok[u]
        tok[u] = tmp
    return n


@njit(cache=True, nogil=True)
def filter_docs(batch: CSR, tok: NDArray[np.int64], cfg: Config, state: State, theta: NDArray[np.float64]) -> int:
    """Run the particle filter over the documents of a batch, token by token (steps 1–6 for each token).

    The tokens of a document (``batch.counts`` copies of each word, int64) are visited in a random order. After the last
    token of document d, θ_d = Σ_p ω^(p) (n_d·^(p) + α)/(n_d + Kα) is written to ``theta[d]`` (the prior mean
    for an empty document). Returns 0, or -1 if the pool ran out of rows even after a collapse (cannot happen
    with the validated pool size).
    """
    words, docs, res, parts = state
    n_rejuv = cfg.n_rejuv
    ctr = parts.ctr
    nk = parts.nk
    weights = parts.weights
    W, P = words.ptr.shape
    K = nk.shape[1]
    R = res.res_w.shape[0]
    scratch = docs.dptr.shape[0] - 1
    prior = Prior(cfg.alpha, cfg.beta, W * cfg.beta)
    kalpha = K * cfg.alpha
    q = np.empty(K, dtype=np.float64)
    zcur = np.zeros(P, dtype=np.int64)
    offspring = np.zeros(P, dtype=np.int64)
    idx = np.zeros(max(n_rejuv, 1), dtype=np.int64)
    n_docs = batch.indptr.shape[0] - 1
    for d in range(n_docs):
        n = _shuffled_tokens(batch, d, tok, parts.prng)
        if n == 0:
            for k in range(K):
                theta[d, k] = 1.0 / K
            continue
        s = open_slot(docs, ctr)
        for t in range(n):
            w = tok[t]
            if ctr[N_FREE] < P:
                _collapse(zcur, state)
                if ctr[N_FREE] < P:
                    return -1
            nd = float(docs.slot_len[s])
            total = 0.0
            for p in range(P):
                inc = proposal(words.rows, words.ptr[w, p], nk[p], docs.drows[docs.dptr[s, p]], nd, prior, q)  # step 1
                k = sample_cumulative(q, K, parts.prng)  # step 3
                zcur[p] = k
                r = own_row(words, ctr, p, w)
                words.rows[r, k] += 1
                nk[p, k] += 1
                rd = own_drow(docs, ctr, s, p)
                docs.drows[rd, k] += 1
                weights[p] *= inc  # step 2
                total += weights[p]
            docs.slot_len[s] += 1
            parts.fst[LOG_EVIDENCE] += math.log(total)
            sq = 0.0
            for p in range(P):
                weights[p] /= total
                sq += weights[p] * weights[p]
            ess = 1.0 / sq
            parts.fst[LAST_ESS] = ess
            ctr[TOKENS] += 1
            if s != scratch:
                pos = reservoir_position(ctr[TOKENS], ctr[FILL], R, parts.prng)
                if pos >= 0:
                    store_token(pos, w, s, zcur, res, docs, ctr)
            if ess < cfg.ess_threshold * P:
                _resample(offspring, zcur, state)
                ctr[RESAMPLES] += 1
                if n_rejuv > 0 and ctr[FILL] > 0:
                    if ctr[N_FREE] < n_rejuv * P:
                        _collapse(zcur, state)
                        if ctr[N_FREE] < n_rejuv * P:
                            return -1
                    _rejuvenate(n_rejuv, prior, idx, q, state)
        nd_final = float(docs.slot_len[s])
        for k in range(K):
            acc = 0.0
            for p in range(P):
                acc += weights[p] * (docs.drows[docs.dptr[s, p], k] + cfg.alpha)
            theta[d, k] = acc / (nd_final + kalpha)
        close_slot(docs, ctr, s)
    return 0
