"""Online HDP topic model: streaming, one pass, constant memory, stable topic ids.

Two inference schemes share one state layout and one class, :class:`OnlineHDP`:

``inference="stick"`` — the seed's algorithm as written (Wang, Paisley & Blei, AISTATS 2011,
``shared/seeds/004_*``): Sethuraman's stick-breaking construction, document-level coordinate ascent over
(a, b, φ, ζ) (Eqs. 15–18) until the document's variational objective converges, then a natural-gradient step
on the corpus-level parameters (λ, u, v) from a minibatch (Eqs. 22–27, with the D/S scaling). Measured in one
pass it collapses onto a handful of generic topics (``docs/ohdp.md``).

``inference="collapsed"`` (default) — a collapsed, zero-order (CVB0) treatment of the HDP after Sato,
Kurihara & Nakagawa, "Practical collapsed variational Bayes inference for hierarchical Dirichlet process"
(KDD 2012), run stochastically like SCVB0 (``shared/seeds/000_*``). The topics are collapsed: a document's
word–topic responsibilities are γ_wk ∝ φ̂_kw (N_jk^{¬w} + α0 β_k) with φ̂_kw = (N_wk + η)/(N_k + Wη) held
fixed during the document; the corpus stick β is the posterior mean of the top-level stick given the expected
number of "tables" per topic (E[m_jk], Sato et al.), with the sticks ordered by size (the size-biased order of
the GEM prior). New topics are *born* from the remaining stick: an empty topic explains every word with
φ̂ = 1/W, so a document whose words the existing topics explain badly opens one. Inside a minibatch, documents
see the raw counts and tables of the documents processed before them (as the sequential first sweep of a
collapsed sampler does), so topics are born at the data's own scale rather than all at once.

State layout (both schemes): the W×K word–topic statistics G are stored as ``scale_ · topic_stat_`` so that
the step G := (1−ρ)G + ρĜ touches only the rows of the minibatch's words (``architecture.md``, "Hints that
matter for speed"). For ``stick``, λ = η + G (Eq. 22); for ``collapsed``, N^Φ = G. Topic ids are the column
indices of G and never move: whatever ordering the stick prior needs is computed on the fly as a permutation.

Streaming meaning of D: D is the ``window`` setting, the number of documents the statistics stand for (the
seed uses the corpus size). With ρ_t = max(ρ_min, (τ0 + t)^−κ) the statistics eventually become an exponential
moving average over about S/ρ_min documents; the defaults make the two agree (256 / 0.01 ≈ 25,000).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, NDArray

from ._base import StateValue, TopicModel, check_interval, check_positive_int
from ._batch import Batch
from ._moves import birth_column, birth_counts, delete_column, merge_columns
from ._schedule import StepSize
from ._special import digamma, lgamma

__all__ = ["OnlineHDP"]

_INFERENCE = ("collapsed", "stick")
# G = s·M; when s falls below this, M is multiplied by s and s reset to 1 (an O(W·K) pass, rare).
_RENORM_BELOW = 1e-30


# ================================================================================ stick-breaking helpers
@njit(cache=True, nogil=True)
def _expect_log_sticks(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """E_q[log π_t] for a truncated stick with Beta(a_t, b_t) breaks, t < n, and the last break fixed at 1.

    E[log π_t] = ψ(a_t) − ψ(a_t + b_t) + Σ_{s<t} (ψ(b_s) − ψ(a_s + b_s))   (the expectations below Eq. 21);
    the same function gives E[log β_k] from (u, v). Returns n = len(a) + 1 values.
    """
    n1 = a.shape[0]
    out = np.empty(n1 + 1)
    acc = 0.0
    for t in range(n1):
        dab = digamma(a[t] + b[t])
        out[t] = digamma(a[t]) - dab + acc
        acc += digamma(b[t]) - dab
    out[n1] = acc
    return out


@njit(cache=True, nogil=True)
def _stick_means(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """E_q[π_t] = E[π'_t] Π_{s<t} (1 − E[π'_s]), E[π'_t] = a_t/(a_t + b_t); the last weight takes the rest."""
    n1 = a.shape[0]
    out = np.empty(n1 + 1)
    rest = 1.0
    for t in range(n1):
        m = a[t] / (a[t] + b[t])
        out[t] = rest * m
        rest *= 1.0 - m
    out[n1] = rest
    return out


@njit(cache=True, nogil=True)
def _beta_from_tables(m: NDArray[np.float64], rank: NDArray[np.int64], gamma: float) -> NDArray[np.float64]:
    """E[β] given expected table counts m_k: sticks taken in decreasing m_k, ties (empty topics) in the order
    ``rank`` (a permutation of the ids drawn at start: which free id the next new topic takes),
    β'_(i) = (1 + m_(i)) / (1 + γ + m_(i) + Σ_{l>i} m_(l)) (the posterior mean of Beta(1 + m_(i), γ + Σ_{l>i}
    m_(l)): Eqs. 19–20 with tables counted instead of document atoms; Sato et al. 2012), last break 1."""
    K = m.shape[0]
    by_rank = np.empty(K, dtype=np.int64)
    for k in range(K):
        by_rank[rank[k]] = k
    neg = np.empty(K)
    for i in range(K):
        neg[i] = -m[by_rank[i]]
    order = by_rank[np.argsort(neg, kind="mergesort")]
    beta = np.empty(K)
    tail = 0.0
    for i in range(K):
        tail += m[order[i]]
    rest = 1.0
    for i in range(K):
        mk = m[order[i]]
        tail -= mk
        br = 1.0 if i == K - 1 else (1.0 + mk) / (1.0 + gamma + mk + max(tail, 0.0))
        beta[order[i]] = rest * br
        rest *= 1.0 - br
    return beta


# ================================================================================ seed-004 document level
@njit(cache=True, nogil=True)
def _stick_doc(
    cnts: NDArray[np.float64],
    elog: NDArray[np.float64],
    elogbeta: NDArray[np.float64],
    alpha: float,
    tol: float,
    max_iter: int,
    zeta: NDArray[np.float64],
    phi: NDArray[np.float64],
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    trace: NDArray[np.float64],
) -> int:
    """Document-level coordinate ascent of the seed, Eqs. 15–18, for one document (clumped: one ζ row per
    distinct word, weighted by its count, which is exact because equal tokens get equal ζ).

    ``elog[n, k]`` = E_q[log p(w_n | φ_k)] = ψ(λ_kw) − ψ(Σ_w λ_kw); ``elogbeta`` = E_q[log β_k].
    Start: ζ uniform, (a, b) = (1, α0) (the prior). Each iteration, in this order:

    * Eq. 17: φ_tk ∝ exp(Σ_n c_n ζ_nt E[log p(w_n|φ_k)] + E[log β_k]);
    * Eq. 18: ζ_nt ∝ exp(Σ_k φ_tk E[log p(w_n|φ_k)] + E[log π_t]);
    * Eqs. 15–16: a_t = 1 + Σ_n c_n ζ_nt, b_t = α0 + Σ_n c_n Σ_{s>t} ζ_ns (t < T);

    then the document's objective L_j (Eq. 14 without the corpus terms) is evaluated; the loop stops when its
    relative change is below ``tol`` or after ``max_iter`` iterations. Every step maximises L_j exactly in its
    block, so L_j never decreases. ``trace[i]`` receives L_j after iteration i (if long enough). Outputs
    ζ (U×T), φ (T×K), a, b (T−1) in place; returns the number of iterations.
    """
    U = elog.shape[0]
    K = elog.shape[1]
    T = zeta.shape[1]
    for n in range(U):
        for t in range(T):
            zeta[n, t] = 1.0 / T
    for t in range(T - 1):
        a[t] = 1.0
        b[t] = alpha
    elogpi = _expect_log_sticks(a, b)
    B = np.empty((U, T))
    row = np.empty(max(K, T))
    log_alpha = np.log(alpha)
    old = -np.inf
    it = 0
    while it < max_iter:
        # Eq. 17
        l_c = 0.0
        for t in range(T):
            mx = -np.inf
            for k in range(K):
                s = elogbeta[k]
                for n in range(U):
                    s += cnts[n] * zeta[n, t] * elog[n, k]
                row[k] = s
                if s > mx:
                    mx = s
            tot = 0.0
            for k in range(K):
                e = np.exp(row[k] - mx)
                phi[t, k] = e
                tot += e
            lz = mx + np.log(tot)
            for k in range(K):
                phi[t, k] /= tot
            # E[log p(c_t|β)] + H(q(c_t)) = Σ_k φ_tk (E log β_k − log φ_tk)
            #                            = lz − Σ_k φ_tk (row_k − E log β_k)
            acc = 0.0
            for k in range(K):
                acc += phi[t, k] * (row[k] - elogbeta[k])
            l_c += lz - acc
        # Eq. 18 (B_nt = Σ_k φ_tk E[log p(w_n|φ_k)])
        for n in range(U):
            for t in range(T):
                s = 0.0
                for k in range(K):
                    s += phi[t, k] * elog[n, k]
                B[n, t] = s
        l_wz = 0.0
        for n in range(U):
            mx = -np.inf
            for t in range(T):
                s = B[n, t] + elogpi[t]
                row[t] = s
                if s > mx:
                    mx = s
            tot = 0.0
            for t in range(T):
                e = np.exp(row[t] - mx)
                zeta[n, t] = e
                tot += e
            for t in range(T):
                zeta[n, t] /= tot
            # Σ_t ζ (B + E log π − log ζ) = log Σ_t exp(B + E log π) at the optimum
            l_wz += cnts[n] * (mx + np.log(tot))
        # Eqs. 15–16
        for t in range(T - 1):
            a[t] = 1.0
            b[t] = alpha
        for n in range(U):
            tail = 0.0
            for t in range(T - 1, -1, -1):
                if t < T - 1:
                    a[t] += cnts[n] * zeta[n, t]
                    b[t] += cnts[n] * tail
                tail += zeta[n, t]
        new_elogpi = _expect_log_sticks(a, b)
        # objective: l_wz used the previous E log π; correct it to the new one (ζ fixed)
        for n in range(U):
            for t in range(T):
                l_wz += cnts[n] * zeta[n, t] * (new_elogpi[t] - elogpi[t])
        elogpi = new_elogpi
        l_pi = 0.0
        for t in range(T - 1):
            dab = digamma(a[t] + b[t])
            e1 = digamma(a[t]) - dab
            e0 = digamma(b[t]) - dab
            l_pi += log_alpha + (alpha - 1.0) * e0
            l_pi -= lgamma(a[t] + b[t]) - lgamma(a[t]) - lgamma(b[t]) + (a[t] - 1.0) * e1 + (b[t] - 1.0) * e0
        elbo = l_c + l_wz + l_pi
        if it < trace.shape[0]:
            trace[it] = elbo
        it += 1
        if old > -np.inf and abs(elbo - old) <= tol * abs(old):
            break
        old = elbo
    return it


@njit(cache=True, nogil=True)
def _stick_batch(
    indptr: NDArray[np.int64],
    slots: NDArray[np.int64],
    counts: NDArray[np.float64],
    elog_local: NDArray[np.float64],
    elogbeta: NDArray[np.float64],
    T: int,
    alpha: float,
    tol: float,
    max_iter: int,
    stat: NDArray[np.float64],
    stat_c: NDArray[np.float64],
    theta: NDArray[np.float64],
) -> int:
    """Eqs. 15–18 for each document of a minibatch, accumulating the sufficient statistics of Eqs. 22–24.

    ``slots`` maps each entry to its row of ``elog_local`` / ``stat`` (the minibatch's distinct words).
    ``stat[u, k] += Σ_t φ_tk ζ_nt c_n`` (Eq. 22) and ``stat_c[k] += Σ_t φ_tk`` (Eqs. 23–24; the tail sums of
    Eq. 24 are taken later). ``theta[d, k] = Σ_t E[π_t] φ_tk`` (the document's mixture over corpus topics);
    an empty document gets φ ∝ exp(E log β). Returns the total number of coordinate-ascent iterations.
    """
    K = elog_local.shape[1]
    n_docs = indptr.shape[0] - 1
    phi = np.empty((T, K))
    a = np.empty(T - 1)
    b = np.empty(T - 1)
    trace = np.empty(0)
    total_it = 0
    for d in range(n_docs):
        lo = indptr[d]
        hi = indptr[d + 1]
        U = hi - lo
        if U == 0:
            mx = elogbeta.max()
            tot = 0.0
            for k in range(K):
                theta[d, k] = np.exp(elogbeta[k] - mx)
                tot += theta[d, k]
            for k in range(K):
                theta[d, k] /= tot
            continue
        elog = np.empty((U, K))
        for n in range(U):
            elog[n, :] = elog_local[slots[lo + n]]
        zeta = np.empty((U, T))
        cnts = counts[lo:hi]
        total_it += _stick_doc(cnts, elog, elogbeta, alpha, tol, max_iter, zeta, phi, a, b, trace)
        for n in range(U):
            u = slots[lo + n]
            for k in range(K):
                s = 0.0
                for t in range(T):
                    s += phi[t, k] * zeta[n, t]
                stat[u, k] += cnts[n] * s
        for t in range(T):
            for k in range(K):
                stat_c[k] += phi[t, k]
        pi = _stick_means(a, b)
        for k in range(K):
            s = 0.0
            for t in range(T):
                s += pi[t] * phi[t, k]
            theta[d, k] = s
    return total_it


@njit(cache=True, nogil=True)
def _elog_rows(
    M: NDArray[np.float64], rows: NDArray[np.int64], scale: float, msum: NDArray[np.float64], eta: float
) -> NDArray[np.float64]:
    """E_q[log φ_kw] = ψ(λ_kw) − ψ(Σ_w λ_kw) for the given words, with λ = η + s·M (below Eq. 21)."""
    K = M.shape[1]
    W = M.shape[0]
    out = np.empty((rows.shape[0], K))
    dtot = np.empty(K)
    for k in range(K):
        dtot[k] = digamma(W * eta + scale * msum[k])
    for i in range(rows.shape[0]):
        r = M[rows[i]]
        for k in range(K):
            out[i, k] = digamma(eta + scale * r[k]) - dtot[k]
    return out


# ================================================================================ collapsed (CVB0) HDP
@njit(cache=True, nogil=True, fastmath=True)
def _cvb_doc(
    cnts: NDArray[np.float64],
    phat: NDArray[np.float64],
    prior: NDArray[np.float64],
    tol: float,
    max_iter: int,
    gam: NDArray[np.float64],
    nj: NDArray[np.float64],
) -> int:
    """Zero-order collapsed update of one document with the topics fixed (Sato et al. 2012; SCVB0 Eq. 5):

    γ_nk ∝ φ̂_kn (N_jk^{¬n} + α0 β_k),   N_jk = Σ_n c_n γ_nk,

    swept over the distinct words (Gauss–Seidel), where N^{¬n} takes one token of word n out. Starts from
    γ_n ∝ φ̂_n α0β; stops when Σ_n c_n |Δγ_n|₁ ≤ tol · N_j or after ``max_iter`` sweeps.
    ``phat[n, k]`` = φ̂_kw_n.
    Writes γ (U×K) and N_j (K); returns the number of sweeps.
    """
    U = phat.shape[0]
    K = phat.shape[1]
    nj[:] = 0.0
    ntot = 0.0
    for n in range(U):
        tot = 0.0
        for k in range(K):
            g = phat[n, k] * prior[k]
            gam[n, k] = g
            tot += g
        c = cnts[n]
        ntot += c
        for k in range(K):
            gam[n, k] /= tot
            nj[k] += c * gam[n, k]
    g = np.empty(K)
    it = 0
    while it < max_iter:
        it += 1
        delta = 0.0
        for n in range(U):
            c = cnts[n]
            own = min(c, 1.0)
            tot = 0.0
            for k in range(K):
                v = nj[k] - own * gam[n, k]
                if v < 0.0:
                    v = 0.0
                x = phat[n, k] * (v + prior[k])
                g[k] = x
                tot += x
            for k in range(K):
                x = g[k] / tot
                dx = x - gam[n, k]
                delta += c * abs(dx)
                nj[k] += c * dx
                gam[n, k] = x
        if delta <= tol * ntot:
            break
    return it


@njit(cache=True, nogil=True, fastmath=True)
def _cvb_batch(
    indptr: NDArray[np.int64],
    slots: NDArray[np.int64],
    counts: NDArray[np.float64],
    base: NDArray[np.float64],
    base_tot: NDArray[np.float64],
    eta: float,
    n_words: int,
    base_tables: NDArray[np.float64],
    rank: NDArray[np.int64],
    alpha: float,
    gamma: float,
    tol: float,
    max_iter: int,
    sequential: bool,
    stat: NDArray[np.float64],
    tables: NDArray[np.float64],
    theta: NDArray[np.float64],
) -> int:
    """The collapsed document step for a minibatch, accumulating Ĝ (``stat``, raw c·γ per distinct word) and
    the expected tables Σ_j E[m_jk] = Σ_j α0β_k (ψ(α0β_k + N_jk) − ψ(α0β_k)) (Antoniak; Sato et al. 2012).

    φ̂_kw = (base_wk + η)/(base_tot_k + Wη), ``base`` holding the current N^Φ rows of the minibatch's words;
    if ``sequential``, the raw statistics of the minibatch's earlier documents are added to N^Φ for the later
    ones (``stat`` doubles as that running count). ``theta[d]`` = normalised N_j + α0β. Returns total sweeps.
    """
    K = base.shape[1]
    n_docs = indptr.shape[0] - 1
    Weta = n_words * eta
    inv = np.empty(K)
    run_tot = np.zeros(K)
    nj = np.empty(K)
    logp0 = np.empty(K)
    prior = np.empty(K)
    dig_prior = np.empty(K)
    cur = base_tables.copy()
    ptot = 0.0
    total_it = 0
    for d in range(n_docs):
        if d == 0 or sequential:
            beta = _beta_from_tables(cur, rank, gamma)
            ptot = 0.0
            for k in range(K):
                prior[k] = max(alpha * beta[k], 1e-100)
                ptot += prior[k]
                dig_prior[k] = digamma(prior[k])
        lo = indptr[d]
        hi = indptr[d + 1]
        U = hi - lo
        if U == 0:
            for k in range(K):
                theta[d, k] = prior[k] / ptot
            continue
        for k in range(K):
            inv[k] = 1.0 / (base_tot[k] + run_tot[k] + Weta) if sequential else 1.0 / (base_tot[k] + Weta)
        phat = np.empty((U, K))
        for n in range(U):
            u = slots[lo + n]
            if sequential:
                for k in range(K):
                    phat[n, k] = (base[u, k] + stat[u, k] + eta) * inv[k]
            else:
                for k in range(K):
                    phat[n, k] = (base[u, k] + eta) * inv[k]
        gam = np.empty((U, K))
        cnts = counts[lo:hi]
        total_it += _cvb_doc(cnts, phat, prior, tol, max_iter, gam, nj)
        for n in range(U):
            u = slots[lo + n]
            c = cnts[n]
            for k in range(K):
                x = c * gam[n, k]
                stat[u, k] += x
                run_tot[k] += x
        # Expected tables, Sato et al. (2012): E[m_jk] ≈ P(n_jk > 0) · α0β_k (ψ(α0β_k + E[n_jk | n_jk > 0])
        # − ψ(α0β_k)), with P(n_jk = 0) = Π_n (1 − γ_nk)^{c_n}. (Plugging E[n_jk] straight into the Antoniak
        # mean counts a whole table for any sliver of mass, which flattens β over the whole truncation.)
        for k in range(K):
            logp0[k] = 0.0
        for n in range(U):
            c = cnts[n]
            for k in range(K):
                x = gam[n, k]
                if x > 1.0 - 1e-12:
                    x = 1.0 - 1e-12
                logp0[k] += c * np.log1p(-x)
        tot = 0.0
        for k in range(K):
            tot += nj[k] + prior[k]
            pk = -np.expm1(logp0[k])
            if pk > 1e-300 and nj[k] > 0.0:
                x = pk * prior[k] * (digamma(prior[k] + nj[k] / pk) - dig_prior[k])
                tables[k] += x
                cur[k] += x
        for k in range(K):
            theta[d, k] = (nj[k] + prior[k]) / tot
    return total_it


# ================================================================================ shared update
@njit(cache=True, nogil=True)
def _sparse_step(
    M: NDArray[np.float64],
    msum: NDArray[np.float64],
    rows: NDArray[np.int64],
    stat: NDArray[np.float64],
    scale: float,
    rho: float,
    mult: float,
) -> float:
    """G := (1−ρ)G + ρ·mult·Ĝ on G = s·M, touching only ``rows`` (Eq. 25 / SCVB0 Eq. 7). Returns the new s."""
    K = M.shape[1]
    s = scale * (1.0 - rho)
    if s <= 0.0:
        M[:, :] = 0.0
        msum[:] = 0.0
        s = 1.0
        coef = mult
    else:
        coef = rho * mult / s
    for i in range(rows.shape[0]):
        r = M[rows[i]]
        for k in range(K):
            x = coef * stat[i, k]
            r[k] += x
            msum[k] += x
    if s < _RENORM_BELOW:
        for w in range(M.shape[0]):
            for k in range(K):
                M[w, k] *= s
        for k in range(K):
            msum[k] *= s
        s = 1.0
    return s


@njit(cache=True, nogil=True)
def _local_slots(word_ids: NDArray[np.int64], slot: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Distinct words of a minibatch (first-seen order) and each entry's index into them; ``slot`` (length W,
    all −1) is restored to all −1 before returning."""
    n_u = 0
    for i in range(word_ids.shape[0]):
        w = word_ids[i]
        if slot[w] < 0:
            slot[w] = n_u
            n_u += 1
    rows = np.empty(n_u, dtype=np.int64)
    slots = np.empty(word_ids.shape[0], dtype=np.int64)
    for i in range(word_ids.shape[0]):
        w = word_ids[i]
        rows[slot[w]] = w
        slots[i] = slot[w]
    for u in range(n_u):
        slot[rows[u]] = -1
    return rows, slots


# ================================================================================ the kernel
class OnlineHDP(TopicModel):
    """Online hierarchical Dirichlet process topic model with corpus truncation K = ``n_topics``.

    Parameters
    ----------
    n_topics : int
        Corpus-level truncation K (the seed uses 150). Topics carrying mass are counted by ``topics_used``.
    n_words : int
        Vocabulary size W.
    seed : int
        Seed of ``rng_`` (initial topics of ``inference="stick"``).
    inference : {"collapsed", "stick"}
        ``"collapsed"`` (default): zero-order collapsed variational HDP (Sato et al. 2012) updated
        stochastically. ``"stick"``: the seed's online variational HDP, Eqs. 15–27, as written.
    doc_topics : int
        Document-level truncation T (``stick`` only; seed: 15).
    gamma : float
        Corpus-level concentration γ (seed: 1).
    alpha : float
        Document-level concentration α0 (seed: 1).
    eta : float
        Topic Dirichlet η (seed: 0.01).
    kappa, tau0 : float
        ρ_t = (τ0 + t)^−κ (seed: κ = 0.6, τ0 = 64); t counts internal minibatches.
    rho_floor : float
        ρ_min: the step never falls below it, so a stream keeps being followed (memory ≈ 1/ρ_min minibatches).
    batch_size : int
        Internal minibatch size S (seed: 256); a ``partial_fit`` batch is split into minibatches of this size.
    window : int
        D, the number of documents the statistics stand for (the D/S scaling of Eqs. 22–24); in a stream, the
        last ``window`` documents. ``batch_size / rho_floor`` is the matching memory of the schedule.
    tol : float
        Document convergence tolerance (relative change of the objective for ``stick``; L1 change of the
        responsibilities per token for ``collapsed``).
    max_iter : int
        Cap on document-level iterations.
    sequential : bool
        ``collapsed`` only: later documents of a minibatch see the raw counts of earlier ones (topic births at
        the data's scale).
    """

    algorithm: ClassVar[str] = "ohdp"
    #: ``inference`` is fixed on a restored model besides K, W and the seed: it decides what the state holds
    #: (λ − η and the stick parameters (u, v) of length K−1 for ``stick``; N^Φ and the expected tables per topic,
    #: length K, for ``collapsed``). Every other setting can change: γ, α0, η enter each update and read-out
    #: afresh, the schedule (κ, τ0, ρ_min) is evaluated at the stored update count, and ``doc_topics``, ``tol``,
    #: ``max_iter``, ``sequential``, ``batch_size`` and ``window`` shape only the document step and future updates.
    restore_fixed: ClassVar[frozenset[str]] = TopicModel.restore_fixed | {"inference"}

    @classmethod
    def state_bytes(cls, n_topics: int, n_words: int, **params: Any) -> int:
        """``topic_stat`` (W×K), ``topic_total`` (K), the sticks and ``topic_rank`` (K), 8 bytes each."""
        K, W = int(n_topics), int(n_words)
        stick = cls.params_with_defaults(n_topics=K, n_words=W, **params)["inference"] == "stick"
        sticks = 2 * (K - 1) if stick else K  # (u, v) of length K-1, or the tables per topic and an empty v
        return 8 * (W * K + K + sticks + K)

    def __init__(
        self,
        n_topics: int,
        n_words: int,
        seed: int = 0,
        *,
        inference: str = "collapsed",
        doc_topics: int = 15,
        gamma: float = 1.0,
        alpha: float = 1.0,
        eta: float = 0.01,
        kappa: float = 0.6,
        tau0: float = 64.0,
        rho_floor: float = 0.01,
        batch_size: int = 256,
        window: int = 25_000,
        tol: float = 1e-4,
        max_iter: int = 100,
        sequential: bool = True,
    ) -> None:
        self.n_topics = n_topics
        self.n_words = n_words
        self.seed = seed
        self.inference = inference
        self.doc_topics = doc_topics
        self.gamma = gamma
        self.alpha = alpha
        self.eta = eta
        self.kappa = kappa
        self.tau0 = tau0
        self.rho_floor = rho_floor
        self.batch_size = batch_size
        self.window = window
        self.tol = tol
        self.max_iter = max_iter
        self.sequential = sequential
        self._setup()

    # ------------------------------------------------------------------ settings
    def _validate_params(self) -> None:
        if self.inference not in _INFERENCE:
            raise ValueError(f"inference must be one of {_INFERENCE}, got {self.inference!r}")
        check_positive_int("doc_topics", self.doc_topics)
        if self.n_topics < 2:
            raise ValueError(f"n_topics must be at least 2 for the HDP truncation, got {self.n_topics!r}")
        if self.doc_topics < 2:
            raise ValueError(f"doc_topics must be at least 2, got {self.doc_topics!r}")
        check_interval("gamma", self.gamma, 0.0, low_open=True, high_open=True)
        check_interval("alpha", self.alpha, 0.0, low_open=True, high_open=True)
        check_interval("eta", self.eta, 0.0, low_open=True, high_open=True)
        check_interval("kappa", self.kappa, 0.0, 1.0, low_open=True)
        check_interval("tau0", self.tau0, 0.0, high_open=True)
        check_interval("rho_floor", self.rho_floor, 0.0, 1.0, high_open=True)
        check_positive_int("batch_size", self.batch_size)
        check_positive_int("window", self.window)
        check_interval("tol", self.tol, 0.0, high_open=True)
        check_positive_int("max_iter", self.max_iter)
        if not isinstance(self.sequential, bool | np.bool_):
            raise ValueError(f"sequential must be a bool, got {self.sequential!r}")
        self._schedule = StepSize(scale=1.0, tau=float(self.tau0), kappa=float(self.kappa), floor=float(self.rho_floor))

    def _init_state(self) -> None:
        K, W = int(self.n_topics), int(self.n_words)
        if self.inference == "stick":
            # The paper's code (and gensim): λ ~ Gamma(1, 1)·D·100/(K·W), i.e. G = λ − η.
            init = self.rng_.gamma(1.0, 1.0, (W, K)) * (float(self.window) * 100.0 / (K * W))
            self.topic_stat_ = np.ascontiguousarray(init)
        else:
            self.topic_stat_ = np.zeros((W, K))
        self.topic_total_ = self.topic_stat_.sum(axis=0)
        self.scale_ = 1.0
        # stick: (u, v) of q(β'_k), k < K (Eq. 13), at the prior (1, γ). collapsed: stick_u_ holds the
        # expected tables per topic (length K), stick_v_ is unused (kept for one layout).
        if self.inference == "stick":
            self.stick_u_ = np.ones(K - 1)
            self.stick_v_ = np.full(K - 1, float(self.gamma))
        else:
            self.stick_u_ = np.zeros(K)
            self.stick_v_ = np.zeros(0)
        # collapsed: the order in which free topic ids are handed to new topics (the seed's only use there)
        self.topic_rank_ = (self.rng_.permutation(K) if self.inference == "collapsed" else np.arange(K)).astype(
            np.int64
        )
        self.n_updates_ = 0
        self.last_doc_iters_ = 0.0

    # ------------------------------------------------------------------ corpus-level quantities
    def _rho(self, t: int) -> float:
        return self._schedule(float(t))

    def _beta(self) -> NDArray[np.float64]:
        """E[β] over the public topic ids (sums to 1)."""
        if self.inference == "stick":
            return _stick_means(self.stick_u_, self.stick_v_)
        return self._collapsed_beta()

    def _collapsed_beta(self) -> NDArray[np.float64]:
        return _beta_from_tables(self.stick_u_, self.topic_rank_, float(self.gamma))

    def _elogbeta(self) -> NDArray[np.float64]:
        return _expect_log_sticks(self.stick_u_, self.stick_v_)

    # ------------------------------------------------------------------ learning
    def _partial_fit(self, batch: Batch) -> NDArray[np.float64]:
        theta = np.empty((batch.n_docs, self.n_topics))
        S = int(self.batch_size)
        slot = np.full(self.n_words, -1, dtype=np.int64)
        for d0 in range(0, batch.n_docs, S):
            d1 = min(batch.n_docs, d0 + S)
            mb = batch.slice(d0, d1)
            theta[d0:d1] = self._minibatch(mb, slot, update=True)
        return theta

    def _transform(self, batch: Batch) -> NDArray[np.float64]:
        theta = np.empty((batch.n_docs, self.n_topics))
        S = int(self.batch_size)
        slot = np.full(self.n_words, -1, dtype=np.int64)
        for d0 in range(0, batch.n_docs, S):
            d1 = min(batch.n_docs, d0 + S)
            theta[d0:d1] = self._minibatch(batch.slice(d0, d1), slot, update=False)
        return theta

    def _minibatch(self, mb: Batch, slot: NDArray[np.int64], *, update: bool) -> NDArray[np.float64]:
        K = int(self.n_topics)
        theta = np.empty((mb.n_docs, K))
        rows, slots = _local_slots(mb.word_ids, slot)
        stat = np.zeros((rows.shape[0], K))
        if self.inference == "stick":
            elog = _elog_rows(self.topic_stat_, rows, self.scale_, self.topic_total_, float(self.eta))
            stat_c = np.zeros(K)
            iters = _stick_batch(
                mb.indptr,
                slots,
                mb.counts,
                elog,
                self._elogbeta(),
                int(self.doc_topics),
                float(self.alpha),
                float(self.tol),
                int(self.max_iter),
                stat,
                stat_c,
                theta,
            )
        else:
            base = self.topic_stat_[rows] * self.scale_
            base_tot = self.topic_total_ * self.scale_
            tables = np.zeros(K)
            iters = _cvb_batch(
                mb.indptr,
                slots,
                mb.counts,
                base,
                base_tot,
                float(self.eta),
                int(self.n_words),
                self.stick_u_,
                self.topic_rank_,
                float(self.alpha),
                float(self.gamma),
                float(self.tol),
                int(self.max_iter),
                bool(self.sequential) and update,
                stat,
                tables,
                theta,
            )
        if not update:
            return theta
        self.last_doc_iters_ = iters / max(1, mb.n_docs)
        if mb.word_ids.shape[0] == 0:
            return theta
        rho = self._rho(self.n_updates_)
        mult = float(self.window) / mb.n_docs  # D/S
        self.scale_ = _sparse_step(self.topic_stat_, self.topic_total_, rows, stat, self.scale_, rho, mult)
        if self.inference == "stick":
            # Eqs. 23–24 and 26–27; Eq. 24's Σ_{l>k} is a tail sum of Σ_t φ_tl.
            tail = np.cumsum(stat_c[::-1])[::-1]
            self.stick_u_ = (1.0 - rho) * self.stick_u_ + rho * (1.0 + mult * stat_c[: K - 1])
            self.stick_v_ = (1.0 - rho) * self.stick_v_ + rho * (float(self.gamma) + mult * tail[1:])
        else:
            self.stick_u_ = (1.0 - rho) * self.stick_u_ + rho * mult * tables
        self.n_updates_ += 1
        return theta

    # ------------------------------------------------------------------ read-outs
    def topic_word(self) -> NDArray[np.float64]:
        """E[φ_k] = λ_k / Σ_w λ_kw (stick) or φ̂_k = (N^Φ_k + η)/(N^Z_k + Wη) (collapsed); the same formula."""
        lam = self.topic_stat_.T * self.scale_ + float(self.eta)
        return lam / lam.sum(axis=1, keepdims=True)

    def topic_weights(self) -> NDArray[np.float64]:
        """Corpus-level weights E[β], indexed by the stable public topic ids."""
        beta = self._beta()
        return beta / beta.sum()

    def reset_words(self, word_ids: ArrayLike) -> None:
        ids = self._check_word_ids(word_ids)
        if ids.size == 0:
            return
        self.topic_total_ -= self.topic_stat_[ids].sum(axis=0)
        np.maximum(self.topic_total_, 0.0, out=self.topic_total_)
        self.topic_stat_[ids] = 0.0

    def diagnostics(self) -> dict[str, float]:
        beta = self.topic_weights()
        nz = beta[beta > 0]
        return {
            "rho": float(self._rho(self.n_updates_)),
            "topics_used": float(self.topics_used()),
            "beta_entropy_topics": float(np.exp(-(nz * np.log(nz)).sum())),
            "doc_iterations": float(self.last_doc_iters_),
            "scale_s": float(self.scale_),
        }

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> dict[str, StateValue]:
        return {
            "topic_stat": self.topic_stat_.copy(),
            "topic_total": self.topic_total_.copy(),
            "scale": float(self.scale_),
            "stick_u": self.stick_u_.copy(),
            "stick_v": self.stick_v_.copy(),
            "topic_rank": self.topic_rank_.copy(),
            "n_updates": int(self.n_updates_),
            "last_doc_iters": float(self.last_doc_iters_),
        }

    def _set_state(self, state: dict[str, StateValue]) -> None:
        K, W = int(self.n_topics), int(self.n_words)
        stat = np.array(state["topic_stat"], dtype=np.float64, copy=True)
        if stat.shape != (W, K):
            raise ValueError(f"topic_stat has shape {stat.shape}, expected {(W, K)}")
        self.topic_stat_ = np.ascontiguousarray(stat)
        self.topic_total_ = np.array(state["topic_total"], dtype=np.float64, copy=True)
        self.scale_ = float(state["scale"])  # type: ignore[arg-type]
        self.stick_u_ = np.array(state["stick_u"], dtype=np.float64, copy=True)
        self.stick_v_ = np.array(state["stick_v"], dtype=np.float64, copy=True)
        rank = np.array(state["topic_rank"], dtype=np.int64, copy=True)
        if sorted(rank.tolist()) != list(range(K)):
            raise ValueError("topic_rank must be a permutation of the topic ids")
        self.topic_rank_ = rank
        self.n_updates_ = int(state["n_updates"])  # type: ignore[arg-type]
        self.last_doc_iters_ = float(state["last_doc_iters"])  # type: ignore[arg-type]

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {"batch_size": 8, "window": 200, "max_iter": 20, "doc_topics": 4}

    # ------------------------------------------------------------------ topic moves (kernels.hygiene)
    def _check_moves(self) -> None:
        if self.inference != "collapsed":
            raise ValueError("topic moves (merge, delete, birth) need inference='collapsed'")

    def merge_topics(self, into: int, src: int) -> None:
        """Merge topic ``src`` into ``into``: N^Φ columns, N^Z and expected tables added (the tables of the
        merged topic are an upper bound: two tables in one document now serve one topic)."""
        self._check_moves()
        merge_columns(self.topic_stat_, self.topic_total_, into, src)
        self.stick_u_[into] += self.stick_u_[src]
        self.stick_u_[src] = 0.0

    def delete_topic(self, k: int) -> None:
        """Empty topic ``k``: its tokens go to the others by responsibility (``kernels._moves.delete_column``),
        its expected tables in the same proportion, so β's total table count is unchanged."""
        self._check_moves()
        got = delete_column(
            self.topic_stat_, self.topic_total_, 1.0, self.scale_, float(self.eta), self.topic_weights(), k
        )
        if got.sum() > 0:
            self.stick_u_ += self.stick_u_[k] * got / got.sum()
        self.stick_u_[k] = 0.0

    def birth_topic(
        self, k: int, word_ids: ArrayLike, word_probs: ArrayLike, share: float
    ) -> tuple[float, Callable[[], None]]:
        """Give topic ``k`` a ``share`` of the window's tokens with word distribution ``word_probs`` over
        ``word_ids`` (``kernels._moves.birth_column``) and the same share of the expected tables.

        Returns the tokens moved and a function that undoes the move.
        """
        self._check_moves()
        total = float(self.topic_total_.sum() * self.scale_)
        ids, counts = birth_counts(word_ids, word_probs, share, total)
        moved, undo_stat = birth_column(self.topic_stat_, self.topic_total_, 1.0, self.scale_, k, ids, counts)
        saved = self.stick_u_.copy()
        got = moved / total if total > 0 else 0.0
        self.stick_u_ *= 1.0 - got
        self.stick_u_[k] += got * float(saved.sum())

        def undo() -> None:
            undo_stat()
            self.stick_u_[:] = saved

        return moved, undo
