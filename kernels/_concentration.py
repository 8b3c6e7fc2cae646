"""Learned concentrations of the online HDP: Gamma posteriors of the corpus-level γ and document-level α0.

Both concentrations get Gamma(a, b) priors (shape a, rate b) and Gamma variational posteriors, as in Blei & Jordan,
"Variational inference for Dirichlet process mixtures" (Bayesian Analysis 2006, §3: q(α) = Gamma(w1, w2) with
w1 = s1 + T − 1, w2 = s2 − Σ_t E[log(1 − V_t)]), Bryant & Sudderth (NIPS 2012), and, for the collapsed document
level, Teh, Kurihara & Welling, "Collapsed variational inference for HDP" (NIPS 2008, §5: the auxiliary-variable
treatment of α0 after Escobar & West 1995).

Corpus level (γ). The K−1 corpus sticks β'_k ~ Beta(1, γ) give p(β' | γ) = Π_k γ (1 − β'_k)^{γ−1}, so

    q(γ) = Gamma(a_γ + K − 1,  b_γ − Σ_{k<K} E_q[log(1 − β'_k)]),                                   (C1)

with E[log(1 − β'_k)] = ψ(v_k) − ψ(u_k + v_k) for q(β'_k) = Beta(u_k, v_k) (:func:`stick_log_rest`). In the
collapsed estimator q(β'_k) = Beta(1 + m_(k), γ + Σ_{l>k} m_(l)) depends on γ itself, so (C1) and the stick
posterior are iterated to their joint fixed point for the current tables (:func:`gamma_fixed_point`).

Document level (α0). The collapsed model: a document with N_j tokens at E[m_j] tables has p(m_j | α0) ∝
α0^{m_j} Γ(α0)/Γ(α0 + N_j) = α0^{m_j} ∫ w^{α0−1}(1 − w)^{N_j−1} dw / Γ(N_j); with the auxiliary w_j and
q(w_j) = Beta(E[α0], N_j),

    q(α0) = Gamma(a_α + Σ_j E[m_j],  b_α − Σ_j (ψ(E[α0]) − ψ(E[α0] + N_j))).                        (C2)

The stick-breaking model: each document's T−1 sticks π'_jt ~ Beta(1, α0), so (C1) per document:

    q(α0) = Gamma(a_α + Σ_j (T − 1),  b_α − Σ_j Σ_t E[log(1 − π'_jt)]).                            (C3)

Online, (C2)/(C3) are sums over the corpus; a minibatch of S documents estimates them scaled by D/S, and the
Gamma's natural parameters (shape − 1, −rate) take the natural-gradient step of size ρ_t toward that estimate,
exactly as λ does (Hoffman et al. 2013, Eq. 37; seed 004 Eqs. 25–27).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._special import digamma

__all__ = ["doc_log_aux", "gamma_fixed_point", "stick_log_rest", "table_stick_log_rest"]

_GAMMA_LO, _GAMMA_HI = 1e-8, 1e8  # bracket of the fixed point (C1) on the collapsed sticks
_BISECTIONS = 80  # halvings of log γ over the bracket: a relative error < 1e-13


@njit(cache=True, nogil=True)
def stick_log_rest(u: NDArray[np.float64], v: NDArray[np.float64]) -> float:
    """−Σ_k E[log(1 − β'_k)] = Σ_k ψ(u_k + v_k) − ψ(v_k) for Beta(u_k, v_k) sticks: the rate term of (C1)/(C3)."""
    s = 0.0
    for k in range(u.shape[0]):
        s += digamma(u[k] + v[k]) - digamma(v[k])
    return s


@njit(cache=True, nogil=True)
def table_stick_log_rest(m_desc: NDArray[np.float64], gamma: float) -> float:
    """−Σ_{i<K−1} E[log(1 − β'_(i))] for the collapsed sticks Beta(1 + m_(i), γ + Σ_{l>i} m_(l)) given the
    expected tables in decreasing order ``m_desc`` (the last stick is the truncation's 1 and has no term).

    A stick with no tables and none after it contributes ψ(γ + 1) − ψ(γ) = 1/γ exactly (summed in one term)."""
    K = m_desc.shape[0]
    tail = 0.0
    for i in range(K):
        tail += m_desc[i]
    s = 0.0
    empty = 0
    for i in range(K - 1):
        mk = m_desc[i]
        tail -= mk
        rest = max(tail, 0.0)
        if mk <= 0.0 and rest <= 0.0:
            empty += 1
        else:
            s += digamma(1.0 + gamma + mk + rest) - digamma(gamma + rest)
    return s + empty / gamma


@njit(cache=True, nogil=True)
def gamma_fixed_point(m: NDArray[np.float64], shape_prior: float, rate_prior: float) -> tuple[float, float]:
    """The joint fixed point of (C1) and the collapsed sticks given the expected tables ``m`` (any order).

    Solves f(γ) = γ (b + R(γ)) − (a + K − 1) = 0, R = :func:`table_stick_log_rest`, by bisection on log γ in
    [1e-8, 1e8]: γ = (a + K − 1)/(b + R(γ)) is (C1) with E[γ] plugged back into the sticks. Each stick's term
    γ (ψ(1 + γ + m + t) − ψ(γ + t)) tends to 0 (t > 0) or 1 (t = 0) as γ → 0, so f < 0 there when a > 0, and
    b γ grows without bound, so f changes sign in the bracket for any b > 0 (``tests/test_hdp_concentrations.py``
    checks the root against SciPy's ``brentq`` on the literal (C1)). Returns (shape, rate) of q(γ).
    """
    K = m.shape[0]
    m_desc = -np.sort(-m)
    shape = shape_prior + K - 1.0
    lo = np.log(_GAMMA_LO)
    hi = np.log(_GAMMA_HI)
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        g = np.exp(mid)
        if g * (rate_prior + table_stick_log_rest(m_desc, g)) < shape:
            lo = mid
        else:
            hi = mid
    g = np.exp(0.5 * (lo + hi))
    return shape, rate_prior + table_stick_log_rest(m_desc, g)


@njit(cache=True, nogil=True)
def doc_log_aux(indptr: NDArray[np.int64], counts: NDArray[np.float64], alpha: float) -> float:
    """−Σ_j E[log w_j] = Σ_j ψ(α0 + N_j) − ψ(α0) over the non-empty documents (N_j = Σ counts): the rate term of
    (C2) for the documents of a minibatch."""
    s = 0.0
    d_alpha = digamma(alpha)
    for d in range(indptr.shape[0] - 1):
        n = 0.0
        for i in range(indptr[d], indptr[d + 1]):
            n += counts[i]
        if n > 0.0:
            s += digamma(alpha + n) - d_alpha
    return s
