"""A slow, obvious NumPy transcription of SCVB0 (seed 000: Foulds et al. 2013, Algorithm 2, Eqs. 5–9).

Dense W×K arrays, one document and one word at a time, no scale trick, no sparsity: the reference that
``tests/test_scvb0.py`` checks the numba kernel against.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

Doc = tuple[NDArray[np.int64], NDArray[np.float64]]


def step_size(t: float, scale: float, tau: float, kappa: float, floor: float = 0.0) -> float:
    """ρ_t = max(floor, scale / (tau + t)^kappa), capped at 1."""
    return min(1.0, max(floor, scale / (tau + t) ** kappa))


def gamma(
    n_phi: NDArray[np.float64],
    n_z: NDArray[np.float64],
    n_theta_j: NDArray[np.float64],
    w: int,
    alpha: float | NDArray[np.float64],
    eta: float,
) -> NDArray[np.float64]:
    """Eq. 5: γ_ijk ∝ (N^Φ_wk + η) / (N^Z_k + Σ_w η) · (N^Θ_jk + α_k) (``alpha``: one α, or α_k per topic)."""
    W = n_phi.shape[0]
    g = (n_phi[w] + eta) / (n_z + W * eta) * (n_theta_j + alpha)
    return g / g.sum()


def theta_update(
    n_theta_j: NDArray[np.float64], gam: NDArray[np.float64], c_j: float, rho: float
) -> NDArray[np.float64]:
    """Eq. 6: N^Θ_j := (1 - ρ^Θ_t) N^Θ_j + ρ^Θ_t C_j γ_ij."""
    return (1.0 - rho) * n_theta_j + rho * c_j * gam


def theta_update_clumped(
    n_theta_j: NDArray[np.float64], gam: NDArray[np.float64], c_j: float, rho: float, m: float
) -> NDArray[np.float64]:
    """Eq. 9: N^Θ_j := (1 - ρ)^m N^Θ_j + C_j γ_aj (1 - (1 - ρ)^m)  (m copies of Eq. 6 with γ held fixed)."""
    return (1.0 - rho) ** m * n_theta_j + c_j * gam * (1.0 - (1.0 - rho) ** m)


def doc_passes(
    n_phi: NDArray[np.float64],
    n_z: NDArray[np.float64],
    doc: Doc,
    n_theta0: NDArray[np.float64],
    alpha: float | NDArray[np.float64],
    eta: float,
    theta_schedule: tuple[float, float, float],
    burn_in: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Algorithm 2 for one document: ``burn_in`` passes, then the final pass. Clumped (Eq. 9).

    Returns (N^Θ_j after the last pass, Σ over the final pass of m·γ per word as a dense W×K array).
    The token iteration t of ρ^Θ_t starts at 0 and advances by m after each distinct word.
    """
    ids, cnts = doc
    c_j = float(np.sum(cnts))
    n_theta = n_theta0.copy()
    contrib = np.zeros_like(n_phi)
    t = 0.0
    for p in range(burn_in + 1):
        for w, m in zip(ids, cnts, strict=True):
            g = gamma(n_phi, n_z, n_theta, int(w), alpha, eta)
            rho = step_size(t, *theta_schedule)
            n_theta = theta_update_clumped(n_theta, g, c_j, rho, float(m))
            t += float(m)
            if p == burn_in:
                contrib[w] += m * g
    return n_theta, contrib


def doc_alpha(K: int, alpha: float, background: float, c_j: float) -> NDArray[np.float64]:
    """The document's α_k: ``alpha``, except α_0 = ``background``·C_j when ``background`` > 0."""
    a = np.full(K, alpha)
    if background > 0:
        a[0] = background * c_j
    return a


def minibatch_update(
    n_phi: NDArray[np.float64],
    n_z: NDArray[np.float64],
    docs: Sequence[Doc],
    n_theta0: NDArray[np.float64],
    rho_phi: float,
    corpus_size: float,
    alpha: float,
    eta: float,
    theta_schedule: tuple[float, float, float],
    burn_in: int,
    background: float = 0.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """One minibatch M of Algorithm 2, then Eqs. 7–8.

    N̂^Φ = C/|M| Σ_{ij∈M} Y^(ij), N̂^Z = C/|M| Σ_{ij∈M} γ_ij (|M| = tokens in the minibatch);
    N^Φ := (1-ρ) N^Φ + ρ N̂^Φ;  N^Z := (1-ρ) N^Z + ρ N̂^Z.
    Returns (new N^Φ, new N^Z, θ of each document = normalised N^Θ_j + α).
    """
    K = n_phi.shape[1]
    n_tokens = sum(float(np.sum(c)) for _, c in docs)
    hat_phi = np.zeros_like(n_phi)
    thetas = np.zeros((len(docs), K))
    for j, doc in enumerate(docs):
        a = doc_alpha(K, alpha, background, float(np.sum(doc[1])))
        n_theta, contrib = doc_passes(n_phi, n_z, doc, n_theta0[j], a, eta, theta_schedule, burn_in)
        hat_phi += corpus_size / n_tokens * contrib if n_tokens else 0.0
        thetas[j] = (n_theta + a) / (n_theta + a).sum()
    if n_tokens == 0:
        return n_phi.copy(), n_z.copy(), thetas
    hat_z = hat_phi.sum(axis=0)
    new_phi = (1.0 - rho_phi) * n_phi + rho_phi * hat_phi  # Eq. 7
    new_z = (1.0 - rho_phi) * n_z + rho_phi * hat_z  # Eq. 8
    return new_phi, new_z, thetas


def fold_in(
    n_phi: NDArray[np.float64],
    n_z: NDArray[np.float64],
    doc: Doc,
    alpha: float,
    eta: float,
    passes: int,
    background: float = 0.0,
) -> NDArray[np.float64]:
    """CVB0 for one document with the topics fixed (Eq. 3 restricted to N^Θ, clumped), as ``transform``.

    γ_a starts at φ_w normalised, N^Θ = Σ m_a γ_a; each sweep removes m_a γ_a from N^Θ, sets
    γ_a ∝ φ_wa (N^Θ + α), and adds m_a γ_a back. Returns normalised N^Θ + α.
    """
    ids, cnts = doc
    K = n_phi.shape[1]
    W = n_phi.shape[0]
    a = doc_alpha(K, alpha, background, float(np.sum(cnts)))
    phi = (n_phi + eta) / (n_z + W * eta)
    gams = [phi[w] / phi[w].sum() for w in ids]
    n_theta = np.zeros(K)
    for m, g in zip(cnts, gams, strict=True):
        n_theta = n_theta + m * g
    for _ in range(passes):
        for i, (w, m) in enumerate(zip(ids, cnts, strict=True)):
            excl = np.maximum(n_theta - m * gams[i], 0.0)
            g = phi[w] * (excl + a)
            gams[i] = g / g.sum()
            n_theta = excl + m * gams[i]
    return (n_theta + a) / (n_theta + a).sum()
