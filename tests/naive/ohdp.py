"""Slow, literal NumPy transcriptions of the online HDP updates, to test ``kernels.ohdp`` against.

Token level (a word occurring c times is c separate tokens), SciPy's special functions, no clumping, no sparse
scaling trick: each function is the seed's equation as printed (Wang, Paisley & Blei 2011,
``shared/seeds/004``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import digamma, gammaln, logsumexp


def expect_log_sticks(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """E[log π_t] = E[log π'_t] + Σ_{s<t} E[log(1 − π'_s)], last break = 1 (below Eq. 21)."""
    e1 = digamma(a) - digamma(a + b)
    e0 = digamma(b) - digamma(a + b)
    out = np.zeros(len(a) + 1)
    out[:-1] = e1
    out[1:] += np.cumsum(e0)
    return out


def doc_objective(
    words: NDArray[np.int64],
    elog: NDArray[np.float64],
    elogbeta: NDArray[np.float64],
    alpha: float,
    zeta: NDArray[np.float64],
    phi: NDArray[np.float64],
    a: NDArray[np.float64],
    b: NDArray[np.float64],
) -> float:
    """L_j of the seed (Eq. 14 restricted to document j, corpus terms left out), token level.

    E[log p(w|c,z,φ)] + E[log p(c|β')] + H(q(c)) + E[log p(z|π')] + H(q(z)) + E[log p(π'|α0)] + H(q(π')).
    ``elog`` is K×W: E[log φ_kw]; ``zeta`` N×T; ``phi`` T×K; (a, b) T−1.
    """
    el = elog[:, words].T  # N×K
    elogpi = expect_log_sticks(a, b)
    lik = float(np.sum(zeta * (el @ phi.T)))
    lc = float(np.sum(phi * elogbeta[None, :]) - np.sum(phi * np.log(phi)))
    lz = float(np.sum(zeta * elogpi[None, :]) - np.sum(zeta * np.log(zeta)))
    e1 = digamma(a) - digamma(a + b)
    e0 = digamma(b) - digamma(a + b)
    lp = float(np.sum(np.log(alpha) + (alpha - 1.0) * e0))
    hq = float(-np.sum(gammaln(a + b) - gammaln(a) - gammaln(b) + (a - 1.0) * e1 + (b - 1.0) * e0))
    return lik + lc + lz + lp + hq


def doc_step(
    words: NDArray[np.int64],
    elog: NDArray[np.float64],
    elogbeta: NDArray[np.float64],
    T: int,
    alpha: float,
    n_iter: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], list[float]]:
    """``n_iter`` rounds of Eq. 17, Eq. 18, Eqs. 15–16 (in that order) from ζ uniform, (a, b) = (1, α0).

    ``words``: the document's tokens (length N, repeats allowed). Returns ζ (N×T), φ (T×K), a, b, and the
    objective after each round.
    """
    N = len(words)
    el = elog[:, words].T  # N×K: E[log p(w_n | φ_k)]
    zeta = np.full((N, T), 1.0 / T)
    a = np.ones(T - 1)
    b = np.full(T - 1, alpha)
    trace = []
    for _ in range(n_iter):
        # Eq. 17: φ_jtk ∝ exp(Σ_n ζ_jnt E[log p(w_jn|φ_k)] + E[log β_k])
        logits = zeta.T @ el + elogbeta[None, :]
        phi = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
        # Eq. 18: ζ_jnt ∝ exp(Σ_k φ_jtk E[log p(w_jn|φ_k)] + E[log π_jt])
        logits = el @ phi.T + expect_log_sticks(a, b)[None, :]
        zeta = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
        # Eq. 15: a_jt = 1 + Σ_n ζ_jnt ; Eq. 16: b_jt = α0 + Σ_n Σ_{s>t} ζ_jns
        a = 1.0 + zeta[:, : T - 1].sum(axis=0)
        b = alpha + np.array([zeta[:, t + 1 :].sum() for t in range(T - 1)])
        trace.append(doc_objective(words, elog, elogbeta, alpha, zeta, phi, a, b))
    return zeta, phi, a, b, trace


def corpus_step(
    lam: NDArray[np.float64],
    u: NDArray[np.float64],
    v: NDArray[np.float64],
    docs: list[NDArray[np.int64]],
    zetas: list[NDArray[np.float64]],
    phis: list[NDArray[np.float64]],
    eta: float,
    gamma: float,
    D: float,
    rho: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Eqs. 22–27 with a minibatch of S documents (the gradient of (D/S) Σ_j L_j), dense over K×W."""
    K, W = lam.shape
    S = len(docs)
    ss_lam = np.zeros((K, W))
    ss_u = np.zeros(K)
    ss_v = np.zeros(K)
    for words, zeta, phi in zip(docs, zetas, phis, strict=True):
        T = phi.shape[0]
        for t in range(T):
            for n, w in enumerate(words):
                ss_lam[:, w] += phi[t] * zeta[n, t]  # Σ_t φ_jtk (Σ_n ζ_jnt I[w_jn = w])
            ss_u += phi[t]  # Σ_t φ_jtk
            ss_v += np.array([phi[t, k + 1 :].sum() for k in range(K)])  # Σ_t Σ_{l>k} φ_jtl
    d_lam = -lam + eta + (D / S) * ss_lam  # Eq. 22
    d_u = -u + 1.0 + (D / S) * ss_u[: K - 1]  # Eq. 23
    d_v = -v + gamma + (D / S) * ss_v[: K - 1]  # Eq. 24
    return lam + rho * d_lam, u + rho * d_u, v + rho * d_v  # Eqs. 25–27


def cvb0_doc_step(
    cnts: NDArray[np.float64], phat: NDArray[np.float64], prior: NDArray[np.float64], n_sweeps: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Collapsed zero-order document update with fixed topics (Sato et al. 2012 / SCVB0 Eq. 5), clumped:
    γ_n ∝ φ̂_n ⊙ (N_j − min(c_n, 1)·γ_n + α0β), Gauss–Seidel over the distinct words, ``n_sweeps`` sweeps."""
    gam = phat * prior[None, :]
    gam /= gam.sum(axis=1, keepdims=True)
    nj = cnts @ gam
    for _ in range(n_sweeps):
        for n in range(len(cnts)):
            g = phat[n] * (np.maximum(nj - min(cnts[n], 1.0) * gam[n], 0.0) + prior)
            g /= g.sum()
            nj += cnts[n] * (g - gam[n])
            gam[n] = g
    return gam, nj


def expected_tables(
    cnts: NDArray[np.float64], gam: NDArray[np.float64], prior: NDArray[np.float64]
) -> NDArray[np.float64]:
    """E[m_jk] ≈ P(n_jk > 0) · α0β_k (ψ(α0β_k + E[n_jk | n_jk > 0]) − ψ(α0β_k)), P(n_jk = 0) = Π_n (1 − γ_nk)^{c_n}
    (Sato et al. 2012), with SciPy's digamma and NumPy's log1p/expm1 on every entry."""
    nj = cnts @ gam
    p_pos = -np.expm1(cnts @ np.log1p(-gam))
    return p_pos * prior * (digamma(prior + nj / p_pos) - digamma(prior))


def beta_from_tables(m: NDArray[np.float64], rank: NDArray[np.int64], gamma: float) -> NDArray[np.float64]:
    """E[β] from expected table counts, one stick at a time: topics in decreasing m_k (ties in the order
    ``rank``), break i the posterior mean of Beta(1 + m_(i), γ + Σ_{l>i} m_(l)), the last break 1 (Sato et al.
    2012's tables in place of the seed's Eqs. 19–20 document atoms)."""
    order = sorted(range(len(m)), key=lambda k: (-m[k], rank[k]))
    beta = np.zeros(len(m))
    rest = 1.0
    for i, k in enumerate(order):
        later = sum(m[order[j]] for j in range(i + 1, len(order)))
        share = 1.0 if i == len(order) - 1 else (1.0 + m[k]) / (1.0 + gamma + m[k] + later)
        beta[k] = rest * share
        rest *= 1.0 - share
    return beta


def chao1(tokens: NDArray[np.float64]) -> int:
    """Chao's (1984) estimate of the number of distinct words: seen + f1²/(2 f2) (f1(f1 − 1)/2 without
    doubletons), f1 and f2 the words of count in (0, 1] and (1, 2]; between 1 and the capacity ``len(tokens)``."""
    counts = [float(t) for t in tokens]
    seen = sum(1 for t in counts if t > 0)
    f1 = sum(1 for t in counts if 0 < t <= 1)
    f2 = sum(1 for t in counts if 1 < t <= 2)
    unseen = f1 * f1 / (2 * f2) if f2 else f1 * (f1 - 1) / 2
    return max(1, min(len(counts), round(seen + unseen)))


def collapsed_minibatch(
    before: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]],
    rank: NDArray[np.int64],
    docs: list[tuple[NDArray[np.int64], NDArray[np.float64]]],
    hyper: tuple[float, float, float, int],
) -> tuple[NDArray[np.float64], NDArray[np.float64], list[NDArray[np.float64]]]:
    """The collapsed online HDP's minibatch, document after document: ``before`` = (N^Φ (W×K), expected tables
    (K), each word's tokens so far (W)); ``hyper`` = (α0, γ, η, sweeps). Each document sees the words and tables
    of the documents before it in the minibatch: φ̂ = (N^Φ + its counts + η) / (N^Z + its totals + Vη) with V
    the Chao estimate over the tokens including the minibatch's, prior α0·E[β] of the tables so far.
    Returns the minibatch's word-topic counts, its expected tables and each document's θ."""
    G0, T0, tokens0 = before
    alpha, gamma, eta, sweeps = hyper
    tokens = tokens0.copy()
    for ids, c in docs:
        tokens[ids] += c
    V = chao1(tokens)
    stat = np.zeros_like(G0)
    tables = np.zeros_like(T0)
    thetas = []
    for ids, c in docs:
        prior = np.maximum(alpha * beta_from_tables(T0 + tables, rank, gamma), 1e-100)
        phat = (G0[ids] + stat[ids] + eta) / (G0.sum(axis=0) + stat.sum(axis=0) + V * eta)
        gam, nj = cvb0_doc_step(c, phat, prior, sweeps)
        stat[ids] += c[:, None] * gam
        tables += expected_tables(c, gam, prior)
        thetas.append((nj + prior) / (nj + prior).sum())
    return stat, tables, thetas


# ------------------------------------------------------------- learned concentrations (kernels._concentration)
def expect_log_rest(u: float, v: float) -> float:
    """E[log(1 − x)] for x ~ Beta(u, v), by numerical integration of the density (no digamma identity)."""
    from scipy.integrate import quad
    from scipy.stats import beta as beta_dist

    value, _ = quad(lambda x: np.log1p(-x) * beta_dist.pdf(x, u, v), 0.0, 1.0, limit=200)
    return float(value)


def gamma_posterior_sticks(
    u: NDArray[np.float64], v: NDArray[np.float64], shape: float, rate: float
) -> tuple[float, float]:
    """(C1) of Blei & Jordan 2006 §3: q(γ) = Gamma(a + K − 1, b − Σ_k E[log(1 − β'_k)]), K − 1 sticks Beta(u, v),
    the expectations integrated numerically."""
    return shape + len(u), rate - sum(expect_log_rest(float(x), float(y)) for x, y in zip(u, v, strict=True))


def gamma_fixed_point_tables(m: NDArray[np.float64], shape: float, rate: float) -> tuple[float, float]:
    """(C1) on the collapsed sticks Beta(1 + m_(i), γ + Σ_{l>i} m_(l)) (tables sorted decreasing, last stick = 1),
    solved for γ = E_q[γ] with SciPy's ``brentq``: returns (shape, rate) of q(γ) at that γ."""
    from scipy.optimize import brentq

    m_desc = np.sort(np.asarray(m, dtype=np.float64))[::-1]
    tails = np.concatenate([np.cumsum(m_desc[::-1])[::-1][1:], [0.0]])
    K = len(m_desc)

    def rate_at(g: float) -> float:
        u = 1.0 + m_desc[: K - 1]
        v = g + tails[: K - 1]
        return rate - float(np.sum(digamma(v) - digamma(u + v)))

    g = brentq(lambda g: g * rate_at(g) - (shape + K - 1), 1e-8, 1e8, xtol=1e-14, rtol=1e-13)
    return shape + K - 1, rate_at(g)


def collapsed_alpha_rate(lengths: NDArray[np.float64], alpha: float) -> float:
    """(C2)'s rate term for a minibatch (Teh, Kurihara & Welling 2008; its shape term is the minibatch's
    expected tables Σ_j E[m_j]): −Σ_j E[log w_j] with q(w_j) = Beta(α0, N_j), E[log w_j] = ψ(α0) − ψ(α0 + N_j),
    over the documents with N_j > 0."""
    n = np.asarray(lengths, dtype=np.float64)
    n = n[n > 0]
    return float(np.sum(digamma(alpha + n) - digamma(alpha)))
