"""Reservoir particle filter for LDA: one pass over a stream, constant memory.

The Rao-Blackwellized particle filter of Canini, Shi & Griffiths (2009) with the rejuvenation sequence drawn
from a reservoir (Vitter's Algorithm R), as studied in seed 003
(``../shared/seeds/003_a7c52d8f7fc270fa.txt``); the algorithm with its formulas is restated in
``docs/particle-filter.md`` (steps 1–6 there). The numerics are in :mod:`kernels._pf_numba`.

Per token i (word w of document d) and particle p: (1) the optimal proposal q_k, (2) ω^(p) *= Σ_k q_k, (3) z_i
~ q/Σq; then, if ESS = 1/Σω² < ``ess_threshold``·P: (4) multinomial resampling, (5) r = ``n_rejuvenate`` Gibbs
steps on tokens drawn from the reservoir, (6) ω = 1/P. The document's mixture is read after its last token,
θ_d = Σ_p ω^(p) (n_d·^(p) + α)/(n_d + Kα).

Initialisation (the seed's main finding: it matters most). The first ``init_docs`` documents (at most
``init_max_tokens`` tokens) are buffered; then collapsed Gibbs sampling (``init_sweeps`` sweeps) runs on them.
With ``init_restarts`` = N > 1 it runs N chains on the first 1 − ``init_holdout`` of the buffered documents,
scores each by held-out perplexity (document completion) on the rest, keeps the best, adds the held-out
documents to it and runs 10% more sweeps over all (at least 5) — the seed's label-free best-of-N. Every
particle starts from that state; the sample's tokens enter the reservoir. ``init_docs = 0`` starts the filter
from empty counts. **Before initialisation**, ``partial_fit_transform`` returns the prior mean (1/K for every
topic) for documents that went into the buffer of an earlier batch, and the Gibbs mixtures (n_dk + α)/(n_d +
Kα) for the buffered documents of the batch that completes the buffer; ``transform`` uses the (empty, hence
uniform) topic–word counts.

Rejuvenation (``rejuvenation``): ``"none"``; ``"reservoir"`` (R = ``reservoir_size`` tokens, Algorithm R);
``"history"`` — the whole history, for the experiments only: a reservoir of ``history_tokens`` slots (every
token is kept while the stream is shorter than that) with document counts for at most ``history_docs``
documents (tokens of later documents stay out while no slot is free).

Memory (bytes; C = pool rows, D = document slots, R = reservoir slots):

    4·C·K  (count rows)  + 4·P·W (row pointers)  + 16·C (reference counts, free stack)  + 5·W (divergent words)
    + 4·(D·P + 1)·K + 4·D·P + 16·(D·P + 1) (n_d· rows, row pointers, reference counts, free stack)
    + 2·P·R + 13·R (reservoir z, word, slot, divergent tokens)  + 8·P·K (n_k)  + 4·init_max_tokens

with C = ⌈pool_factor·W⌉ + 1 + P·(r + 1), D = R + 2 (reservoir), ``history_docs`` + 2 (history), 2 (none). The
notes' bound P·(K·W + R + R·K) corresponds to ``pool_factor`` = P (every particle may own every row). A particle
that changes a shared row copies that K-long row first (copy on write); the n_d· are stored the same way (a K-long
row per document slot and particle, shared copy on write). A resampling copies a particle's row pointers only for
the words whose pointers differ between particles (a list the kernel keeps: the words touched since the particles
last coalesced), its n_k, one n_d· row pointer per slot in use and the z of the reservoir tokens that differ
between particles — never the K·W counts and never a pass over all W words. If the pool runs out of rows, all
particles are set to one particle drawn by weight ("collapse", a valid but degenerate resampling, counted in
``diagnostics()['collapses']``); the pool size always leaves room for that. Defaults (service: K = 100, W =
65,536): P = 16, pool_factor = 2, R = 1000, r = 30 → C = 131,569 rows: 53 MB rows + 4 MB pointers + 2 MB + 6.7 MB
n_d· + 0.4 MB ≈ 66 MB whatever the stream length. The seed's P = 100 is a setting (`n_particles=100`; at W =
65,536, K = 100 use pool_factor ≥ 2 and expect ≈ 125 MB, 42 MB of it n_d·).

Token counts: a document's word counts are rounded to integers (at least 1 per listed word): the filter
samples one topic per token. Counts are int32 per (topic, word) and int64 per topic: a stream would need 2^31
tokens of one word in one topic to overflow.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _pf_numba as nb
from ._base import StateValue, TopicModel, check_interval, check_positive_int
from ._batch import Batch

__all__ = ["ParticleFilterLDA"]

_MODES = ("none", "reservoir", "history")

_ARRAYS = (
    "rows_",
    "refcnt_",
    "free_",
    "ptr_",
    "div_",
    "div_mark_",
    "nk_",
    "weights_",
    "res_w_",
    "res_slot_",
    "res_z_",
    "rdiv_",
    "rdiv_mark_",
    "drows_",
    "dref_",
    "dfree_",
    "dptr_",
    "slot_len_",
    "slot_refs_",
    "slot_free_",
    "ctr_",
    "fst_",
    "prng_",
    "buf_words_",
    "buf_doc_ptr_",
)


class ParticleFilterLDA(TopicModel):
    """Reservoir particle filter for LDA (Canini et al. 2009; seed 003), ``algorithm = "pf"``.

    Parameters
    ----------
    n_topics, n_words, seed
        K, W and the random seed.
    n_particles
        P (the seed: 100; the service default 16 keeps memory ≈ 66 MB at K = 100, W = 65,536).
    ess_threshold
        Resample when ESS < ess_threshold · P (notes: P/5). Since ESS ≥ 1, ess_threshold · P must exceed 1
        when P ≥ 2 (else resampling could never trigger: ``ValueError``); e.g. P = 4 needs ess_threshold > 0.25.
        With P = 1 there is nothing to resample.
    rejuvenation
        ``"reservoir"``, ``"none"`` or ``"history"`` (experiments only, bounded by
        ``history_tokens``/``history_docs``).
    n_rejuvenate
        r, tokens per rejuvenation sequence (30).
    reservoir_size
        R, reservoir slots (1000).
    history_tokens, history_docs
        Bounds of the ``"history"`` mode.
    alpha, beta
        Symmetric Dirichlet priors (0.1, 0.01).
    init_docs, init_max_tokens
        Documents buffered for the Gibbs initialisation, and the token cap of that buffer (0 docs: no Gibbs).
    init_sweeps, init_restarts, init_holdout
        Gibbs sweeps; number of chains N of the best-of-N choice by held-out perplexity; held-out fraction.
    pool_factor
        Count-row pool size in units of W (1 ≤ pool_factor ≤ P; P = never collapse).
    """

    algorithm: ClassVar[str] = "pf"
    #: Fixed on a restored model, besides K, W and the seed: every setting that sizes an array of the state —
    #: P (``n_particles``), the pool (``pool_factor``, and ``n_rejuvenate`` through C), the reservoir or
    #: history (``rejuvenation``, ``reservoir_size``, ``history_tokens``, ``history_docs``) and the Gibbs
    #: buffer (``init_docs``, ``init_max_tokens``). The rest can change: α and β enter each proposal afresh,
    #: ``ess_threshold`` only decides when to resample, and the Gibbs settings (``init_sweeps``,
    #: ``init_restarts``, ``init_holdout``) act at initialisation only (not at all once it has happened).
    restore_fixed: ClassVar[frozenset[str]] = TopicModel.restore_fixed | {
        "n_particles",
        "pool_factor",
        "n_rejuvenate",
        "rejuvenation",
        "reservoir_size",
        "history_tokens",
        "history_docs",
        "init_docs",
        "init_max_tokens",
    }

    @classmethod
    def state_bytes(cls, n_topics: int, n_words: int, **params: Any) -> int:
        """Bytes of the arrays :meth:`_init_state` allocates (the module docstring's memory formula, exactly)."""
        m = cls._settings_only(n_topics=n_topics, n_words=n_words, **params)
        P, W, K = int(m.n_particles), int(n_words), int(n_topics)
        C, R, D = m._sizes()
        cap = int(m.init_max_tokens) if m.init_docs > 0 else 1
        pool = 4 * C * K + 8 * C + 8 * C + 4 * W * P + 4 * W + W  # rows, refcnt, free, ptr, div, div_mark
        particles = 8 * P * K + 8 * P  # nk, weights
        reservoir = 4 * R + 4 * R + 2 * R * P + 4 * R + R  # res_w, res_slot, res_z, rdiv, rdiv_mark
        docs = 4 * (D * P + 1) * K + 16 * (D * P + 1) + 4 * D * P + 24 * D  # drows, dref+dfree, dptr, slot_*
        rest = 8 * (nb.N_CTR + nb.N_FST) + 8 * 4 + 4 * cap + 8 * (int(m.init_docs) + 1)  # ctr, fst, prng, buffer
        return pool + particles + reservoir + docs + rest

    def __init__(
        self,
        n_topics: int,
        n_words: int,
        seed: int = 0,
        *,
        n_particles: int = 16,
        ess_threshold: float = 0.2,
        rejuvenation: str = "reservoir",
        n_rejuvenate: int = 30,
        reservoir_size: int = 1000,
        history_tokens: int = 1_000_000,
        history_docs: int = 10_000,
        alpha: float = 0.1,
        beta: float = 0.01,
        init_docs: int = 200,
        init_max_tokens: int = 50_000,
        init_sweeps: int = 100,
        init_restarts: int = 4,
        init_holdout: float = 0.2,
        pool_factor: float = 2.0,
    ) -> None:
        self.n_topics = n_topics
        self.n_words = n_words
        self.seed = seed
        self.n_particles = n_particles
        self.ess_threshold = ess_threshold
        self.rejuvenation = rejuvenation
        self.n_rejuvenate = n_rejuvenate
        self.reservoir_size = reservoir_size
        self.history_tokens = history_tokens
        self.history_docs = history_docs
        self.alpha = alpha
        self.beta = beta
        self.init_docs = init_docs
        self.init_max_tokens = init_max_tokens
        self.init_sweeps = init_sweeps
        self.init_restarts = init_restarts
        self.init_holdout = init_holdout
        self.pool_factor = pool_factor
        self._setup()

    # ------------------------------------------------------------------ settings
    def _validate_params(self) -> None:
        if self.n_topics > 32767:
            raise ValueError(f"n_topics must be at most 32767 (topics are stored as int16), got {self.n_topics}")
        if self.n_words >= 2**31 - 1:
            raise ValueError("n_words must be below 2**31 - 1")
        check_positive_int("n_particles", self.n_particles)
        check_interval("ess_threshold", self.ess_threshold, 0.0, 1.0, low_open=True)
        if self.n_particles >= 2 and self.ess_threshold * self.n_particles <= 1.0:
            # ESS = 1/Σω² is at least 1, so "ESS < ess_threshold·P" could never hold: no resampling and no
            # rejuvenation would ever run, silently (e.g. the notes' P/5 with P ≤ 5).
            raise ValueError(
                f"ess_threshold·n_particles must exceed 1 (ESS ≥ 1, so resampling could never trigger), got "
                f"{self.ess_threshold}·{self.n_particles} = {self.ess_threshold * self.n_particles:g}; use "
                f"ess_threshold > 1/n_particles = {1 / self.n_particles:g}"
            )
        if self.rejuvenation not in _MODES:
            raise ValueError(f"rejuvenation must be one of {_MODES}, got {self.rejuvenation!r}")
        for name in ("n_rejuvenate", "init_docs", "init_sweeps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
        for name in ("reservoir_size", "history_tokens", "history_docs", "init_max_tokens", "init_restarts"):
            check_positive_int(name, getattr(self, name))
        check_interval("alpha", self.alpha, 0.0, low_open=True, high_open=True)
        check_interval("beta", self.beta, 0.0, low_open=True, high_open=True)
        check_interval("init_holdout", self.init_holdout, 0.0, 1.0, low_open=True, high_open=True)
        check_interval("pool_factor", self.pool_factor, 1.0, float(max(self.n_particles, 1)))

    # ------------------------------------------------------------------ sizes
    def _sizes(self) -> tuple[int, int, int]:
        """(pool rows C, reservoir slots R, document slots D incl. the scratch slot)."""
        P, W = self.n_particles, self.n_words
        C = math.ceil(self.pool_factor * W) + 1 + P * (self.n_rejuvenate + 1)
        if self.rejuvenation == "reservoir":
            R, D = self.reservoir_size, self.reservoir_size + 2
        elif self.rejuvenation == "history":
            R, D = self.history_tokens, self.history_docs + 2
        else:
            R, D = 0, 2
        return C, R, D

    def memory_bytes(self) -> int:
        """Bytes of the learned state (the formula in the module docstring); constant over the stream."""
        return int(sum(getattr(self, a).nbytes for a in _ARRAYS))

    def _init_state(self) -> None:
        P, W, K = self.n_particles, self.n_words, self.n_topics
        C, R, D = self._sizes()
        self.rows_ = np.zeros((C, K), dtype=np.int32)
        self.refcnt_ = np.zeros(C, dtype=np.int64)
        self.free_ = np.zeros(C, dtype=np.int64)
        self.free_[: C - 1] = np.arange(C - 1, 0, -1)  # rows 1..C-1; row 0 is the shared zero row
        self.ptr_ = np.zeros((W, P), dtype=np.int32)  # word-major: a token reads P neighbours
        self.nk_ = np.zeros((P, K), dtype=np.int64)
        self.weights_ = np.full(P, 1.0 / P)
        self.res_w_ = np.zeros(R, dtype=np.int32)
        self.res_slot_ = np.zeros(R, dtype=np.int32)
        self.res_z_ = np.zeros((R, P), dtype=np.int16)
        self.rdiv_ = np.zeros(R, dtype=np.int32)
        self.rdiv_mark_ = np.zeros(R, dtype=np.uint8)
        self.div_ = np.zeros(W, dtype=np.int32)
        self.div_mark_ = np.zeros(W, dtype=np.uint8)
        self.drows_ = np.zeros((D * P + 1, K), dtype=np.int32)
        self.dref_ = np.zeros(D * P + 1, dtype=np.int64)
        self.dfree_ = np.zeros(D * P + 1, dtype=np.int64)
        self.dfree_[: D * P] = np.arange(D * P, 0, -1)  # rows 1..D·P; row 0 is the shared zero row
        self.dptr_ = np.zeros((D, P), dtype=np.int32)
        self.slot_len_ = np.zeros(D, dtype=np.int64)
        self.slot_refs_ = np.zeros(D, dtype=np.int64)
        self.slot_free_ = np.zeros(D, dtype=np.int64)
        self.slot_free_[: D - 1] = np.arange(D - 2, -1, -1)  # slot D-1 is the scratch slot
        self.ctr_ = np.zeros(nb.N_CTR, dtype=np.int64)
        self.ctr_[nb.N_FREE] = C - 1
        self.ctr_[nb.SLOT_TOP] = D - 1
        self.ctr_[nb.D_FREE] = D * P
        self.fst_ = np.zeros(nb.N_FST, dtype=np.float64)
        self.fst_[nb.LAST_ESS] = float(P)
        self.prng_ = self.rng_.integers(0, 2**63, size=4, dtype=np.int64).astype(np.uint64)
        self.prng_[0] |= np.uint64(1)  # xoshiro's state must not be all zero
        cap = self.init_max_tokens if self.init_docs > 0 else 1
        self.buf_words_ = np.zeros(cap, dtype=np.int32)
        self.buf_doc_ptr_ = np.zeros(self.init_docs + 1, dtype=np.int64)
        self.buf_docs_ = 0
        self.initialized_ = self.init_docs == 0

    # ------------------------------------------------------------------ learning
    @staticmethod
    def _int_counts(batch: Batch) -> NDArray[np.int64]:
        return np.maximum(1, np.rint(batch.counts)).astype(np.int64)

    def _partial_fit(self, batch: Batch) -> NDArray[np.float64]:
        K = self.n_topics
        theta = np.full((batch.n_docs, K), 1.0 / K)
        start = 0
        if not self.initialized_:
            start = self._buffer(batch, theta)
        if start < batch.n_docs:
            rest = batch.slice(start, batch.n_docs)
            counts = self._int_counts(rest)
            cs = np.concatenate(([0], np.cumsum(counts)))
            per_doc = cs[rest.indptr[1:]] - cs[rest.indptr[:-1]]
            max_len = max(1, int(per_doc.max())) if per_doc.size else 1
            tok = np.zeros(max_len, dtype=np.int64)
            out = np.empty((rest.n_docs, K), dtype=np.float64)
            rc = nb.filter_docs(
                rest.indptr,
                rest.word_ids,
                counts,
                tok,
                self.rows_,
                self.refcnt_,
                self.free_,
                self.ptr_,
                self.div_,
                self.div_mark_,
                self.nk_,
                self.weights_,
                self.res_w_,
                self.res_slot_,
                self.res_z_,
                self.rdiv_,
                self.rdiv_mark_,
                self.drows_,
                self.dref_,
                self.dfree_,
                self.dptr_,
                self.slot_len_,
                self.slot_refs_,
                self.slot_free_,
                self.ctr_,
                self.fst_,
                self.prng_,
                float(self.alpha),
                float(self.beta),
                float(self.ess_threshold),
                int(self.n_rejuvenate),
                out,
            )
            if rc != 0:  # pragma: no cover - excluded by the validated pool size
                raise RuntimeError("particle filter: count-row pool exhausted")
            theta[start:] = out
        return theta

    def _buffer(self, batch: Batch, theta: NDArray[np.float64]) -> int:
        """Add documents to the initialisation buffer; initialise when it is full. Returns the first document
        of ``batch`` that was not buffered."""
        counts = self._int_counts(batch)
        first = self.buf_docs_
        d = 0
        full = False
        while d < batch.n_docs and not full:
            lo, hi = int(batch.indptr[d]), int(batch.indptr[d + 1])
            toks = np.repeat(batch.word_ids[lo:hi], counts[lo:hi]).astype(np.int32)
            used = int(self.buf_doc_ptr_[self.buf_docs_])
            if used + toks.size > self.buf_words_.size:
                full = True
                break
            self.buf_words_[used : used + toks.size] = toks
            self.buf_docs_ += 1
            self.buf_doc_ptr_[self.buf_docs_] = used + toks.size
            d += 1
            full = self.buf_docs_ >= self.init_docs
        if full:
            theta_buf = self._initialize()
            theta[:d] = theta_buf[first : first + d]
        return d

    def _initialize(self) -> NDArray[np.float64]:
        """Collapsed Gibbs on the buffered sample (best of ``init_restarts`` by held-out perplexity), then
        start every particle from it. Returns the Gibbs mixtures of the buffered documents."""
        n_docs = self.buf_docs_
        doc_ptr = self.buf_doc_ptr_[: n_docs + 1].copy()
        words = self.buf_words_[: doc_ptr[-1]].astype(np.int64)
        z, theta = self._gibbs_init(words, doc_ptr)
        self._install(words, doc_ptr, z, theta)
        self.buf_words_[:] = 0
        self.buf_doc_ptr_[:] = 0
        self.buf_docs_ = 0
        return theta

    def _gibbs_init(
        self, words: NDArray[np.int64], doc_ptr: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        K, alpha, beta = self.n_topics, float(self.alpha), float(self.beta)
        wbeta = self.n_words * beta
        n_docs = doc_ptr.shape[0] - 1
        vocab, local = np.unique(words, return_inverse=True)
        local = local.astype(np.int64)
        V = max(int(vocab.size), 1)
        doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(doc_ptr))
        N = words.size
        z = np.zeros(N, dtype=np.int64)
        n_hold = round(self.init_holdout * n_docs)
        if self.init_restarts > 1 and n_hold >= 1 and n_docs - n_hold >= 1:
            n_train_docs = n_docs - n_hold
            cut = int(doc_ptr[n_train_docs])
            hold_ptr = doc_ptr[n_train_docs:] - cut
            best_ll, best_z = -np.inf, z[:cut].copy()
            for _ in range(self.init_restarts):
                zc = np.zeros(cut, dtype=np.int64)
                nkw, nk, _ = nb.gibbs_chain(
                    local[:cut],
                    doc_of[:cut],
                    n_train_docs,
                    V,
                    K,
                    alpha,
                    beta,
                    wbeta,
                    self.init_sweeps,
                    zc,
                    True,
                    self.prng_,
                )
                phi = (nkw + beta) / (nk[:, None] + wbeta)
                ll, n = nb.heldout_loglik(hold_ptr, local[cut:], phi, alpha, 5, self.prng_)
                score = ll / max(n, 1)
                if score > best_ll:
                    best_ll, best_z = score, zc
            z[:cut] = best_z
            # Fold the held-out documents into the chosen chain, then a few sweeps over the whole sample.
            nkw, nk, ndk = nb.gibbs_chain(
                local[:cut], doc_of[:cut], n_docs, V, K, alpha, beta, wbeta, 0, z[:cut], False, self.prng_
            )
            nb.gibbs_add_docs(local, doc_of, z, cut, nkw, nk, ndk, alpha, beta, wbeta, self.prng_)
            sweeps = max(5, self.init_sweeps // 10)
            nkw, nk, ndk = nb.gibbs_chain(local, doc_of, n_docs, V, K, alpha, beta, wbeta, sweeps, z, False, self.prng_)
        else:
            nkw, nk, ndk = nb.gibbs_chain(
                local, doc_of, n_docs, V, K, alpha, beta, wbeta, self.init_sweeps, z, True, self.prng_
            )
        nd = np.diff(doc_ptr).astype(np.float64)
        theta = (ndk + alpha) / (nd[:, None] + K * alpha)
        return z, theta

    def _install(
        self,
        words: NDArray[np.int64],
        doc_ptr: NDArray[np.int64],
        z: NDArray[np.int64],
        theta: NDArray[np.float64],
    ) -> None:
        rc = nb.install_init(
            words,
            doc_ptr,
            z,
            self.rows_,
            self.refcnt_,
            self.free_,
            self.ptr_,
            self.nk_,
            self.res_w_,
            self.res_slot_,
            self.res_z_,
            self.rdiv_,
            self.rdiv_mark_,
            self.drows_,
            self.dref_,
            self.dfree_,
            self.dptr_,
            self.slot_len_,
            self.slot_refs_,
            self.slot_free_,
            self.ctr_,
            self.prng_,
            float(self.alpha),
            theta,
        )
        if rc != 0:  # pragma: no cover - excluded by the validated pool size
            raise RuntimeError("particle filter: count-row pool exhausted during initialisation")
        self.initialized_ = True

    def initialize_from(self, docs: Batch, z: ArrayLike) -> NDArray[np.float64]:
        """Start the filter from a given initial model (experiments: "one fixed initial model", best-of-N by
        NMI).

        ``docs`` is the initial sample and ``z`` the topic of each of its tokens, in the order of
        ``np.repeat(word_ids, rounded counts)`` document by document. Only allowed before any document was
        seen. Returns the initial documents' mixtures.
        """
        if self.n_tokens_seen_ or self.ctr_[nb.TOKENS] or self.buf_docs_:
            raise ValueError("initialize_from needs a fresh model")
        counts = self._int_counts(docs)
        words = np.repeat(docs.word_ids, counts).astype(np.int64)
        tok_len = np.array([int(counts[docs.indptr[d] : docs.indptr[d + 1]].sum()) for d in range(docs.n_docs)])
        doc_ptr = np.zeros(docs.n_docs + 1, dtype=np.int64)
        np.cumsum(tok_len, out=doc_ptr[1:])
        zz = np.ascontiguousarray(z, dtype=np.int64)
        if zz.shape != words.shape or (zz.size and (zz.min() < 0 or zz.max() >= self.n_topics)):
            raise ValueError("z must hold one topic in [0, n_topics) per token")
        ndk = np.zeros((docs.n_docs, self.n_topics))
        np.add.at(ndk, (np.repeat(np.arange(docs.n_docs), tok_len), zz), 1.0)
        theta = (ndk + self.alpha) / (tok_len[:, None] + self.n_topics * self.alpha)
        self._install(words, doc_ptr, zz, theta)
        self.n_docs_seen_ += docs.n_docs
        self.n_tokens_seen_ += float(words.size)
        return theta

    # ------------------------------------------------------------------ read-outs
    def _phi_columns(self, cols: NDArray[np.int64]) -> NDArray[np.float64]:
        w = self.weights_ / self.weights_.sum()
        return nb.mean_phi_columns(cols, self.rows_, self.ptr_, self.nk_, w, float(self.beta))

    def _transform(self, batch: Batch) -> NDArray[np.float64]:
        if batch.n_docs == 0:
            return np.zeros((0, self.n_topics))
        cols, local = np.unique(batch.word_ids, return_inverse=True)
        phi = self._phi_columns(cols.astype(np.int64))
        return nb.fold_in_mean_field(batch.indptr, local.astype(np.int64), batch.counts, phi, float(self.alpha), 50)

    def topic_word(self) -> NDArray[np.float64]:
        phi = self._phi_columns(np.arange(self.n_words, dtype=np.int64))
        return phi / phi.sum(axis=1, keepdims=True)

    def topic_weights(self) -> NDArray[np.float64]:
        w = self.weights_ / self.weights_.sum()
        nk = (w[:, None] * self.nk_).sum(axis=0)
        tot = nk.sum()
        if tot <= 0:
            return np.full(self.n_topics, 1.0 / self.n_topics)
        return np.asarray(nk / tot, dtype=np.float64)

    def reset_words(self, word_ids: ArrayLike) -> None:
        ids = self._check_word_ids(word_ids)
        if ids.size == 0:
            return
        mask = np.zeros(self.n_words, dtype=np.bool_)
        mask[ids] = True
        nb.forget_words(
            ids,
            mask,
            self.refcnt_,
            self.free_,
            self.ctr_,
            self.rows_,
            self.ptr_,
            self.nk_,
            self.res_w_,
            self.res_slot_,
            self.res_z_,
            self.rdiv_,
            self.rdiv_mark_,
            self.slot_refs_,
            self.slot_free_,
        )
        if self.buf_docs_:  # drop the words from the initialisation buffer too
            ptr = self.buf_doc_ptr_[: self.buf_docs_ + 1]
            words = self.buf_words_[: ptr[-1]]
            keep = ~mask[words]
            kept_before = np.concatenate(([0], np.cumsum(keep)))
            new_words = words[keep]
            self.buf_doc_ptr_[: self.buf_docs_ + 1] = kept_before[ptr]
            self.buf_words_[:] = 0
            self.buf_words_[: new_words.size] = new_words

    def diagnostics(self) -> dict[str, float]:
        C, R, _ = self._sizes()
        ctr = self.ctr_
        toks = max(int(ctr[nb.TOKENS]), 1)
        return {
            "ess": float(self.fst_[nb.LAST_ESS]),
            "ess_fraction": float(self.fst_[nb.LAST_ESS]) / self.n_particles,
            "resamples": float(ctr[nb.RESAMPLES]),
            "rejuvenations": float(ctr[nb.REJUVENATIONS]),
            "reservoir_fill": float(ctr[nb.FILL]) / R if R else 0.0,
            "reservoir_tokens": float(ctr[nb.FILL]),
            "pool_fill": float(C - 1 - ctr[nb.N_FREE]) / (C - 1),
            "pool_peak_fill": float(ctr[nb.PEAK_ROWS]) / (C - 1),
            "collapses": float(ctr[nb.COLLAPSES]),
            "resample_copied_mb": float(ctr[nb.COPIED]) * 4 / 1e6,
            "cow_rows": float(ctr[nb.COW_ROWS]),
            "log_evidence_per_token": float(self.fst_[nb.LOG_EVIDENCE]) / toks,
            "initialized": float(self.initialized_),
            "state_mb": self.memory_bytes() / 1e6,
        }

    @property
    def log_evidence_(self) -> float:
        """The filter's estimate of log P(w_1..w_i) over the tokens it filtered (not the Gibbs sample)."""
        return float(self.fst_[nb.LOG_EVIDENCE])

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> dict[str, StateValue]:
        state: dict[str, StateValue] = {a.rstrip("_"): getattr(self, a).copy() for a in _ARRAYS}
        state["buf_docs"] = int(self.buf_docs_)
        state["initialized"] = bool(self.initialized_)
        return state

    def _set_state(self, state: dict[str, StateValue]) -> None:
        for a in _ARRAYS:
            cur = getattr(self, a)
            new = np.asarray(state[a.rstrip("_")])
            if new.shape != cur.shape:
                raise ValueError(f"state array {a!r} has shape {new.shape}, expected {cur.shape}")
            setattr(self, a, np.array(new, dtype=cur.dtype, copy=True))
        self.buf_docs_ = int(state["buf_docs"])  # type: ignore[arg-type]
        self.initialized_ = bool(state["initialized"])

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {
            "n_particles": 4,
            "ess_threshold": 0.5,
            "n_rejuvenate": 5,
            "reservoir_size": 50,
            "init_docs": 3,
            "init_max_tokens": 500,
            "init_sweeps": 5,
            "init_restarts": 2,
        }
