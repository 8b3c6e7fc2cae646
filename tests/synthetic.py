"""Synthetic corpora with planted topics, shared by the kernels' tests and the benchmarks.

One LDA draw (:func:`lda_documents`) makes every corpus here and ``benchmarks._corpus.lda_corpus``; one set of
criteria (:func:`planted_fit`) decides whether an online HDP recovered the block topics, for
``tests/test_ohdp.py`` and ``benchmarks/ohdp_speed.py --planted`` alike. This module is test support, not a test
(no ``test_`` prefix) and not shipped (``pyproject.toml`` packages ``kernels``, ``service`` and ``evaluation``
only): tests and benchmarks both run from the repository root, so both import it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linear_sum_assignment

Docs = list[tuple[NDArray[np.int64], NDArray[np.float64]]]


def lda_documents(
    rng: np.random.Generator, phi: NDArray[np.float64], n_docs: int, alpha: float, length: int, extra: float = 0.0
) -> Docs:
    """Documents drawn from LDA with topics φ (K × W): θ_d ~ Dirichlet(α), then N_d tokens from θ_d φ in one
    multinomial draw. N_d = ``length``, or with ``extra`` > 0, ``length`` + Poisson(``extra``) (drawn before θ_d).
    Documents are (word ids, counts) pairs, the ids ascending."""
    K = phi.shape[0]
    docs: Docs = []
    for _ in range(n_docs):
        n = length + rng.poisson(extra) if extra else length
        counts = rng.multinomial(n, rng.dirichlet(np.full(K, alpha)) @ phi)
        ids = np.flatnonzero(counts)
        docs.append((ids, counts[ids].astype(np.float64)))
    return docs


def block_topics_corpus(
    seed: int = 0, n_docs: int = 1500, K: int = 8, W: int = 240, length: int = 60, alpha: float = 0.2
) -> tuple[np.ndarray, Docs]:
    """(φ, documents): K topics, each with 98 % of its mass on its own block of W // K words (Dirichlet(0.5)
    within the block) and the rest spread over all words; each document draws θ ~ Dirichlet(α) and ``length``
    tokens from θφ (:func:`lda_documents`)."""
    rng = np.random.default_rng(seed)
    phi = np.full((K, W), 0.02 / W)
    for k in range(K):
        block = np.arange(k * (W // K), (k + 1) * (W // K))
        phi[k, block] += rng.dirichlet(np.full(block.size, 0.5)) * 0.98
    phi /= phi.sum(axis=1, keepdims=True)
    return phi, lda_documents(rng, phi, n_docs, alpha, length)


@dataclass(frozen=True)
class PlantedFit:
    """How a fitted model's topics stand against K planted ones (:func:`planted_fit`)."""

    planted: int  # K
    topics_used: int
    top_mass: float  # the mass of the K heaviest topics
    top_min: float  # the lightest of them
    next_weight: float  # the (K+1)-th heaviest
    min_cosine: float  # the worst cosine of the best one-to-one matching of the K heaviest to the planted

    @property
    def ok(self) -> bool:
        """The criteria of ``tests/test_ohdp.py::test_planted_topics_are_recovered`` (K = 8 block topics): K to
        K + 6 topics used, the K heaviest hold more than 75 % of the mass and each more than twice the next one,
        and each matches a planted topic with cosine above 0.95."""
        K = self.planted
        return (
            K <= self.topics_used <= K + 6
            and self.top_mass > 0.75
            and self.top_min > 2 * self.next_weight
            and self.min_cosine > 0.95
        )


def planted_fit(model: Any, phi_true: NDArray[np.float64]) -> PlantedFit:
    """Match ``model``'s K heaviest topics (``topic_weights``, ``topic_word``, ``topics_used``: the online HDPs)
    to the K planted rows of ``phi_true`` by cosine (Hungarian matching)."""
    K = phi_true.shape[0]
    w = model.topic_weights()
    top = np.argsort(-w)[:K]
    est = model.topic_word()[top]
    sim = (est / np.linalg.norm(est, axis=1, keepdims=True)) @ (
        phi_true / np.linalg.norm(phi_true, axis=1, keepdims=True)
    ).T
    r, c = linear_sum_assignment(-sim)
    return PlantedFit(
        planted=K,
        topics_used=int(model.topics_used()),
        top_mass=float(w[top].sum()),
        top_min=float(w[top].min()),
        next_weight=float(np.sort(w)[-(K + 1)]),
        min_cosine=float(sim[r, c].min()),
    )
