"""The seed's online HDP as written: stick-breaking online variational Bayes (Wang, Paisley & Blei, AISTATS 2011;
seed 004), kept for comparison with the collapsed :class:`kernels.ohdp.OnlineHDP` (``docs/ohdp.md``).

Sethuraman's stick-breaking construction, document-level coordinate ascent over (a, b, φ, ζ) (Eqs. 15–18) until
the document's variational objective converges, then a natural-gradient step on the corpus-level parameters
(λ, u, v) from a minibatch (Eqs. 22–27, with the D/S scaling). λ = η + G (Eq. 22), with G the statistics of
:mod:`kernels._hdp_base`. Measured in one pass it collapses onto a handful of generic topics (``docs/ohdp.md``);
nothing of it is tuned. Not registered in :data:`kernels.ALGORITHMS`: the service does not offer it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._base import Saved, TopicModel, check_positive_int
from ._batch import CSR
from ._concentration import stick_log_rest
from ._hdp_base import CorpusStat, Minibatch, OnlineHDPBase
from ._special import digamma, lgamma

__all__ = ["StickBreakingHDP"]


class DocStep(NamedTuple):
    """The settings of the document step: the prior α0 of the document sticks and its stop test (``tol`` on the
    relative change of the document's objective, at most ``max_iter`` iterations)."""

    alpha: float
    tol: float
    max_iter: int


class Expect(NamedTuple):
    """What the document step reads of the corpus level: ``elog[n, k]`` = E_q[log p(w_n | φ_k)] (one row per
    distinct word) and ``elogbeta[k]`` = E_q[log β_k]."""

    elog: NDArray[np.float64]
    elogbeta: NDArray[np.float64]


class DocQ(NamedTuple):
    """One document's variational parameters, written in place: ζ (U×T), φ (T×K) and the sticks (a, b)
    (T−1 each)."""

    zeta: NDArray[np.float64]
    phi: NDArray[np.float64]
    a: NDArray[np.float64]
    b: NDArray[np.float64]


class Stats(NamedTuple):
    """What the document step of a minibatch adds up: ``stat[u, k] += Σ_t φ_tk ζ_nt c_n`` (Eq. 22, one row per
    distinct word), ``stat_c[k] += Σ_t φ_tk`` (Eqs. 23–24), and writes: each document's mixture ``theta``."""

    stat: NDArray[np.float64]
    stat_c: NDArray[np.float64]
    theta: NDArray[np.float64]


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
def _softmax(row: NDArray[np.float64], out: NDArray[np.float64]) -> float:
    """``out`` := exp(``row``) normalised over the first ``len(out)`` entries (shifted by their maximum, so that
    nothing overflows), the update of φ (Eq. 17) and of ζ (Eq. 18). Returns log Σ exp(``row``), the block's
    contribution to the document's objective."""
    n = out.shape[0]
    mx = -np.inf
    for i in range(n):
        if row[i] > mx:
            mx = row[i]
    tot = 0.0
    for i in range(n):
        e = np.exp(row[i] - mx)
        out[i] = e
        tot += e
    for i in range(n):
        out[i] /= tot
    return mx + np.log(tot)


@njit(cache=True, nogil=True)
def _stick_doc(cnts: NDArray[np.float64], ex: Expect, step: DocStep, q: DocQ, trace: NDArray[np.float64]) -> int:
    """Document-level coordinate ascent of the seed, Eqs. 15–18, for one document (clumped: one ζ row per
    distinct word, weighted by its count, which is exact because equal tokens get equal ζ).

    ``ex.elog[n, k]`` = E_q[log p(w_n | φ_k)] = ψ(λ_kw) − ψ(Σ_w λ_kw); ``ex.elogbeta`` = E_q[log β_k].
    Start: ζ uniform, (a, b) = (1, α0) (the prior, α0 = ``step.alpha``). Each iteration, in this order:

    * Eq. 17: φ_tk ∝ exp(Σ_n c_n ζ_nt E[log p(w_n|φ_k)] + E[log β_k]);
    * Eq. 18: ζ_nt ∝ exp(Σ_k φ_tk E[log p(w_n|φ_k)] + E[log π_t]);
    * Eqs. 15–16: a_t = 1 + Σ_n c_n ζ_nt, b_t = α0 + Σ_n c_n Σ_{s>t} ζ_ns (t < T);

    then the document's objective L_j (Eq. 14 without the corpus terms) is evaluated; the loop stops when its
    relative change is below ``step.tol`` or after ``step.max_iter`` iterations. Every step maximises L_j exactly
    in its block, so L_j never decreases. ``trace[i]`` receives L_j after iteration i (if long enough). Outputs
    ``q`` (ζ, φ, a, b) in place; returns the number of iterations.
    """
    elog, elogbeta = ex
    alpha, tol, max_iter = step
    zeta, phi, a, b = q
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
            for k in range(K):
                s = elogbeta[k]
                for n in range(U):
                    s += cnts[n] * zeta[n, t] * elog[n, k]
                row[k] = s
            lz = _softmax(row, phi[t])
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
            for t in range(T):
                row[t] = B[n, t] + elogpi[t]
            # Σ_t ζ (B + E log π − log ζ) = log Σ_t exp(B + E log π) at the optimum
            l_wz += cnts[n] * _softmax(row, zeta[n])
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
def _stick_batch(docs: CSR, ex: Expect, step: DocStep, T: int, out: Stats) -> tuple[int, float]:
    """Eqs. 15–18 for each document of a minibatch, accumulating the sufficient statistics of Eqs. 22–24.

    ``docs.ids`` are the entries' slots: their rows of ``ex.elog`` / ``out.stat`` (the minibatch's distinct
    words). ``stat[u, k] += Σ_t φ_tk ζ_nt c_n`` (Eq. 22) and ``stat_c[k] += Σ_t φ_tk`` (Eqs. 23–24; the tail
    sums of Eq. 24 are taken later). ``theta[d, k] = Σ_t E[π_t] φ_tk`` (the document's mixture over corpus
    topics, T = the document truncation); an empty document's row is left to the caller (it gets E[β]). Returns
    the total number of coordinate-ascent iterations and −Σ_j Σ_t E[log(1 − π'_jt)] over the non-empty documents
    (the rate term of q(α0), Eq. C3 of :mod:`kernels._concentration`).
    """
    indptr, slots, counts = docs
    elog_local, elogbeta = ex
    stat, stat_c, theta = out
    K = elog_local.shape[1]
    n_docs = indptr.shape[0] - 1
    phi = np.empty((T, K))
    a = np.empty(T - 1)
    b = np.empty(T - 1)
    trace = np.empty(0)
    total_it = 0
    rest = 0.0
    for d in range(n_docs):
        lo = indptr[d]
        hi = indptr[d + 1]
        U = hi - lo
        if U == 0:
            continue  # no tokens: the caller gives the document the prior mean E[β]
        elog = np.empty((U, K))
        for n in range(U):
            elog[n, :] = elog_local[slots[lo + n]]
        zeta = np.empty((U, T))
        cnts = counts[lo:hi]
        total_it += _stick_doc(cnts, Expect(elog, elogbeta), step, DocQ(zeta, phi, a, b), trace)
        rest += stick_log_rest(a, b)
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
    return total_it, rest


@njit(cache=True, nogil=True)
def _elog_rows(G: CorpusStat, rows: NDArray[np.int64], eta: float) -> NDArray[np.float64]:
    """E_q[log φ_kw] = ψ(λ_kw) − ψ(Σ_w λ_kw) for the given words, with λ = η + G = η + s·M (below Eq. 21)."""
    M, msum, scale = G
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


@dataclass(eq=False, repr=False, kw_only=True)
class StickBreakingHDP(OnlineHDPBase):
    """Seed 004's online variational HDP with corpus truncation K = ``n_topics``, ``algorithm = "ohdp-stick"``.

    Parameters are those of :class:`kernels.ohdp.OnlineHDP` (``seed`` draws the initial topics, λ = η +
    Gamma(1, 1)·D·100/(K·W), the paper's code's draw above the prior; ``tol`` is the relative change of the document's
    objective; ``max_iter`` caps its coordinate-ascent iterations), without ``sequential``, ``settle_docs`` and
    ``settled_tol``, and:

    doc_topics : int
        Document-level truncation T (seed: 15).

    With ``learn_concentrations``, q(γ) follows Eq. C1 from the corpus sticks (u, v) after each step, and
    q(α0) Eq. C3 from the document sticks (a, b) (:mod:`kernels._concentration`); E_q[γ] enters Eq. 24.
    """

    algorithm: ClassVar[str] = "ohdp-stick"
    #: Only K, W and the seed are fixed on a restored model: they size the state (the seed drew the initial λ).
    #: γ, α0, η enter each update afresh, the schedule is evaluated at the stored update count, and
    #: ``doc_topics``, ``tol``, ``max_iter``, ``batch_size`` and ``window`` shape only the document step and
    #: future updates.
    restore_fixed: ClassVar[frozenset[str]] = TopicModel.restore_fixed

    #: The learned state: the corpus statistics (:attr:`OnlineHDPBase.saved`), then the corpus sticks (u, v).
    saved: ClassVar[tuple[Saved, ...]] = (
        *OnlineHDPBase.saved,
        Saved("stick_u_", shape=lambda K, W: (K - 1,)),
        Saved("stick_v_", shape=lambda K, W: (K - 1,)),
    )

    # Settings of this estimator (those both online HDPs take come first: :class:`OnlineHDPBase`).
    doc_topics: int = 15

    stick_u_: NDArray[np.float64] = field(init=False)
    stick_v_: NDArray[np.float64] = field(init=False)

    def _validate_params(self) -> None:
        check_positive_int("doc_topics", self.doc_topics)
        if self.doc_topics < 2:
            raise ValueError(f"doc_topics must be at least 2, got {self.doc_topics!r}")
        super()._validate_params()

    def _init_state(self) -> None:
        K, W = int(self.n_topics), int(self.n_words)
        # The paper's code (and gensim) draws λ ~ Gamma(1, 1)·D·100/(K·W); we store G = λ − η, so G gets the draw
        # and λ = η + G (a difference of η, 0.01, against draws of order D·100/(K·W)).
        self._init_corpus_state(self.rng_.gamma(1.0, 1.0, (W, K)) * (float(self.window) * 100.0 / (K * W)))
        # (u, v) of q(β'_k), k < K (Eq. 13), at the prior (1, γ).
        self.stick_u_ = np.ones(K - 1)
        self.stick_v_ = np.full(K - 1, float(self.gamma))

    def _documents(self, mb: Minibatch, update: bool) -> tuple[int, NDArray[np.float64], tuple[float, float]]:
        stat_c = np.zeros(int(self.n_topics))
        ex = Expect(
            _elog_rows(self._corpus_stat(), mb.rows, float(self.eta)),
            _expect_log_sticks(self.stick_u_, self.stick_v_),
        )
        step = DocStep(self._alpha(), float(self.tol), int(self.max_iter))
        docs = CSR(mb.docs.indptr, mb.slots, mb.docs.counts)
        iters, rest = _stick_batch(docs, ex, step, int(self.doc_topics), Stats(mb.stat, stat_c, mb.theta))
        mb.theta[np.diff(mb.docs.indptr) == 0] = self._beta()
        n_docs = int(np.count_nonzero(np.diff(mb.docs.indptr)))
        return iters, stat_c, (float(n_docs * (int(self.doc_topics) - 1)), rest)  # (C3)

    def _update_sticks(self, stick_stat: NDArray[np.float64], rho: float, mult: float) -> None:
        """Eqs. 23–24 and 26–27; Eq. 24's Σ_{l>k} is a tail sum of Σ_t φ_tl."""
        K = int(self.n_topics)
        tail = np.cumsum(stick_stat[::-1])[::-1]
        self.stick_u_ = (1.0 - rho) * self.stick_u_ + rho * (1.0 + mult * stick_stat[: K - 1])
        self.stick_v_ = (1.0 - rho) * self.stick_v_ + rho * (self._gamma() + mult * tail[1:])

    def _beta(self) -> NDArray[np.float64]:
        return _stick_means(self.stick_u_, self.stick_v_)

    def _gamma_posterior(self) -> tuple[float, float]:
        """(C1): one coordinate step from the corpus sticks q(β'_k) = Beta(u_k, v_k)."""
        K = int(self.n_topics)
        return float(self.gamma_shape) + K - 1.0, float(self.gamma_rate) + stick_log_rest(self.stick_u_, self.stick_v_)

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {"batch_size": 8, "window": 200, "max_iter": 20, "doc_topics": 4}
