"""The particle filter's ``transform`` fold-in (``kernels/_pf_readout.fold_in_mean_field``) against what it
claims to compute, by a route that shares nothing with it.

Its update θ_k ∝ α + Σ_w c_w θ_k φ_kw / Σ_k' θ_k' φ_k'w is the EM step for the θ that maximises

    L(θ) = Σ_w c_w log Σ_k θ_k φ_kw + α Σ_k log θ_k      on the simplex,

the document's log-likelihood under fixed topics plus a Dirichlet(α + 1) log-prior. So: L never decreases from
one iteration to the next (EM), and the fixed point is the maximiser that scipy finds by a general optimiser.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import optimize

from kernels._batch import CSR
from kernels._pf_readout import fold_in_mean_field


def _objective(theta: np.ndarray, words: np.ndarray, counts: np.ndarray, phi: np.ndarray, alpha: float) -> float:
    return float(counts @ np.log(theta @ phi[:, words]) + alpha * np.log(theta).sum())


def _doc(words: list[int], counts: list[float]) -> CSR:
    return CSR(np.array([0, len(words)], np.int64), np.array(words, np.int64), np.array(counts, np.float64))


def _case(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    K, W = 4, 12
    phi = rng.dirichlet(np.full(W, 0.3), size=K)
    words = rng.choice(W, size=7, replace=False)
    counts = rng.integers(1, 6, size=7).astype(np.float64)
    return phi, words, counts


def test_each_iteration_raises_the_map_objective() -> None:
    phi, words, counts = _case(0)
    alpha = 0.1
    values = [
        _objective(fold_in_mean_field(_doc(words.tolist(), counts.tolist()), phi, alpha, it)[0], words, counts, phi,
                   alpha)
        for it in range(1, 30)
    ]  # fmt: skip
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(values))
    assert values[-1] > values[0]


def test_the_fixed_point_is_the_maximiser_a_general_optimiser_finds() -> None:
    for seed, alpha in [(1, 0.1), (2, 0.5), (3, 2.0)]:
        phi, words, counts = _case(seed)
        theta = fold_in_mean_field(_doc(words.tolist(), counts.tolist()), phi, alpha, 2000)[0]

        def minus(x: np.ndarray, case: tuple = (words, counts, phi, alpha)) -> float:
            t = np.exp(x - x.max())
            return -_objective(t / t.sum(), *case)

        best = optimize.minimize(minus, np.zeros(phi.shape[0]), method="Nelder-Mead",
                                 options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})  # fmt: skip
        ref = np.exp(best.x - best.x.max())
        ref /= ref.sum()
        assert np.isclose(theta.sum(), 1.0)
        assert np.allclose(theta, ref, atol=1e-4), (seed, theta, ref)
        assert _objective(theta, words, counts, phi, alpha) >= -best.fun - 1e-8


def test_an_empty_document_gets_the_prior_mean() -> None:
    phi, _, _ = _case(4)
    docs = CSR(np.array([0, 0], np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
    assert np.allclose(fold_in_mean_field(docs, phi, 0.1, 10), 1 / phi.shape[0])
