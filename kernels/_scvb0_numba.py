"""SCVB0's numba kernels (Foulds et al., KDD 2013, ``shared/seeds/000_*``): the clumped document pass (Eq. 9,
Eqs. 5–6), the minibatch fit with the global update N^Φ := (1−ρ)N^Φ + ρ·N̂^Φ kept as s·M (Eqs. 7–8), its
renormalisation, and inference with the topics fixed. The estimator around them is :class:`kernels.scvb0.SCVB0`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._base import EXACT_FASTMATH
from ._batch import CSR

# N^Φ is stored as s·M. When s falls below this, M is multiplied by s and s reset to 1 (an O(W·K) pass that
# happens once every log(1e-30)/log(1-ρ_min) minibatches, i.e. every ~6,900 minibatches at ρ_min = 0.01).
_RENORM_BELOW = 1e-30
# ρ^Θ_t is tabulated for t < this (token iterations within one document, burn-in passes included).
_RHO_THETA_TABLE = 4096


class ThetaSteps(NamedTuple):
    """The document step size ρ^Θ_t = min(1, s_Θ/(τ_Θ + t)^κ_Θ) of Eq. 6 (``scale``, ``tau``, ``kappa``), with
    ``table[t]`` holding it for whole t below the table's length (a pow per word and pass is a noticeable share
    of the time)."""

    table: NDArray[np.float64]
    scale: float
    tau: float
    kappa: float


class Topics(NamedTuple):
    """The learned topics: N^Φ = s·``M`` (W×K; the scale s is a float beside the bundle, the fit returns its
    new value) and N^Z (``nz``, K). The numba functions update both in place."""

    M: NDArray[np.float64]
    nz: NDArray[np.float64]


class Config(NamedTuple):
    """The settings SCVB0's numba code reads: the symmetric α, the background weight (:func:`doc_alpha`), η, the
    document step sizes, the burn-in passes of the fit and the sweeps of inference."""

    alpha: float
    background: float
    eta: float
    steps: ThetaSteps
    burn_in: int
    passes: int


class Plan(NamedTuple):
    """What the Python side prepares for one ``partial_fit``: the initial N^Θ of each document (``theta0``), the
    minibatches' document bounds ``mb_docs``, and their ρ^Φ (``rhos``) and corpus sizes C (``corpus``)."""

    theta0: NDArray[np.float64]
    mb_docs: NDArray[np.int64]
    rhos: NDArray[np.float64]
    corpus: NDArray[np.float64]


class Terms(NamedTuple):
    """Eq. 5's topic side for one minibatch: ``M``, ``sinv_k = s/(N^Z_k + Wη)``, ``einv_k = η/(N^Z_k + Wη)``, and
    the scratch γ (K)."""

    M: NDArray[np.float64]
    sinv: NDArray[np.float64]
    einv: NDArray[np.float64]
    gam: NDArray[np.float64]


class Doc(NamedTuple):
    """One document in a pass: its distinct words ``ids`` with counts ``cnts`` (C_j = ``c_doc`` in all), its
    N^Θ_j (``nt``, updated in place) and its prior α_k (``alpha``, :func:`doc_alpha`)."""

    ids: NDArray[np.int64]
    cnts: NDArray[np.float64]
    c_doc: float
    nt: NDArray[np.float64]
    alpha: NDArray[np.float64]


class Ghat(NamedTuple):
    """Where a pass accumulates Ĝ (one row per distinct word of the minibatch, ``slot[w]``), and whether it does
    (``on``: the last pass only)."""

    ghat: NDArray[np.float64]
    slot: NDArray[np.int64]
    on: bool


# -------------------------------------------------------------------------------------------- numba kernels
@njit(cache=True, nogil=True)
def doc_alpha(av: NDArray[np.float64], alpha: float, background: float, c_doc: float) -> None:
    """The document's Dirichlet prior α_k into ``av``: ``alpha`` for every topic, except topic 0 (the background
    slot) = ``background``·C_j when ``background`` > 0 — a prior that grows with the document, so every document
    keeps a share of about ``background``/(1+``background``) for topic 0 and the words all documents use collect
    there (an asymmetric α, Wallach, Mimno & McCallum, NIPS 2009, with a length-proportional background weight).
    """
    if background > 0.0:
        av[0] = background * c_doc
    else:
        av[0] = alpha


# The steps below are shared by the fit and inference, or by inference's two loops. Inlined by numba
# (``inline="always"``), so each is compiled with its caller's fastmath flags: the fit's and inference's results
# stay bit-identical to the loops they replace.
@njit(cache=True, nogil=True, inline="always")
def _topic_constants(
    nz: NDArray[np.float64], scale: float, eta: float, W: int, sinv: NDArray[np.float64], einv: NDArray[np.float64]
) -> None:
    """The per-minibatch constants of Eq. 5 with N^Φ = s·M: ``sinv_k = s/(N^Z_k + Wη)``, ``einv_k = η/(N^Z_k + Wη)``."""
    for k in range(nz.shape[0]):
        inv = 1.0 / (nz[k] + W * eta)
        sinv[k] = scale * inv
        einv[k] = eta * inv


@njit(cache=True, nogil=True, inline="always")
def _doc_tokens(counts: NDArray[np.float64], a0: int, a1: int) -> float:
    """C_j: the tokens of the document whose distinct words are ``a0:a1``."""
    c_doc = 0.0
    for a in range(a0, a1):
        c_doc += counts[a]
    return c_doc


@njit(cache=True, nogil=True, inline="always")
def _write_theta(theta_out: NDArray[np.float64], d: int, nt: NDArray[np.float64], av: NDArray[np.float64]) -> None:
    """``theta_out[d]`` := the document's mixture, N^Θ_j + α normalised."""
    K = nt.shape[0]
    tot = 0.0
    for k in range(K):
        tot += nt[k] + av[k]
    for k in range(K):
        theta_out[d, k] = (nt[k] + av[k]) / tot


@njit(cache=True, nogil=True, inline="always")
def _add_normalised(gam: NDArray[np.float64], a: int, norm: float, m: float, nt: NDArray[np.float64]) -> None:
    """Inference's step for word ``a`` (count ``m``): γ_a := γ_a / ``norm`` (Σ_k γ_ak), then N^Θ_j += m·γ_a."""
    f = 1.0 / norm
    for k in range(nt.shape[0]):
        gam[a, k] *= f
        nt[k] += m * gam[a, k]


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
def _doc_pass(doc: Doc, terms: Terms, steps: ThetaSteps, t0: float, acc: Ghat) -> float:
    """One pass over the distinct words of a document (Algorithm 2, inner loop), clumped.

    For each distinct word ``w`` with count ``m``:

    * Eq. 5:  γ_k ∝ (N^Φ_wk + η) / (N^Z_k + Wη) · (N^Θ_jk + α_k) (``doc.alpha``: the document's α_k,
      :func:`doc_alpha`), with N^Φ_wk = s·M_wk and the per-minibatch constants of :class:`Terms`;
    * Eq. 9 (Eq. 6 applied ``m`` times with γ fixed):
      N^Θ_j := (1-ρ^Θ_t)^m N^Θ_j + C_j γ (1 - (1-ρ^Θ_t)^m), with ρ^Θ_t from ``steps`` (:class:`ThetaSteps`) and
      ``t`` the token iteration within the document (advanced by ``m``);
    * if ``acc.on`` (the last pass): Ĝ_w += m·γ (the C/|M| factor of Eqs. 7–8 is applied once, later).

    ``doc.nt`` holds N^Θ_j and is updated in place. Returns the token iteration after the pass.
    """
    ids, cnts, c_doc, nt, alpha = doc
    M, sinv, einv, gam = terms
    ghat, slot, accumulate = acc
    K = nt.shape[0]
    t = t0
    for a in range(ids.shape[0]):
        w = ids[a]
        m = cnts[a]
        norm = 0.0
        for k in range(K):  # M[w, k], not a row view: a view costs two reference-count calls per word
            g = (M[w, k] * sinv[k] + einv[k]) * (nt[k] + alpha[k])
            gam[k] = g
            norm += g
        ti = int(t)
        if ti == t and ti < steps.table.shape[0]:
            rho = steps.table[ti]
        else:
            base = steps.tau + t
            rho = 1.0 if base <= 0.0 else min(1.0, steps.scale / base**steps.kappa)
        decay = 1.0 - rho
        if m != 1.0:
            if m == 2.0:
                decay = decay * decay
            elif m == 3.0:
                decay = decay * decay * decay
            else:
                decay = decay**m
        add = c_doc * (1.0 - decay) / norm
        for k in range(K):
            nt[k] = decay * nt[k] + add * gam[k]
        t += m
        if accumulate:
            u = slot[w]
            f = m / norm
            for k in range(K):
                ghat[u, k] += f * gam[k]
    return t


@njit(cache=True, nogil=True)
def _fit(docs: CSR, topics: Topics, scale: float, plan: Plan, cfg: Config) -> tuple[float, NDArray[np.float64]]:
    """Algorithm 2 over consecutive minibatches, documents ``plan.mb_docs[b]:plan.mb_docs[b+1]``. Returns the new
    scale ``s`` and the documents' mixtures.

    For minibatch ``b``: every document runs ``cfg.burn_in`` passes of Eqs. 5/9, then one more pass that also
    accumulates Ĝ. Then (Eqs. 7–8), with ρ = ``rhos[b]``, C = ``corpus[b]`` and |M| the minibatch's tokens,
    Ĝ^Φ = (C/|M|) Σ γ and Ĝ^Z = Σ_w Ĝ^Φ_w:

        N^Φ := (1-ρ) N^Φ + ρ Ĝ^Φ,   N^Z := (1-ρ) N^Z + ρ Ĝ^Z,

    done sparsely on N^Φ = s·M: ``s *= 1-ρ`` and only the minibatch's rows of M get ρĜ^Φ_w / s. Cost
    O(tokens·K + touched rows·K). Minibatches without tokens leave the model untouched (their ``rhos``
    entry is unused). ``plan.theta0`` holds the initial N^Θ of each document; the mixtures returned are
    normalised N^Θ + α. With ``background`` > 0, topic 0's prior in each document is α_0 = ``background``·C_j
    (:func:`doc_alpha`); the other topics keep ``alpha``. ``topics`` is updated in place.
    """
    indptr, word_ids, counts = docs
    M, nz = topics
    theta0, mb_docs, rhos, corpus = plan
    alpha, background, eta, steps, burn_in, _ = cfg
    K = M.shape[1]
    W = M.shape[0]
    s = scale
    sinv = np.empty(K)
    einv = np.empty(K)
    gam = np.empty(K)
    nt = np.empty(K)
    av = np.full(K, alpha)
    slot = np.full(W, -1, dtype=np.int64)  # word -> row of ghat, for the minibatch's words
    theta_out = np.empty((indptr.shape[0] - 1, K))
    terms = Terms(M, sinv, einv, gam)
    n_mb = mb_docs.shape[0] - 1
    for b in range(n_mb):
        d0 = mb_docs[b]
        d1 = mb_docs[b + 1]
        lo = indptr[d0]
        hi = indptr[d1]
        # touched rows of this minibatch -> local slots
        n_u = 0
        for i in range(lo, hi):
            w = word_ids[i]
            if slot[w] < 0:
                slot[w] = n_u
                n_u += 1
        uwords = np.empty(n_u, dtype=np.int64)
        for i in range(lo, hi):
            w = word_ids[i]
            uwords[slot[w]] = w
        ghat = np.zeros((n_u, K))
        _topic_constants(nz, s, eta, W, sinv, einv)
        mb_tokens = 0.0
        for d in range(d0, d1):
            a0 = indptr[d]
            a1 = indptr[d + 1]
            ids = word_ids[a0:a1]
            cnts = counts[a0:a1]
            c_doc = _doc_tokens(counts, a0, a1)
            mb_tokens += c_doc
            doc_alpha(av, alpha, background, c_doc)
            for k in range(K):
                nt[k] = theta0[d, k]
            t = 0.0
            doc = Doc(ids, cnts, c_doc, nt, av)
            for sweep in range(burn_in + 1):  # burn-in passes, then the pass that accumulates into N^Φ
                t = _doc_pass(doc, terms, steps, t, Ghat(ghat, slot, sweep == burn_in))
            _write_theta(theta_out, d, nt, av)
        if mb_tokens > 0.0:
            rho = rhos[b]
            cfac = corpus[b] / mb_tokens
            if rho >= 1.0:
                M[:, :] = 0.0
                nz[:] = 0.0
                s = 1.0
                coef = cfac
            else:
                s *= 1.0 - rho
                for k in range(K):
                    nz[k] *= 1.0 - rho
                coef = rho * cfac / s
            zc = rho * cfac if rho < 1.0 else cfac
            for u in range(n_u):
                w = uwords[u]
                for k in range(K):
                    g = ghat[u, k]
                    M[w, k] += coef * g
                    nz[k] += zc * g
            if s < _RENORM_BELOW:
                s = _renormalise(M, nz, s)
        for u in range(n_u):
            slot[uwords[u]] = -1
    return s, theta_out


@njit(cache=True, nogil=True)
def _renormalise(M: NDArray[np.float64], nz: NDArray[np.float64], s: float) -> float:
    """M := s·M, N^Z := Σ_w N^Φ_w (exact resync); returns the new scale 1."""
    K = M.shape[1]
    nz[:] = 0.0
    for w in range(M.shape[0]):
        row = M[w]
        for k in range(K):
            row[k] *= s
            nz[k] += row[k]
    return 1.0


@njit(cache=True, nogil=True, fastmath=EXACT_FASTMATH)
def _infer(docs: CSR, topics: Topics, scale: float, cfg: Config) -> NDArray[np.float64]:
    """Fold-in with the topics fixed: CVB0 (seed Eq. 3, restricted to N^Θ) for each document.

    φ_wk = (s·M_wk + η)/(N^Z_k + Wη) is held fixed. γ_a starts at φ_w normalised (uniform θ),
    N^Θ_j = Σ m_a γ_a; then ``passes`` sweeps of γ_a ∝ φ_wa (N^Θ_j^{¬a} + α) with the word's own m_a γ_a
    taken out of N^Θ_j first
    (clumped CVB0); ``passes`` is ``cfg.passes``. Returns the mixtures: normalised N^Θ_j + α (α_0 = ``background``·C_j
    as in :func:`_fit`).
    """
    indptr, word_ids, counts = docs
    M, nz = topics
    alpha, background, eta, _, _, passes = cfg
    n_docs = indptr.shape[0] - 1
    K = M.shape[1]
    W = M.shape[0]
    sinv = np.empty(K)
    einv = np.empty(K)
    _topic_constants(nz, scale, eta, W, sinv, einv)
    nt = np.empty(K)
    av = np.full(K, alpha)
    max_len = 0
    for d in range(n_docs):
        max_len = max(max_len, indptr[d + 1] - indptr[d])
    gam = np.empty((max_len, K))
    theta_out = np.empty((n_docs, K))
    for d in range(n_docs):
        a0 = indptr[d]
        a1 = indptr[d + 1]
        nt[:] = 0.0
        c_doc = _doc_tokens(counts, a0, a1)
        doc_alpha(av, alpha, background, c_doc)
        for a in range(a1 - a0):
            w = word_ids[a0 + a]
            m = counts[a0 + a]
            norm = 0.0
            for k in range(K):
                g = M[w, k] * sinv[k] + einv[k]
                gam[a, k] = g
                norm += g
            _add_normalised(gam, a, norm, m, nt)
        for _ in range(passes):
            for a in range(a1 - a0):
                w = word_ids[a0 + a]
                m = counts[a0 + a]
                norm = 0.0
                for k in range(K):
                    excl = nt[k] - m * gam[a, k]
                    if excl < 0.0:
                        excl = 0.0
                    g = (M[w, k] * sinv[k] + einv[k]) * (excl + av[k])
                    nt[k] = excl
                    gam[a, k] = g
                    norm += g
                _add_normalised(gam, a, norm, m, nt)
        _write_theta(theta_out, d, nt, av)
    return theta_out
