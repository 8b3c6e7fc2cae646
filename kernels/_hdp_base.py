"""What the two online HDP estimators share: settings, the minibatch loop, the sparse corpus step, read-outs.

:class:`kernels.ohdp.OnlineHDP` (collapsed, the service's ``ohdp``) and
:class:`kernels.ohdp_stick.StickBreakingHDP` (seed 004 as written) keep the W×K word–topic statistics G as
``scale_ · topic_stat_``, so that the step G := (1−ρ)G + ρĜ touches only the rows of the minibatch's words
(:func:`sparse_step`). Topic ids are the column indices of G and never move. Each estimator supplies its document
step (:meth:`OnlineHDPBase._documents`), its corpus stick (:meth:`OnlineHDPBase._update_sticks`,
:meth:`OnlineHDPBase._beta`, :meth:`OnlineHDPBase._gamma_posterior`) and its own state.

Learned concentrations (``learn_concentrations=True``, :mod:`kernels._concentration`): γ and α0 get Gamma
priors and Gamma posteriors q(γ), q(α0), held as (shape, rate) in the state; E_q[γ] and E_q[α0] replace the
fixed settings wherever the estimators read γ and α0. After each minibatch's corpus step, q(α0) takes the
natural-gradient step of the minibatch's size (ρ_t, or 1 − (1 − ρ_t)^(d/S) for d < S documents) toward the
minibatch's estimate of Eq. (C2)/(C3) scaled by D/S, and q(γ) is
set by the coordinate update (C1) from the corpus sticks. Both start at the fixed settings (mean γ, α0).

Streaming meaning of D: D is the ``window`` setting, the number of documents the statistics stand for (the seed
uses the corpus size). With ρ_t = max(ρ_min, (τ0 + t)^−κ) the statistics eventually become an exponential moving
average over about S/ρ_min documents; the defaults make the two agree (256 / 0.01 ≈ 25,000).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, NDArray

from ._base import Saved, TopicModel, check_interval, check_positive_int
from ._batch import Batch
from ._concentration import doc_log_aux
from ._schedule import StepSize

__all__ = ["CorpusStat", "Minibatch", "OnlineHDPBase", "local_slots", "sparse_step"]

# G = s·M; when s falls below this, M is multiplied by s and s reset to 1 (an O(W·K) pass, rare).
_RENORM_BELOW = 1e-30


class CorpusStat(NamedTuple):
    """The word–topic statistics G = ``scale``·``M`` (W×K), with ``msum[k]`` = Σ_w M_wk (K): the step scales G by
    changing ``scale`` and writes only the minibatch's rows of ``M`` (:func:`sparse_step`)."""

    M: NDArray[np.float64]
    msum: NDArray[np.float64]
    scale: float


@njit(cache=True, nogil=True)
def sparse_step(G: CorpusStat, rows: NDArray[np.int64], stat: NDArray[np.float64], rho: float, mult: float) -> float:
    """G := (1−ρ)G + ρ·mult·Ĝ, Ĝ = ``stat`` on the words ``rows`` (one row each), touching only those rows of
    ``G.M`` (Eq. 25 / SCVB0 Eq. 7; ``G.M`` and ``G.msum`` in place). Returns the new scale s."""
    M, msum, scale = G
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
def local_slots(word_ids: NDArray[np.int64], slot: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
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


class Minibatch(NamedTuple):
    """One minibatch as the document step sees it: the documents, their distinct words ``rows`` (first-seen
    order), each entry's index into them ``slots``; and what the step writes: Ĝ (``stat``, one row per distinct
    word) and the mixtures ``theta``; ``seen``: the documents the model had learned from before this one."""

    docs: Batch
    rows: NDArray[np.int64]
    slots: NDArray[np.int64]
    stat: NDArray[np.float64]
    theta: NDArray[np.float64]
    seen: int


@dataclass(eq=False, repr=False, kw_only=True)
class OnlineHDPBase(TopicModel):
    """Settings and corpus-level machinery of an online HDP with corpus truncation K = ``n_topics``.

    Shared settings (see :class:`kernels.ohdp.OnlineHDP` for their meaning): ``gamma``, ``alpha``, ``eta``,
    ``kappa``, ``tau0``, ``rho_floor``, ``batch_size``, ``window``, ``tol``, ``max_iter``,
    ``learn_concentrations``, ``gamma_shape``, ``gamma_rate``, ``alpha_shape``, ``alpha_rate``.
    """

    #: Both estimators' ``_set_state`` install every learned attribute (their tables :attr:`saved` list them all).
    _set_state_installs_all = True

    # ------------------------------------------------------------------ settings, stored by the dataclass ``__init__``
    gamma: float = 1.0
    alpha: float = 1.0
    eta: float = 0.01
    kappa: float = 0.6
    tau0: float = 64.0
    rho_floor: float = 0.01
    batch_size: int = 256
    window: int = 25_000
    tol: float = 1e-4
    max_iter: int = 100
    learn_concentrations: bool = False
    gamma_shape: float = 1.0
    gamma_rate: float = 1.0
    alpha_shape: float = 1.0
    alpha_rate: float = 1.0

    # Learned state (:meth:`_init_corpus_state`), shared by both estimators.
    topic_stat_: NDArray[np.float64] = field(init=False)
    topic_total_: NDArray[np.float64] = field(init=False)
    scale_: float = field(init=False)
    n_updates_: float = field(init=False)  # t of ρ_t: minibatches learned, one of d < S documents counting d/S
    last_doc_iters_: float = field(init=False)
    gamma_q_: NDArray[np.float64] = field(init=False)  # (shape, rate) of q(γ)
    alpha_q_: NDArray[np.float64] = field(init=False)  # (shape, rate) of q(α0)

    corpus_size_param: ClassVar[str | None] = "window"  # D (docs/ohdp.md, "Streaming meaning of D")

    #: The learned state both estimators' snapshots start with (each adds its own after it). Snapshots written
    #: before the concentrations could be learned lack q(γ), q(α0): they start at the settings, as a new model.
    saved: ClassVar[tuple[Saved, ...]] = (
        Saved("topic_stat_", shape=lambda K, W: (W, K)),
        Saved("topic_total_", shape=lambda K, W: (K,)),
        Saved("scale_"),
        Saved("n_updates_", float),  # an int in snapshots from before fractional steps
        Saved("last_doc_iters_"),
        Saved("gamma_q_", shape=lambda K, W: (2,), missing=lambda m: m._initial_q(m.gamma_shape, m.gamma)),
        Saved("alpha_q_", shape=lambda K, W: (2,), missing=lambda m: m._initial_q(m.alpha_shape, m.alpha)),
    )

    def _validate_params(self) -> None:
        if self.n_topics < 2:
            raise ValueError(f"n_topics must be at least 2 for the HDP truncation, got {self.n_topics!r}")
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
        if not isinstance(self.learn_concentrations, bool | np.bool_):
            raise ValueError(f"learn_concentrations must be a bool, got {self.learn_concentrations!r}")
        for name in ("gamma_shape", "gamma_rate", "alpha_shape", "alpha_rate"):
            check_interval(name, getattr(self, name), 0.0, low_open=True, high_open=True)
        self._schedule = StepSize(scale=1.0, tau=float(self.tau0), kappa=float(self.kappa), floor=float(self.rho_floor))

    def _corpus_stat(self) -> CorpusStat:
        """G = ``scale_``·``topic_stat_`` and ``topic_total_`` (the arrays themselves, no copy)."""
        return CorpusStat(self.topic_stat_, self.topic_total_, self.scale_)

    def _init_corpus_state(self, topic_stat: NDArray[np.float64]) -> None:
        """Start from the statistics G = ``topic_stat`` (W×K)."""
        self.topic_stat_ = np.ascontiguousarray(topic_stat)
        self.topic_total_ = self.topic_stat_.sum(axis=0)
        self.scale_ = 1.0
        self.n_updates_ = 0.0
        self.last_doc_iters_ = 0.0
        self._init_concentrations()

    def _init_concentrations(self) -> None:
        """q(γ), q(α0) with the prior's shape and the mean of the fixed settings: learning starts from them."""
        self.gamma_q_ = self._initial_q(self.gamma_shape, self.gamma)
        self.alpha_q_ = self._initial_q(self.alpha_shape, self.alpha)

    @staticmethod
    def _initial_q(shape: float, mean: float) -> NDArray[np.float64]:
        """(shape, rate) of a Gamma with this shape and mean."""
        return np.array([float(shape), float(shape) / float(mean)])

    def _gamma(self) -> float:
        """The γ in use: E_q[γ] when learned, else the setting."""
        if self.learn_concentrations:
            return float(self.gamma_q_[0] / self.gamma_q_[1])
        return float(self.gamma)

    def _alpha(self) -> float:
        """The α0 in use: E_q[α0] when learned, else the setting."""
        if self.learn_concentrations:
            return float(self.alpha_q_[0] / self.alpha_q_[1])
        return float(self.alpha)

    def _doc_log_aux(self, docs: Batch) -> float:
        """The rate term of (C2) for ``docs`` (collapsed document level), only computed when learning."""
        if not self.learn_concentrations:
            return 0.0
        return doc_log_aux(docs.indptr, docs.counts, self._alpha())

    # ------------------------------------------------------------------ estimator hooks
    @abc.abstractmethod
    def _documents(self, mb: Minibatch, update: bool) -> tuple[int, NDArray[np.float64], tuple[float, float]]:
        """The document step over a minibatch: fill ``mb.theta``, add Ĝ to ``mb.stat``. Returns (total
        iterations, the statistics of the corpus stick for :meth:`_update_sticks`, the minibatch's (shape,
        rate) terms of q(α0), Eq. (C2) or (C3) of :mod:`kernels._concentration`, unscaled)."""

    @abc.abstractmethod
    def _update_sticks(self, stick_stat: NDArray[np.float64], rho: float, mult: float) -> None:
        """The corpus stick's step of size ρ, ``mult`` = D/S."""

    @abc.abstractmethod
    def _beta(self) -> NDArray[np.float64]:
        """E[β] over the public topic ids."""

    @abc.abstractmethod
    def _gamma_posterior(self) -> tuple[float, float]:
        """(shape, rate) of q(γ) from the corpus sticks, Eq. (C1) of :mod:`kernels._concentration`."""

    # ------------------------------------------------------------------ learning
    def _rho(self, t: float) -> float:
        return self._schedule(float(t))

    def _partial_fit(self, batch: Batch) -> NDArray[np.float64]:
        return self._minibatches(batch, update=True)

    def _transform(self, batch: Batch) -> NDArray[np.float64]:
        return self._minibatches(batch, update=False)

    def _minibatches(self, batch: Batch, *, update: bool) -> NDArray[np.float64]:
        theta = np.empty((batch.n_docs, self.n_topics))
        S = int(self.batch_size)
        slot = np.full(self.n_words, -1, dtype=np.int64)
        for d0 in range(0, batch.n_docs, S):
            d1 = min(batch.n_docs, d0 + S)
            seen = int(self.n_docs_seen_) + (d0 if update else 0)
            theta[d0:d1] = self._minibatch(batch.slice(d0, d1), slot, seen, update=update)
        return theta

    def _minibatch(self, docs: Batch, slot: NDArray[np.int64], seen: int, *, update: bool) -> NDArray[np.float64]:
        K = int(self.n_topics)
        rows, slots = local_slots(docs.word_ids, slot)
        mb = Minibatch(docs, rows, slots, np.zeros((rows.shape[0], K)), np.empty((docs.n_docs, K)), seen)
        iters, stick_stat, alpha_stat = self._documents(mb, update)
        if not update:
            return mb.theta
        self.last_doc_iters_ = iters / max(1, docs.n_docs)
        if docs.word_ids.shape[0] == 0:
            return mb.theta
        # A minibatch of d < S documents (a quiet stream makes batches of a few articles) counts as d/S of a
        # step: ρ = 1 − (1 − ρ_t)^(d/S) and t moves by d/S, so S/d such minibatches forget as much as one of S.
        # With a whole step each, a night of one-article batches kept only the last ~1/ρ articles (at ρ's
        # floor of 0.01, a hundred) instead of the window.
        share = min(1.0, docs.n_docs / float(self.batch_size))
        rho = 1.0 - (1.0 - self._rho(self.n_updates_)) ** share
        mult = float(self.window) / docs.n_docs  # D/S
        self.scale_ = sparse_step(self._corpus_stat(), rows, mb.stat, rho, mult)
        self._update_sticks(stick_stat, rho, mult)
        if self.learn_concentrations:
            self._learn_concentrations(alpha_stat, rho, mult)
        self.n_updates_ += share
        return mb.theta

    def _learn_concentrations(self, alpha_stat: tuple[float, float], rho: float, mult: float) -> None:
        """q(α0): natural parameters (shape − 1, −rate) move by ρ toward the prior plus ``mult`` = D/S times the
        minibatch's terms of (C2)/(C3); q(γ): the coordinate update (C1) from the sticks just updated."""
        target = np.array([self.alpha_shape + mult * alpha_stat[0], self.alpha_rate + mult * alpha_stat[1]])
        self.alpha_q_ = (1.0 - rho) * self.alpha_q_ + rho * target
        self.gamma_q_ = np.array(self._gamma_posterior(), dtype=np.float64)

    # ------------------------------------------------------------------ read-outs
    def topic_word(self) -> NDArray[np.float64]:
        """E[φ_k] = λ_k / Σ_w λ_kw (stick-breaking) or φ̂_k = (N^Φ_k + η)/(N^Z_k + Wη) (collapsed): one formula."""
        lam = np.multiply(self.topic_stat_.T, self.scale_, order="C")  # one K×W array in row order, as SCVB0's
        lam += float(self.eta)
        lam /= lam.sum(axis=1, keepdims=True)
        return lam

    def topic_weights(self) -> NDArray[np.float64]:
        """Corpus-level weights E[β], indexed by the stable public topic ids."""
        beta = self._beta()
        return beta / beta.sum()

    def token_shares(self) -> NDArray[np.float64]:
        """Each topic's share of the tokens in G (Σ_w G_wk over Σ G). E[β] follows the expected tables, and a topic
        whose subject left the stream can keep a table in most documents from stray words (a review's run: E[β]
        0.07–0.11 for 80,000 documents after its subject left, on 1.2–1.7 % of the tokens)."""
        total = np.maximum(self.topic_total_, 0.0)
        whole = float(total.sum())
        if not whole > 0:
            return np.full(int(self.n_topics), 1.0 / int(self.n_topics))
        return total / whole

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
            "gamma": self._gamma(),
            "alpha": self._alpha(),
        }
