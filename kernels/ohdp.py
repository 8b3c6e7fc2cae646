"""Online HDP topic model (the service's ``ohdp``): streaming, one pass, constant memory, stable topic ids.

A collapsed, zero-order (CVB0) treatment of the HDP after Sato, Kurihara & Nakagawa, "Practical collapsed
variational Bayes inference for hierarchical Dirichlet process" (KDD 2012), run stochastically like SCVB0 (seed
000). The topics are collapsed: a document's word–topic responsibilities are γ_wk ∝ φ̂_kw (N_jk^{¬w} + α0 β_k)
with φ̂_kw = (N_wk + η)/(N_k + Wη) held fixed during the document; the corpus stick β is the posterior mean of
the top-level stick given the expected number of "tables" per topic (E[m_jk], Sato et al.), with the sticks
ordered by size (the size-biased order of the GEM prior). New topics are *born* from the remaining stick: an
empty topic explains every word with φ̂ = 1/W, so a document whose words the existing topics explain badly opens
one. Inside a minibatch, documents see the raw counts and tables of the documents processed before them (as the
sequential first sweep of a collapsed sampler does), so topics are born at the data's own scale rather than all
at once. The W×K statistics G = N^Φ, the step size and the window D are those of :mod:`kernels._hdp_base`.

The seed's own algorithm (Wang, Paisley & Blei 2011, seed 004: stick-breaking online variational Bayes) is
:class:`kernels.ohdp_stick.StickBreakingHDP`; ``docs/ohdp.md`` compares the two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, NDArray

from ._base import EXACT_FASTMATH, StateValue, TopicModel, state_array
from ._concentration import gamma_fixed_point
from ._hdp_base import Minibatch, OnlineHDPBase
from ._moves import Columns, birth_column, birth_counts, delete_column, merge_columns, split_column
from ._special import digamma

__all__ = ["OnlineHDP"]

# Constructor arguments of snapshots written while this class also held the stick-breaking variant
# (``inference="collapsed"``, and ``doc_topics``, which only that variant read).
_LEGACY_PARAMS = ("inference", "doc_topics")


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


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
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
        for k in range(K):
            gam[n, k] = phat[n, k] * prior[k]
        tot = _sum4(gam[n])
        c = cnts[n]
        ntot += c
        for k in range(K):
            gam[n, k] /= tot
            nj[k] += c * gam[n, k]
    g = np.empty(K)
    change = np.empty(K)
    it = 0
    while it < max_iter:
        it += 1
        delta = 0.0
        for n in range(U):
            c = cnts[n]
            own = min(c, 1.0)
            for k in range(K):
                v = nj[k] - own * gam[n, k]
                if v < 0.0:
                    v = 0.0
                g[k] = phat[n, k] * (v + prior[k])
            tot = _sum4(g)
            for k in range(K):
                x = g[k] / tot
                dx = x - gam[n, k]
                change[k] = abs(dx)
                nj[k] += c * dx
                gam[n, k] = x
            delta += c * _sum4(change)
        if delta <= tol * ntot:
            break
    return it


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
def _sum4(x: NDArray[np.float64]) -> float:  # pragma: no cover (compiled)
    """Σ x in four interleaved partial sums: in a fixed order (bit-for-bit reproducible, which a sum that fast-math
    may reassociate is not; see ``EXACT_FASTMATH``) and without one long chain of dependent additions."""
    n = x.shape[0]
    s0 = s1 = s2 = s3 = 0.0
    k = 0
    while k + 4 <= n:
        s0 += x[k]
        s1 += x[k + 1]
        s2 += x[k + 2]
        s3 += x[k + 3]
        k += 4
    while k < n:
        s0 += x[k]
        k += 1
    return (s0 + s1) + (s2 + s3)


# log(1 − x) by its series below this x (see ``_cvb_batch``): through x⁸, the first term left out is below
# x⁹/9 ≤ 2⁻⁶³/9, i.e. < 1e-18 relative to |log(1 − x)| ≥ x, under the rounding of ``np.log1p`` itself.
_SERIES_BELOW = 1.0 / 128.0


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
def _log1m_series(x: float) -> float:  # pragma: no cover (compiled)
    """log(1 − x) = −x (1 + x/2 + x²/3 + … + x⁷/8) + O(x⁹), for 0 ≤ x < ``_SERIES_BELOW`` (Horner form)."""
    s = 1.0 / 7.0 + x * 0.125
    s = 0.2 + x * (1.0 / 6.0 + x * s)
    s = 1.0 / 3.0 + x * (0.25 + x * s)
    return -x * (1.0 + x * (0.5 + x * s))


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
def _add_doc(
    gam: NDArray[np.float64],
    cnts: NDArray[np.float64],
    slots: NDArray[np.int64],
    stat: NDArray[np.float64],
    run_tot: NDArray[np.float64],
    logp0: NDArray[np.float64],
    prod: NDArray[np.float64],
    buf: NDArray[np.float64],
) -> None:  # pragma: no cover (compiled)
    """Add a finished document to Ĝ (``stat[slots[n]] += c_n γ_n``, ``run_tot`` its column sums) and write
    ``logp0[k]`` = log P(n_jk = 0) = Σ_n c_n log(1 − γ_nk) (Sato et al. 2012), γ clipped at 1 − 10⁻¹².

    log(1 − γ) costs a ``log1p`` per entry if done plainly, more than a sweep of :func:`_cvb_doc`, so: below
    ``_SERIES_BELOW`` (nearly all entries: a word's mass sits on a few topics) by :func:`_log1m_series`, to
    rounding; at or above it, for words seen once (most rows), as a running product of (1 − γ) per topic
    whose log is taken once per document (relative error ≤ 2⁻⁵³ per factor, i.e. ≤ 1.5·10⁻¹⁴ of its
    |log(1 − γ)| ≥ 1/128); for the other rows by ``log1p``. The products are folded into ``logp0`` every 16
    rows (each factor ≥ 10⁻¹², so they stay far above the smallest double).
    """
    U = gam.shape[0]
    K = gam.shape[1]
    for k in range(K):
        logp0[k] = 0.0
        prod[k] = 1.0
    for n in range(U):
        c = cnts[n]
        grow = gam[n]
        srow = stat[slots[n]]
        if c == 1.0:
            for k in range(K):
                x = grow[k]
                srow[k] += x
                run_tot[k] += x
                small = x < _SERIES_BELOW
                logp0[k] += _log1m_series(x) if small else 0.0
                prod[k] *= 1.0 if small else 1.0 - min(x, 1.0 - 1e-12)
        else:
            big = 0
            for k in range(K):
                x = grow[k]
                cx = c * x
                srow[k] += cx
                run_tot[k] += cx
                buf[k] = _log1m_series(x)  # replaced below where x ≥ _SERIES_BELOW
                if x >= _SERIES_BELOW:
                    big += 1
            if big > 0:
                for k in range(K):
                    x = grow[k]
                    if x >= _SERIES_BELOW:
                        buf[k] = np.log1p(-min(x, 1.0 - 1e-12))
            for k in range(K):
                logp0[k] += c * buf[k]
        if n % 16 == 15 or n == U - 1:
            for k in range(K):
                if prod[k] < 1.0:
                    logp0[k] += np.log(prod[k])
                    prod[k] = 1.0


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
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

    Cost: per document O(sweeps · U·K) for :func:`_cvb_doc` and O(U·K) for φ̂, Ĝ and P(n_jk = 0), plus O(K)
    digammas and (if ``sequential``) an O(K log K) sort for β. log(1 − γ) is summed for P(n_jk = 0) by its
    Taylor series where γ < 1/128 (nearly all of the U×K entries: a word's mass sits on a few topics), so only
    the few larger entries call ``log1p``, which would otherwise cost more than several sweeps.
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
    buf = np.empty(K)
    prod = np.empty(K)
    cur = base_tables.copy()
    u_max = 0
    for d in range(n_docs):
        u_max = max(u_max, indptr[d + 1] - indptr[d])
    phat_all = np.empty((u_max, K))  # one buffer for every document (U_j ≤ u_max rows used)
    gam_all = np.empty((u_max, K))
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
        phat = phat_all[:U]
        for n in range(U):
            u = slots[lo + n]
            prow = phat[n]
            brow = base[u]
            if sequential:
                srow = stat[u]
                for k in range(K):
                    prow[k] = (brow[k] + srow[k] + eta) * inv[k]
            else:
                for k in range(K):
                    prow[k] = (brow[k] + eta) * inv[k]
        gam = gam_all[:U]
        cnts = counts[lo:hi]
        total_it += _cvb_doc(cnts, phat, prior, tol, max_iter, gam, nj)
        # Ĝ += c·γ, and the expected tables, Sato et al. (2012): E[m_jk] ≈ P(n_jk > 0) · α0β_k (ψ(α0β_k +
        # E[n_jk | n_jk > 0]) − ψ(α0β_k)), with P(n_jk = 0) = Π_n (1 − γ_nk)^{c_n}. (Plugging E[n_jk] straight
        # into the Antoniak mean counts a whole table for any sliver of mass, which flattens β over the whole
        # truncation.)
        _add_doc(gam, cnts, slots[lo:hi], stat, run_tot, logp0, prod, buf)
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


class OnlineHDP(OnlineHDPBase):
    """Online hierarchical Dirichlet process topic model with corpus truncation K = ``n_topics`` (collapsed).

    Parameters
    ----------
    n_topics : int
        Corpus-level truncation K (the seed uses 150). Topics carrying mass are counted by ``topics_used``.
    n_words : int
        Vocabulary size W.
    seed : int
        Seed of ``rng_`` (the order in which free topic ids are handed to new topics).
    gamma : float
        Corpus-level concentration γ (seed: 1); with ``learn_concentrations``, where learning starts.
    alpha : float
        Document-level concentration α0 (seed: 1); with ``learn_concentrations``, where learning starts.
    eta : float
        Topic Dirichlet η (seed: 0.01).
    kappa, tau0 : float
        ρ_t = (τ0 + t)^−κ (seed: κ = 0.6, τ0 = 64); t counts internal minibatches.
    rho_floor : float
        ρ_min: the step never falls below it, so a stream keeps being followed (memory ≈ 1/ρ_min minibatches).
    batch_size : int
        Internal minibatch size S (seed: 256); a ``partial_fit`` batch is split into minibatches of this size.
    window : int
        D, the number of documents the statistics stand for (the D/S scaling of the seed's Eqs. 22–24); in a
        stream, the last ``window`` documents. ``batch_size / rho_floor`` is the matching memory of the schedule.
    tol : float
        Document convergence tolerance: L1 change of the responsibilities per token.
    max_iter : int
        Cap on document-level sweeps.
    sequential : bool
        Later documents of a minibatch see the raw counts of earlier ones (topic births at the data's scale).
    learn_concentrations : bool
        Learn γ and α0 online (:mod:`kernels._concentration`: q(γ) by Eq. C1 on the collapsed sticks, q(α0) by
        Eq. C2 with the expected tables, a natural-gradient step of size ρ_t) instead of keeping the settings.
    gamma_shape, gamma_rate, alpha_shape, alpha_rate : float
        Gamma(shape, rate) priors of γ and α0 (read only with ``learn_concentrations``).
    """

    algorithm: ClassVar[str] = "ohdp"
    #: Only K, W and the seed are fixed on a restored model: they size the state and draw ``topic_rank``. Every
    #: other setting can change: γ, α0, η enter each update and read-out afresh (learned γ, α0 are state), the
    #: schedule (κ, τ0, ρ_min) is evaluated at the stored update count, and ``tol``, ``max_iter``,
    #: ``sequential``, ``batch_size``, ``window`` and the concentrations' priors shape only the document step and
    #: future updates.
    restore_fixed: ClassVar[frozenset[str]] = TopicModel.restore_fixed
    _set_state_installs_all = True

    @classmethod
    def state_bytes(cls, n_topics: int, n_words: int, **params: Any) -> int:
        """``topic_stat`` (W×K), ``topic_total``, the tables and ``topic_rank`` (K each), q(γ) and q(α0) (2 each),
        8 bytes each."""
        K, W = int(n_topics), int(n_words)
        return 8 * (W * K + 3 * K + 4)

    sequential: bool
    tables_: NDArray[np.float64]
    topic_rank_: NDArray[np.int64]

    def __init__(self, n_topics: int, n_words: int, seed: int = 0, *, sequential: bool = True, **settings: Any) -> None:
        """``settings``: those both online HDPs take (:class:`kernels._hdp_base.OnlineHDPBase`)."""
        super().__init__(n_topics, n_words, seed, sequential=sequential, **settings)

    def _validate_params(self) -> None:
        super()._validate_params()
        if not isinstance(self.sequential, bool | np.bool_):
            raise ValueError(f"sequential must be a bool, got {self.sequential!r}")

    def _init_state(self) -> None:
        K, W = int(self.n_topics), int(self.n_words)
        self._init_corpus_state(np.zeros((W, K)))
        self.tables_ = np.zeros(K)  # Σ_j E[m_jk]: the expected tables per topic, the corpus stick's statistics
        # The order in which free topic ids are handed to new topics.
        self.topic_rank_ = self.rng_.permutation(K).astype(np.int64)

    def _documents(self, mb: Minibatch, update: bool) -> tuple[int, NDArray[np.float64], tuple[float, float]]:
        tables = np.zeros(int(self.n_topics))
        alpha = self._alpha()
        iters = _cvb_batch(
            mb.docs.indptr,
            mb.slots,
            mb.docs.counts,
            self.topic_stat_[mb.rows] * self.scale_,
            self.topic_total_ * self.scale_,
            float(self.eta),
            int(self.n_words),
            self.tables_,
            self.topic_rank_,
            alpha,
            self._gamma(),
            float(self.tol),
            int(self.max_iter),
            bool(self.sequential) and update,
            mb.stat,
            tables,
            mb.theta,
        )
        # (C2): Σ_j E[m_j] = the minibatch's expected tables; Σ_j −E[log w_j] at the α0 the step used
        return iters, tables, (float(tables.sum()), self._doc_log_aux(mb.docs))

    def _update_sticks(self, stick_stat: NDArray[np.float64], rho: float, mult: float) -> None:
        self.tables_ = (1.0 - rho) * self.tables_ + rho * mult * stick_stat

    def _beta(self) -> NDArray[np.float64]:
        return _beta_from_tables(self.tables_, self.topic_rank_, self._gamma())

    def _gamma_posterior(self) -> tuple[float, float]:
        """(C1) at its joint fixed point with the collapsed sticks Beta(1 + m_(k), γ + Σ_{l>k} m_(l))."""
        return gamma_fixed_point(self.tables_, float(self.gamma_shape), float(self.gamma_rate))

    # ------------------------------------------------------------------ persistence
    @classmethod
    def params_from_state(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """The settings of a stored state, also one written while this class held the stick-breaking variant:
        its ``inference="collapsed"`` and ``doc_topics`` are dropped; a stick-breaking state is refused."""
        params = dict(params)
        if params.get("inference", "collapsed") != "collapsed":
            raise ValueError(
                f"state is of the {params['inference']!r} HDP variant: load it with "
                "kernels.ohdp_stick.StickBreakingHDP.from_state"
            )
        for name in _LEGACY_PARAMS:
            params.pop(name, None)
        return params

    def _get_state(self) -> dict[str, StateValue]:
        # Key names of the snapshot layout shared with earlier versions (tables under "stick_u", an empty
        # "stick_v"), so that snapshots load in both directions.
        return {
            **self._get_corpus_state(),
            "stick_u": self.tables_.copy(),
            "stick_v": np.zeros(0),
            "topic_rank": self.topic_rank_.copy(),
        }

    def _set_state(self, state: dict[str, StateValue]) -> None:
        K = int(self.n_topics)
        self._set_corpus_state(state)
        self.tables_ = state_array(state, "stick_u", (K,))  # the expected tables
        rank = state_array(state, "topic_rank", (K,), np.int64)
        if sorted(rank.tolist()) != list(range(K)):
            raise ValueError("topic_rank must be a permutation of the topic ids")
        self.topic_rank_ = rank

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {"batch_size": 8, "window": 200, "max_iter": 20}

    # ------------------------------------------------------------------ topic moves (kernels.hygiene)
    def _columns(self) -> Columns:
        """N^Φ = s·M with Σ_w M_wk as its totals, as the moves of ``kernels._moves`` take them."""
        return Columns(self.topic_stat_, self.topic_total_, 1.0, self.scale_)

    def merge_topics(self, into: int, src: int) -> None:
        """Merge topic ``src`` into ``into``: N^Φ columns, N^Z and expected tables added (the tables of the
        merged topic are an upper bound: two tables in one document now serve one topic)."""
        merge_columns(self._columns(), into, src)
        self.tables_[into] += self.tables_[src]
        self.tables_[src] = 0.0

    def delete_topic(self, k: int) -> None:
        """Empty topic ``k``: its tokens go to the others by responsibility (``kernels._moves.delete_column``),
        its expected tables in the same proportion, so β's total table count is unchanged."""
        got = delete_column(self._columns(), float(self.eta), self.topic_weights(), k)
        if got.sum() > 0:
            self.tables_ += self.tables_[k] * got / got.sum()
        self.tables_[k] = 0.0

    def birth_topic(
        self, k: int, word_ids: ArrayLike, word_probs: ArrayLike, share: float
    ) -> tuple[float, Callable[[], None]]:
        """Give topic ``k`` a ``share`` of the window's tokens with word distribution ``word_probs`` over
        ``word_ids`` (``kernels._moves.birth_column``) and the same share of the expected tables.

        Returns the tokens moved and a function that undoes the move.
        """
        total = float(self.topic_total_.sum() * self.scale_)
        ids, counts = birth_counts(word_ids, word_probs, share, total)
        moved, undo_stat = birth_column(self._columns(), k, ids, counts)
        saved = self.tables_.copy()
        got = moved / total if total > 0 else 0.0
        self.tables_ *= 1.0 - got
        self.tables_[k] += got * float(saved.sum())

        def undo() -> None:
            undo_stat()
            self.tables_[:] = saved

        return moved, undo

    def split_topic(
        self, k: int, j: int, word_ids: ArrayLike, fractions: ArrayLike, rest: float
    ) -> tuple[float, Callable[[], None]]:
        """Move the fraction ``fractions[i]`` of topic ``k``'s expected count of word ``word_ids[i]`` (``rest``
        of every other word's) to the empty topic ``j`` (``kernels._moves.split_column``), and the same share
        of ``k``'s expected tables, so β's total table count is unchanged.

        Returns the tokens moved and a function that undoes the move.
        """
        before = float(self.topic_stat_[:, k].sum())
        moved, undo_stat = split_column(self._columns(), k, j, word_ids, fractions, rest)
        saved = self.tables_.copy()
        got = moved / before if before > 0 else 0.0
        self.tables_[j] += got * saved[k]
        self.tables_[k] -= got * saved[k]

        def undo() -> None:
            undo_stat()
            self.tables_[:] = saved

        return moved * self.scale_, undo
