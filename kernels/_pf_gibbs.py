"""Gibbs initialisation of the particle filter (``docs/particle-filter.md``, "Initialisation"; seed 003's main
finding: the initial model matters most).

Collapsed Gibbs sampling for LDA (Griffiths & Steyvers 2004) on the buffered initial sample, the seed's
label-free best-of-N choice by held-out perplexity (document completion), :func:`gibbs_refine`, which runs Gibbs
again on a grown sample from the earlier assignments, and :func:`install_init`, which starts every particle from
the chosen assignments. :func:`fold_in_gibbs` is the seed's evaluation (Gibbs fold-in with
the topics fixed), used by the experiments in ``benchmarks/pf_experiment.py``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._pf_filter import reservoir_position, store_token
from ._pf_pools import close_slot, open_slot
from ._pf_rng import rng_below, sample_cat, sample_cumulative
from ._pf_state import D_FREE, FILL, N_FREE, PEAK_ROWS, TOKENS, Prior, State

__all__ = [
    "Chain",
    "InitPlan",
    "TokenDocs",
    "Tokens",
    "fold_in_gibbs",
    "gibbs_chain",
    "gibbs_init",
    "gibbs_refine",
    "heldout_loglik",
    "install_init",
    "new_chain",
]

# Gibbs sweeps of the fold-in that scores an initial chain on the held-out documents (the seed's evaluation).
_COMPLETION_SWEEPS = 5


class Tokens(NamedTuple):
    """A Gibbs chain's tokens: local word id (< V) ``words[i]``, document ``doc_of[i]``, topic ``z[i]`` (updated
    in place by the chain)."""

    words: NDArray[np.int64]
    doc_of: NDArray[np.int64]
    z: NDArray[np.int64]


class TokenDocs(NamedTuple):
    """Documents as token lists: document d's tokens (word ids, one per token) are ``words[ptr[d]:ptr[d+1]]``."""

    ptr: NDArray[np.int64]
    words: NDArray[np.int64]


class InitPlan(NamedTuple):
    """The Gibbs initialisation's settings: sweeps per chain, chains (the best of them is kept) and the share of
    the sample's documents held out to choose it (:func:`gibbs_init`)."""

    sweeps: int
    restarts: int
    holdout: float


class Chain(NamedTuple):
    """A Gibbs chain's counts n_wk (V×K, word-major: a token's conditional reads one contiguous row), n_k,
    n_dk (n_docs×K), the reciprocals 1/(n_k + Wβ) kept in step with n_k, and a K-long scratch ``q``."""

    nwk: NDArray[np.int64]
    nk: NDArray[np.int64]
    ndk: NDArray[np.int64]
    inv: NDArray[np.float64]
    q: NDArray[np.float64]


def new_chain(n_docs: int, V: int, K: int) -> Chain:
    """Zero counts for a chain over V local words, K topics and ``n_docs`` documents."""
    zeros = np.zeros
    return Chain(zeros((V, K), np.int64), zeros(K, np.int64), zeros((n_docs, K), np.int64), zeros(K), np.empty(K))


@njit(cache=True, nogil=True, inline="always")
def _count_token(chain: Chain, w: int, d: int, k: int, delta: int, wbeta: float) -> None:
    """Add ``delta`` (+1 or −1) to the counts n_wk, n_k, n_dk of one token: word w of document d in topic k."""
    chain.nwk[w, k] += delta
    chain.nk[k] += delta
    chain.ndk[d, k] += delta
    chain.inv[k] = 1.0 / (chain.nk[k] + wbeta)


@njit(cache=True, nogil=True)
def _conditional_draw(chain: Chain, w: int, d: int, prior: Prior, rng: NDArray[np.uint64]) -> int:
    """Draw z_i from P(z_i = k | rest) ∝ (n_wk + β)/(n_k + Wβ) · (n_dk + α), token i's counts removed: the
    running sums of the K terms, then a bisection (:func:`kernels._pf_rng.sample_cumulative`)."""
    alpha, beta, _ = prior
    row = chain.nwk[w]
    doc = chain.ndk[d]
    inv = chain.inv
    q = chain.q
    K = inv.shape[0]
    total = 0.0
    for kk in range(K):
        total += (row[kk] + beta) * inv[kk] * (doc[kk] + alpha)
        q[kk] = total
    return sample_cumulative(q, K, rng)


@njit(cache=True, nogil=True)
def gibbs_chain(
    toks: Tokens, chain: Chain, prior: Prior, sweeps: int, init_random: bool, rng: NDArray[np.uint64]
) -> None:
    """Collapsed Gibbs sampling for LDA (Griffiths & Steyvers 2004) on ``toks``: the initialisation of the
    seed. P(z_i = k | rest) ∝ (n_kw¬i + β)/(n_k¬i + Wβ) · (n_dk¬i + α), with ``prior.wbeta`` = Wβ of the full
    vocabulary. If ``init_random`` the chain starts from uniform topics, else from ``toks.z``. The tokens are
    added to ``chain``'s counts (zero for a new chain, :func:`new_chain`), ``toks.z`` and ``chain`` are
    updated in place."""
    words, doc_of, z = toks
    wbeta = prior.wbeta
    K = chain.nk.shape[0]
    N = words.shape[0]
    for k in range(K):
        chain.inv[k] = 1.0 / (chain.nk[k] + wbeta)
    for i in range(N):
        if init_random:
            z[i] = rng_below(rng, K)
        _count_token(chain, words[i], doc_of[i], z[i], 1, wbeta)
    for _ in range(sweeps):
        for i in range(N):
            w = words[i]
            d = doc_of[i]
            _count_token(chain, w, d, z[i], -1, wbeta)
            z[i] = _conditional_draw(chain, w, d, prior, rng)
            _count_token(chain, w, d, z[i], 1, wbeta)


@njit(cache=True, nogil=True)
def _gibbs_add_docs(toks: Tokens, start: int, chain: Chain, prior: Prior, rng: NDArray[np.uint64]) -> None:
    """Add tokens ``start:`` to a Gibbs state one at a time, each drawn from its conditional given everything
    added before it (used to fold the held-out part of the initial sample into the chosen chain)."""
    words, doc_of, z = toks
    for i in range(start, words.shape[0]):
        w = words[i]
        d = doc_of[i]
        z[i] = _conditional_draw(chain, w, d, prior, rng)
        _count_token(chain, w, d, z[i], 1, prior.wbeta)


@njit(cache=True, nogil=True)
def fold_in_gibbs(
    docs: TokenDocs, phi: NDArray[np.float64], alpha: float, sweeps: int, rng: NDArray[np.uint64]
) -> NDArray[np.int64]:
    """The seed's evaluation: with φ (K×V) fixed, run ``sweeps`` Gibbs sweeps on each document's tokens
    (P(z_i = k) ∝ φ_k,w (n_dk¬i + α), topics initialised uniformly at random) and return the final n_dk."""
    tok_ptr, toks = docs
    K = phi.shape[0]
    n_docs = tok_ptr.shape[0] - 1
    ndk = np.zeros((n_docs, K), dtype=np.int64)
    q = np.empty(K, dtype=np.float64)
    for d in range(n_docs):
        lo = tok_ptr[d]
        hi = tok_ptr[d + 1]
        z = np.empty(hi - lo, dtype=np.int64)
        for a in range(hi - lo):
            k = rng_below(rng, K)
            z[a] = k
            ndk[d, k] += 1
        for _ in range(sweeps):
            for a in range(hi - lo):
                w = toks[lo + a]
                k = z[a]
                ndk[d, k] -= 1
                total = 0.0
                for kk in range(K):
                    v = phi[kk, w] * (ndk[d, kk] + alpha)
                    q[kk] = v
                    total += v
                k = sample_cat(q, K, total, rng)
                z[a] = k
                ndk[d, k] += 1
    return ndk


@njit(cache=True, nogil=True)
def _completion_loglik(docs: TokenDocs, ndk: NDArray[np.int64], phi: NDArray[np.float64], alpha: float) -> float:
    """Σ over the odd-numbered tokens of every document of log Σ_k θ_dk φ_kw, θ_d = (n_dk + α)/(n + Kα) from
    the counts ``ndk`` of its n even-numbered tokens."""
    tok_ptr, toks = docs
    K = phi.shape[0]
    ll = 0.0
    for d in range(tok_ptr.shape[0] - 1):
        lo = tok_ptr[d]
        hi = tok_ptr[d + 1]
        n_half = (hi - lo + 1) // 2
        for i in range(lo + 1, hi, 2):
            w = toks[i]
            pr = 0.0
            for k in range(K):
                pr += (ndk[d, k] + alpha) / (n_half + K * alpha) * phi[k, w]
            ll += math.log(pr)
    return ll


def heldout_loglik(
    docs: TokenDocs, phi: NDArray[np.float64], alpha: float, rng: NDArray[np.uint64]
) -> tuple[float, int]:
    """Document completion: infer θ_d from the even-numbered tokens of each document by Gibbs fold-in with φ
    fixed (:func:`fold_in_gibbs`, ``_COMPLETION_SWEEPS`` sweeps), then score the odd-numbered ones by
    log Σ_k θ_dk φ_kw. Returns (sum of log-likelihoods, tokens scored); the seed's best-of-N initialisation keeps
    the chain with the lowest perplexity exp(-sum/n)."""
    tok_ptr, toks = docs
    lengths = np.diff(tok_ptr)
    position = np.arange(toks.size) - np.repeat(tok_ptr[:-1], lengths)
    even_ptr = np.zeros_like(tok_ptr)
    np.cumsum((lengths + 1) // 2, out=even_ptr[1:])
    even = TokenDocs(even_ptr, np.ascontiguousarray(toks[position % 2 == 0]))
    ndk = fold_in_gibbs(even, phi, alpha, _COMPLETION_SWEEPS, rng)
    return _completion_loglik(docs, ndk, phi, alpha), int(lengths.sum() - even_ptr[-1])


def gibbs_init(
    sample: TokenDocs, n_topics: int, prior: Prior, plan: InitPlan, rng: NDArray[np.uint64]
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The initial model: collapsed Gibbs on the ``sample``'s tokens, LDA's priors ``prior``.

    With ``plan.restarts`` = N > 1, N chains run on the first 1 − ``plan.holdout`` of the documents, each is
    scored by held-out perplexity on the rest, the best is kept, the held-out documents are added to it and
    max(5, sweeps // 10) more sweeps run over all (the seed's label-free best-of-N). Returns the topic of every
    token and the documents' mixtures (n_dk + α)/(n_d + Kα).
    """
    doc_ptr, words = sample
    sweeps, restarts, holdout = plan
    alpha, beta, _ = prior
    K = n_topics
    n_docs = doc_ptr.shape[0] - 1
    vocab, local = np.unique(words, return_inverse=True)
    local = local.astype(np.int64)
    V = max(int(vocab.size), 1)
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(doc_ptr))
    z = np.zeros(words.size, dtype=np.int64)
    n_hold = round(holdout * n_docs)
    if restarts > 1 and n_hold >= 1 and n_docs - n_hold >= 1:
        n_train_docs = n_docs - n_hold
        cut = int(doc_ptr[n_train_docs])
        hold_ptr = doc_ptr[n_train_docs:] - cut
        best_ll, best_z = -np.inf, z[:cut].copy()
        for _ in range(restarts):
            zc = np.zeros(cut, dtype=np.int64)
            chain = new_chain(n_train_docs, V, K)
            gibbs_chain(Tokens(local[:cut], doc_of[:cut], zc), chain, prior, sweeps, True, rng)
            phi = (chain.nwk.T + beta) / (chain.nk[:, None] + prior.wbeta)
            ll, n = heldout_loglik(TokenDocs(hold_ptr, local[cut:]), phi, alpha, rng)
            score = ll / max(n, 1)
            if score > best_ll:
                best_ll, best_z = score, zc
        z[:cut] = best_z
        # Fold the held-out documents into the chosen chain, then a few sweeps over the whole sample.
        chain = _extend_and_sweep(Tokens(local, doc_of, z), cut, n_docs, V, K, prior, max(5, sweeps // 10), rng)
    else:
        chain = new_chain(n_docs, V, K)
        gibbs_chain(Tokens(local, doc_of, z), chain, prior, sweeps, True, rng)
    return z, _chain_theta(chain, doc_ptr, alpha)


def gibbs_refine(
    sample: TokenDocs, z_known: NDArray[np.int64], prior: Prior, n_topics: int, sweeps: int, rng: NDArray[np.uint64]
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Collapsed Gibbs on a grown ``sample``, warm-started from the topics of its first tokens: ``z_known``
    (the previous Gibbs run's assignments of the documents it had). The later documents' tokens are added one at
    a time, each drawn from its conditional given everything added before, then ``sweeps`` sweeps run over all.
    Starting from the earlier chain keeps each topic in its slot (no fresh random start, no best-of-N), so a
    refinement changes what the topics say without relabelling them. Returns the topic of every token and the
    documents' mixtures (n_dk + α)/(n_d + Kα), like :func:`gibbs_init`."""
    doc_ptr, words = sample
    n_docs = doc_ptr.shape[0] - 1
    vocab, local = np.unique(words, return_inverse=True)
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(doc_ptr))
    z = np.zeros(words.size, dtype=np.int64)
    z[: z_known.size] = z_known
    toks = Tokens(local.astype(np.int64), doc_of, z)
    chain = _extend_and_sweep(toks, z_known.size, n_docs, max(int(vocab.size), 1), n_topics, prior, sweeps, rng)
    return z, _chain_theta(chain, doc_ptr, prior.alpha)


def _extend_and_sweep(
    toks: Tokens, cut: int, n_docs: int, V: int, K: int, prior: Prior, sweeps: int, rng: NDArray[np.uint64]
) -> Chain:
    """A chain from the assignments ``toks.z[:cut]``, the tokens ``cut:`` added one at a time
    (:func:`_gibbs_add_docs`), then ``sweeps`` sweeps over all the tokens. Returns the final chain."""
    words, doc_of, z = toks
    chain = new_chain(n_docs, V, K)
    gibbs_chain(Tokens(words[:cut], doc_of[:cut], z[:cut]), chain, prior, 0, False, rng)
    _gibbs_add_docs(toks, cut, chain, prior, rng)
    chain = new_chain(n_docs, V, K)
    gibbs_chain(toks, chain, prior, sweeps, False, rng)
    return chain


def _chain_theta(chain: Chain, doc_ptr: NDArray[np.int64], alpha: float) -> NDArray[np.float64]:
    """The documents' mixtures (n_dk + α)/(n_d + Kα) from a chain's counts."""
    nd = np.diff(doc_ptr).astype(np.float64)
    return np.asarray((chain.ndk + alpha) / (nd[:, None] + chain.nk.shape[0] * alpha), dtype=np.float64)


@njit(cache=True, nogil=True)
def install_init(
    sample: TokenDocs, z: NDArray[np.int64], alpha: float, theta: NDArray[np.float64], state: State
) -> int:
    """Start every particle from one initial model: the assignments ``z`` of the initial ``sample``'s tokens.

    All particles share the resulting count rows and document-count rows (reference count P), so no word is
    divergent. The initial sample's tokens then enter the reservoir in order like any other tokens
    (``docs/particle-filter.md``, "Initialisation"), and θ_d of each initial document is (n_dk + α)/(n_d + Kα).
    Returns 0, or -1 if the pool is too small.
    """
    doc_ptr, tokens = sample
    words, docs, res, parts = state
    ctr = parts.ctr
    nk = parts.nk
    rows = words.rows
    P, K = nk.shape
    R = res.res_w.shape[0]
    scratch = docs.dptr.shape[0] - 1
    zcur = np.zeros(P, dtype=np.int64)
    for i in range(tokens.shape[0]):
        w = tokens[i]
        k = z[i]
        r = words.ptr[w, 0]
        if r == 0:
            if ctr[N_FREE] < 1:
                return -1
            ctr[N_FREE] -= 1
            r = words.free[ctr[N_FREE]]
            for kk in range(K):
                rows[r, kk] = 0
            words.refcnt[r] = P
            for p in range(P):
                words.ptr[w, p] = r
        rows[r, k] += 1
        for p in range(P):
            nk[p, k] += 1
    used = rows.shape[0] - 1 - ctr[N_FREE]
    if used > ctr[PEAK_ROWS]:
        ctr[PEAK_ROWS] = used
    n_docs = doc_ptr.shape[0] - 1
    for d in range(n_docs):
        lo = doc_ptr[d]
        hi = doc_ptr[d + 1]
        s = open_slot(docs, ctr)
        if hi > lo:
            ctr[D_FREE] -= 1
            rd = docs.dfree[ctr[D_FREE]]
            for kk in range(K):
                docs.drows[rd, kk] = 0
            for i in range(lo, hi):
                docs.drows[rd, z[i]] += 1
            docs.dref[rd] = P
            for p in range(P):
                docs.dptr[s, p] = rd
        docs.slot_len[s] = hi - lo
        for kk in range(K):
            theta[d, kk] = (docs.drows[docs.dptr[s, 0], kk] + alpha) / ((hi - lo) + K * alpha)
        for i in range(lo, hi):
            ctr[TOKENS] += 1
            if s != scratch:
                pos = reservoir_position(ctr[TOKENS], ctr[FILL], R, parts.prng)
                if pos >= 0:
                    for p in range(P):
                        zcur[p] = z[i]
                    store_token(pos, tokens[i], s, zcur, res, docs, ctr)
        close_slot(docs, ctr, s)
    return 0
