"""The collapsed online HDP's numba code (:class:`kernels.ohdp.OnlineHDP`): the document step of a minibatch
(zero-order collapsed responsibilities, Sato, Kurihara & Nakagawa, KDD 2012; SCVB0's Eq. 5), the expected tables
that feed the corpus stick, and the stick's mean E[β] from them."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._base import EXACT_FASTMATH
from ._batch import CSR
from ._special import digamma

__all__ = ["Fixed", "Step", "Written", "beta_from_tables", "cvb_batch"]


class Fixed(NamedTuple):
    """What a minibatch's document step holds fixed: ``rows`` = N^Φ's rows of the minibatch's distinct words
    (count units, one row per local slot), ``total`` = N^Z (K), the corpus-level expected tables (``tables``,
    K) and ``rank``, the order in which free ids are handed to new topics."""

    rows: NDArray[np.float64]
    total: NDArray[np.float64]
    tables: NDArray[np.float64]
    rank: NDArray[np.int64]


class Step(NamedTuple):
    """The settings the document step reads: η, V (the vocabulary in use: the W of φ̂'s denominator), α0, γ, the
    sweeps' tolerance and cap, ``sequential`` (later documents see the earlier ones' raw counts), the sweeps'
    over-relaxation w (:func:`_cvb_doc`) and ``single``: sweep in float32 (:func:`cvb_batch`)."""

    eta: float
    vocab: int
    alpha: float
    gamma: float
    tol: float
    max_iter: int
    sequential: bool
    relax: float = 1.0
    single: bool = False


class Written(NamedTuple):
    """What the document step writes: Ĝ (``stat``, raw c·γ per local slot), the minibatch's expected tables
    (``tables``, K) and the documents' mixtures (``theta``, D×K)."""

    stat: NDArray[np.float64]
    tables: NDArray[np.float64]
    theta: NDArray[np.float64]


@njit(cache=True, nogil=True)
def beta_from_tables(m: NDArray[np.float64], rank: NDArray[np.int64], gamma: float) -> NDArray[np.float64]:
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
    phat: NDArray[np.floating],
    prior: NDArray[np.floating],
    tol: float,
    max_iter: int,
    gam: NDArray[np.floating],
    nj: NDArray[np.floating],
    relax: float = 1.0,
) -> int:
    """Zero-order collapsed update of one document with the topics fixed (Sato et al. 2012; SCVB0 Eq. 5):

    γ_nk ∝ φ̂_kn (N_jk^{¬n} + α0 β_k),   N_jk = Σ_n c_n γ_nk,

    swept over the distinct words (Gauss–Seidel), where N^{¬n} takes one token of word n out. Starts from
    γ_n ∝ φ̂_n α0β; stops when Σ_n c_n |Δγ_n|₁ ≤ tol · N_j or after ``max_iter`` sweeps.
    ``phat[n, k]`` = φ̂_kw_n.
    Writes γ (U×K) and N_j (K); returns the number of sweeps. :func:`cvb_batch` pads K to a multiple of
    :data:`LANES` with columns where φ̂ and the prior are 0, whose γ and N_j stay 0 (the loops then have no scalar
    remainder).

    Over-relaxation (``relax`` = w > 1; successive over-relaxation of the Gauss–Seidel sweep): the new row is
    γ_n + w (x − γ_n) for the plain update x, but no entry below x/2 (a shrinking topic's entry never reaches 0,
    nor below it), N_j moved with it. Its fixed points are the plain sweep's (there x = γ_n), though a document
    with several may settle on another; the plain sweeps shrink the change by a steady 0.93–0.96 each near one on
    news (docs/ohdp.md), and w = 1.3–1.7 take a third fewer. The stopping test stays the plain update's change
    Σ_n c_n |x − γ_n|₁; the rows are made to sum to 1 and N_j recounted after the last sweep (mid-sweep the floor
    lets a row sum to up to w). w = 1 is the plain sweep (its rows are recounted too).

    The sweeps compute in the type of φ̂, the prior, γ and N_j (all four alike), float32 or float64
    (:func:`cvb_batch`); the counts and the stopping test stay float64.
    """
    U = phat.shape[0]
    K = phat.shape[1]
    f0 = nj.dtype.type(0.0)
    one = nj.dtype.type(1.0)
    nj[:] = f0
    ntot = 0.0
    for n in range(U):
        for k in range(K):
            gam[n, k] = phat[n, k] * prior[k]
        tot = _sum_rows(gam[n])
        c = nj.dtype.type(cnts[n])
        ntot += cnts[n]
        rt = one / tot
        for k in range(K):
            gam[n, k] *= rt
            nj[k] += c * gam[n, k]
    g = np.empty_like(nj)
    change = np.empty_like(nj)
    w = nj.dtype.type(relax)
    half = nj.dtype.type(0.5)
    it = 0
    while it < max_iter:
        it += 1
        change[:] = f0
        for n in range(U):
            c = nj.dtype.type(cnts[n])
            own = min(c, one)
            for k in range(K):
                g[k] = phat[n, k] * (max(nj[k] - own * gam[n, k], f0) + prior[k])
            inv = one / _sum_rows(g)
            if relax == 1.0:
                for k in range(K):
                    x = g[k] * inv
                    dx = x - gam[n, k]
                    change[k] += c * abs(dx)
                    nj[k] += c * dx
                    gam[n, k] = x
            else:
                for k in range(K):
                    x = g[k] * inv
                    dx = x - gam[n, k]
                    change[k] += c * abs(dx)
                    y = max(gam[n, k] + w * dx, half * x)
                    nj[k] += c * (y - gam[n, k])
                    gam[n, k] = y
        if _sum_rows(change) <= tol * ntot:
            break
    # Rows the floor kept from summing to 1 normalised, and N_j recounted from them (also after plain sweeps: in
    # float32 an N_j moved by thousands of steps drifts from Σ c γ by 10⁻⁵ of itself).
    nj[:] = f0
    for n in range(U):
        c = nj.dtype.type(cnts[n])
        inv = one / _sum_rows(gam[n])
        for k in range(K):
            gam[n, k] *= inv
            nj[k] += c * gam[n, k]
    return it


#: :func:`cvb_batch` pads the sweeps' topics to a multiple of this: no scalar loop remainders (K = 150 left 6 or 22
#: columns to scalar code); 16 ran faster than 8 or 32.
LANES = 16


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH | {"reassoc"})
def _sum_rows(x: NDArray[np.floating]) -> float:  # pragma: no cover (compiled)
    """Σ x in x's own type, for the sweep buffers of :func:`_cvb_doc` (whose length is a
    multiple of :data:`LANES`): the one loop compiled with fast-math ``reassoc``, so that LLVM splits the sum into
    vector lanes. Four scalar partial sums in a fixed order (the sum this replaced) did not vectorise, nor eight: the
    sweeps ran 1.35–1.4× slower on BBC.

    ``EXACT_FASTMATH`` leaves ``reassoc`` out because with it a kernel's results changed with where its arrays lay in
    memory. This sum splits by index, not by address (LLVM vectorises it without peeling for alignment):
    ``tests/test_ohdp.py`` sums the same values at every offset (4-byte steps) and gets the same bits. A CPU with other
    vector widths may round the last bit otherwise, as it may any vectorised loop."""
    s = x.dtype.type(0.0)
    for k in range(x.shape[0]):
        s += x[k]
    return s


#: The smallest prior of a topic in float32 sweeps (:func:`_cvb_doc`): the empty tail of the stick halves β at each
#: topic (2⁻¹⁵⁰ at K = 150), below float32's smallest normal number (1.2·10⁻³⁸), where arithmetic is slow and
#: underflows to 0; at 10⁻²⁵, φ̂·prior stays a normal number for any φ̂ above 10⁻¹³, and such a topic's share of a
#: document is as negligible as before. (float64 sweeps keep the floor of 10⁻¹⁰⁰.)
_SINGLE_PRIOR_FLOOR = 1e-25

# log(1 − x) by its series below this x (see :func:`cvb_batch`): through x⁸, the first term left out is below
# x⁸/9 relative to |log(1 − x)| ≥ x, i.e. ≤ 2⁻⁵⁶/9 ≈ 1.5e-18, under the rounding of ``np.log1p`` itself.
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
    gam: NDArray[np.floating],
    cnts: NDArray[np.float64],
    slots: NDArray[np.int64],
    stat: NDArray[np.float64],
    run_tot: NDArray[np.float64],
    logp0: NDArray[np.float64],
    prod: NDArray[np.float64],
    buf: NDArray[np.float64],
    nj64: NDArray[np.float64],
) -> None:  # pragma: no cover (compiled)
    """Add a finished document to Ĝ (``stat[slots[n]] += c_n γ_n``, in float64; ``run_tot`` its column sums), write
    ``nj64`` = N_j = Σ_n c_n γ_n in float64 (the sweeps' own N_j may be float32), and
    ``logp0[k]`` = log P(n_jk = 0) = Σ_n c_n log(1 − γ_nk) (Sato et al. 2012), γ clipped at 1 − 10⁻¹².

    log(1 − γ) costs a ``log1p`` per entry if done plainly, more than a sweep of :func:`_cvb_doc`, so: below
    ``_SERIES_BELOW`` (nearly all entries: a word's mass sits on a few topics) by :func:`_log1m_series`, to
    rounding; at or above it, for words seen once (most rows), as a running product of (1 − γ) per topic
    whose log is taken once per document (relative error ≤ 2⁻⁵³ per factor, i.e. ≤ 1.5·10⁻¹⁴ of its
    |log(1 − γ)| ≥ 1/128); for the other rows by ``log1p``. The products are folded into ``logp0`` every 16
    rows (each factor ≥ 10⁻¹², so they stay far above the smallest double).
    """
    U = gam.shape[0]
    K = logp0.shape[0]  # γ's padding columns beyond K (:func:`cvb_batch`) are left out
    for k in range(K):
        logp0[k] = 0.0
        prod[k] = 1.0
        nj64[k] = 0.0
    for n in range(U):
        c = cnts[n]
        grow = gam[n]
        srow = stat[slots[n]]
        if c == 1.0:
            for k in range(K):
                x = np.float64(grow[k])
                srow[k] += x
                run_tot[k] += x
                nj64[k] += x
                small = x < _SERIES_BELOW
                logp0[k] += _log1m_series(x) if small else 0.0
                prod[k] *= 1.0 if small else 1.0 - min(x, 1.0 - 1e-12)
        else:
            big = 0
            for k in range(K):
                x = np.float64(grow[k])
                cx = c * x
                srow[k] += cx
                run_tot[k] += cx
                nj64[k] += cx
                buf[k] = _log1m_series(x)  # replaced below where x ≥ _SERIES_BELOW
                if x >= _SERIES_BELOW:
                    big += 1
            if big > 0:
                for k in range(K):
                    x = np.float64(grow[k])
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
def cvb_batch(docs: CSR, fixed: Fixed, step: Step, out: Written) -> int:
    """The collapsed document step for a minibatch, accumulating Ĝ (``stat``, raw c·γ per distinct word) and
    the expected tables Σ_j E[m_jk] ≈ Σ_j p_jk α0β_k (ψ(α0β_k + N_jk/p_jk) − ψ(α0β_k)), p_jk = P(n_jk > 0)
    (the Antoniak mean given that topic k is used at all; Sato et al. 2012; see the comment in the loop).

    φ̂_kw = (N^Φ_wk + η)/(N^Z_k + Vη) from ``fixed`` (:class:`Fixed`), V = ``step.vocab``; if
    ``step.sequential``, the raw statistics of the minibatch's earlier documents are added to N^Φ for the later
    ones (``out.stat`` doubles as that running count). Writes ``out`` (:class:`Written`): ``theta[d]`` =
    normalised N_j + α0β. Returns the total sweeps.

    Cost: per document O(sweeps · U·K) for :func:`_cvb_doc` and O(U·K) for φ̂, Ĝ and P(n_jk = 0), plus O(K)
    digammas and (if ``sequential``) an O(K log K) sort for β. log(1 − γ) is summed for P(n_jk = 0) by its
    Taylor series where γ < 1/128 (nearly all of the U×K entries: a word's mass sits on a few topics), so only
    the few larger entries call ``log1p``, which would otherwise cost more than several sweeps.

    With ``step.single`` the sweeps (:func:`_cvb_doc`) run in float32: a vector holds twice the topics, and the
    sweeps, 85–90 % of a settled model's pass, run ~1.3× faster. What is kept across documents (Ĝ, the tables, θ)
    is summed in float64 either way. The online HDP sweeps in float32 once it has settled (``settle_docs``): at its
    ``settled_tol`` = 10⁻² per token a sweep stops far above float32's rounding (N_j is known to ~2·10⁻⁵ of the
    tokens), and held-out likelihood and NPMI stayed float64's to four digits (docs/ohdp.md, "Sweeps in float32 once
    settled"). While the model settles, its documents sweep to 10⁻⁴ in float64: there the topics are still alike,
    and float32's rounding changed which of them a document's mass went to (Reuters' NPMI 0.010 lower over ten
    corpus orders).
    """
    K = fixed.rows.shape[1]
    Kp = -(-K // LANES) * LANES  # the sweeps' topics, padded (:func:`_cvb_doc`); padding φ̂ and prior stay 0
    indptr = docs.indptr
    u_max = 0
    for d in range(indptr.shape[0] - 1):
        u_max = max(u_max, indptr[d + 1] - indptr[d])
    # one buffer for every document (U_j ≤ u_max rows used)
    if step.single:
        sweeps32 = (np.zeros((u_max, Kp), np.float32), np.empty((u_max, Kp), np.float32), np.empty(Kp, np.float32))
        return _batch(docs, fixed, step, out, sweeps32, _SINGLE_PRIOR_FLOOR)
    sweeps64 = (np.zeros((u_max, Kp)), np.empty((u_max, Kp)), np.empty(Kp))
    return _batch(docs, fixed, step, out, sweeps64, 0.0)


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
def _batch(
    docs: CSR, fixed: Fixed, step: Step, out: Written, sweeps: tuple[Any, Any, Any], floor: float
) -> int:  # pragma: no cover (compiled)
    """:func:`cvb_batch`'s documents, with the sweeps' buffers ``sweeps`` = (φ̂, γ, N_j) in the type they run in;
    the sweeps' prior is at least ``floor``."""
    indptr, slots, counts = docs
    base, base_tot, base_tables, rank = fixed
    eta, vocab, alpha, gamma, tol, max_iter, sequential, relax, _ = step
    phat_all, gam_all, nj = sweeps
    stat, tables, theta = out
    K = base.shape[1]
    n_docs = indptr.shape[0] - 1
    Veta = vocab * eta
    inv = np.empty(K)
    run_tot = np.zeros(K)
    prior_s = np.zeros(nj.shape[0], nj.dtype)  # the prior in the sweeps' type (padding columns 0)
    logp0 = np.empty(K)
    prior = np.zeros(K)
    dig_prior = np.empty(K)
    buf = np.empty(K)
    prod = np.empty(K)
    nj64 = np.empty(K)  # N_j in float64, for θ and the tables (:func:`_add_doc`)
    cur = base_tables.copy()
    ptot = 0.0
    total_it = 0
    for d in range(n_docs):
        if d == 0 or sequential:
            beta = beta_from_tables(cur, rank, gamma)
            ptot = 0.0
            for k in range(K):
                prior[k] = max(alpha * beta[k], 1e-100)
                prior_s[k] = max(prior[k], floor)
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
            inv[k] = 1.0 / (base_tot[k] + run_tot[k] + Veta) if sequential else 1.0 / (base_tot[k] + Veta)
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
        total_it += _cvb_doc(cnts, phat, prior_s, tol, max_iter, gam, nj, relax)
        # Ĝ += c·γ, and the expected tables, Sato et al. (2012): E[m_jk] ≈ P(n_jk > 0) · α0β_k (ψ(α0β_k +
        # E[n_jk | n_jk > 0]) − ψ(α0β_k)), with P(n_jk = 0) = Π_n (1 − γ_nk)^{c_n}. (Plugging E[n_jk] straight
        # into the Antoniak mean counts a whole table for any sliver of mass, which flattens β over the whole
        # truncation.)
        _add_doc(gam, cnts, slots[lo:hi], stat, run_tot, logp0, prod, buf, nj64)
        tot = 0.0
        for k in range(K):
            tot += nj64[k] + prior[k]
            pk = -np.expm1(logp0[k])
            if pk > 1e-300 and nj64[k] > 0.0:
                x = pk * prior[k] * (digamma(prior[k] + nj64[k] / pk) - dig_prior[k])
                tables[k] += x
                cur[k] += x
        for k in range(K):
            theta[d, k] = (nj64[k] + prior[k]) / tot
    return total_it
