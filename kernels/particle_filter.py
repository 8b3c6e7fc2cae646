"""Reservoir particle filter for LDA: one pass over a stream, constant memory.

The Rao-Blackwellized particle filter of Canini, Shi & Griffiths (2009) with the rejuvenation sequence drawn
from a reservoir (Vitter's Algorithm R), as studied in seed 003. ``docs/particle-filter.md`` restates the
algorithm (steps 1–6 per token, the reservoir, the Gibbs initialisation) and describes how the state is stored
and what it costs in memory. This class validates settings, buffers the initial sample and calls the numba
code: :mod:`kernels._pf_state` (the state's typed bundles), :mod:`kernels._pf_filter` (the token step),
:mod:`kernels._pf_pools` (copy-on-write rows), :mod:`kernels._pf_gibbs` (initialisation),
:mod:`kernels._pf_readout` (φ and ``transform``), :mod:`kernels._pf_rng` (random numbers).

Per token i (word w of document d) and particle p: (1) the optimal proposal q_k, (2) ω^(p) *= Σ_k q_k, (3) z_i
~ q/Σq; then, if ESS = 1/Σω² < ``ess_threshold``·P: (4) multinomial resampling, (5) r = ``n_rejuvenate`` Gibbs
steps on tokens drawn from the reservoir, (6) ω = 1/P. The document's mixture is read after its last token,
θ_d = Σ_p ω^(p) (n_d·^(p) + α)/(n_d + Kα).

**Before initialisation** (the first ``init_docs`` documents are buffered), ``partial_fit_transform`` returns
the prior mean (1/K for every topic) for documents that went into the buffer of an earlier batch, and the
Gibbs mixtures (n_dk + α)/(n_d + Kα) for the buffered documents of the batch that completes the buffer;
``transform`` uses the (empty, hence uniform) topic–word counts.

**Refinement** (up to ``refine_docs`` documents): after initialisation the filter runs while the buffer keeps
every document, and each time it has doubled (2·``init_docs``, 4·``init_docs``, …, the last at ``refine_docs``
documents or when ``init_max_tokens`` is reached), Gibbs runs again on the whole buffer, warm-started from the
previous run's assignments so that topics keep their slots (:func:`kernels._pf_gibbs.gibbs_refine`), and every
particle restarts from it. The filter's own mixtures are returned meanwhile; then the buffer is emptied.

Token counts: a document's word counts are rounded to integers (at least 1 per listed word): the filter
samples one topic per token. Counts are int32 per (topic, word) and int64 per topic; before a batch could take a
count past 2^30, every topic–word count is halved (:func:`kernels._pf_halve.halve_counts`), so none can wrap. The
same halving, whenever the counts hold more than ``window`` tokens, is how the filter forgets: without it a topic
that starts late in a long stream would have to outweigh the whole history (``docs/particle-filter.md``,
"Forgetting").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _pf_halve
from . import _pf_state as st
from ._base import StateValue, TopicModel, check_interval, check_non_negative_int, check_positive_int
from ._batch import CSR, Batch, Docs, as_batch
from ._moves import check_merge
from ._pf_filter import filter_docs
from ._pf_gibbs import InitPlan, TokenDocs, gibbs_init, gibbs_refine, install_init
from ._pf_pools import forget_words
from ._pf_readout import fold_in_mean_field, mean_phi_columns

__all__ = ["BACKGROUND_DOCS", "ParticleFilterLDA"]

#: Most tokens (rounded counts) of one document, and of one batch, the filter learns from: it holds a document's
#: tokens in memory, and halving keeps int32 counts below 2^31 only while a batch adds less than 2^30 to them.
MAX_DOC_TOKENS = 2**24
MAX_BATCH_TOKENS = _pf_halve.COUNT_LIMIT // 2

#: How many times as many documents as the next topic the background topic must be used by
#: (:meth:`ParticleFilterLDA.background_topic`; the online HDP's ``BACKGROUND_TABLES`` is the same ratio of tables).
BACKGROUND_DOCS = 1.5

_MODES = ("none", "reservoir", "history")
# Python-side state besides the bundles: the buffer of the initial sample and the topics Gibbs gave its tokens.
_BUFFERS = ("buf_words_", "buf_z_", "buf_doc_ptr_")
# Counters of ``Particles.ctr`` that add up over the whole stream: a refinement's fresh state carries them over.
_CUMULATIVE = (st.RESAMPLES, st.REJUVENATIONS, st.COLLAPSES, st.COPIED, st.COW_ROWS, st.PEAK_ROWS)


@dataclass(eq=False, repr=False, kw_only=True)
class ParticleFilterLDA(TopicModel):
    """Reservoir particle filter for LDA (Canini et al. 2009; seed 003), ``algorithm = "pf"``.

    Parameters
    ----------
    n_topics, n_words, seed
        K, W and the random seed.
    n_particles
        P (the seed: 100; the service default 16 keeps memory ≈ 72 MB at K = 100, W = 65,536).
    ess_threshold
        Resample when ESS < ess_threshold · P (``docs/particle-filter.md``: P/5). Since ESS ≥ 1,
        ess_threshold · P must exceed 1 when P ≥ 2 (else resampling could never trigger: ``ValueError``); e.g.
        P = 4 needs ess_threshold > 0.25. With P = 1 there is nothing to resample.
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
    refine_docs
        Keep buffering after initialisation and run Gibbs again on the whole buffer each time it doubles, up to
        this many documents (``docs/particle-filter.md``, "Initialisation"); at most ``init_docs``: never.
    init_sweeps, init_restarts, init_holdout
        Gibbs sweeps; number of chains N of the best-of-N choice by held-out perplexity; held-out fraction.
    pool_factor
        Count-row pool size in units of W (1 ≤ pool_factor ≤ P; P = never collapse).
    window
        Tokens the counts stand for: before a batch, while a particle's counts hold more, every count is halved
        (:func:`kernels._pf_halve.halve_counts`), so that new tokens weigh more than old ones and a topic that
        starts late in a long stream is learned (``docs/particle-filter.md``, "Forgetting"); 0 = never (the counts
        are still halved before an int32 count could wrap). Not used with ``rejuvenation="history"``.
    """

    algorithm: ClassVar[str] = "pf"
    #: Topic hygiene merges duplicate topics (:meth:`merge_topics`, at the common threshold 0.25); the filter has
    #: no birth, split or delete move (``docs/particle-filter.md``, "Topic hygiene: merges").
    hygiene_defaults: ClassVar[Mapping[str, Any] | None] = MappingProxyType({"max_births": 0})
    #: Fixed on a restored model, besides K, W and the seed: every setting that sizes an array of the state —
    #: P (``n_particles``), the pool (``pool_factor``, and ``n_rejuvenate`` through C), the reservoir or
    #: history (``rejuvenation``, ``reservoir_size``, ``history_tokens``, ``history_docs``) and the Gibbs
    #: buffer (``init_docs``, ``init_max_tokens``, ``refine_docs``). The rest can change: α and β enter each
    #: proposal afresh, ``ess_threshold`` only decides when to resample, and the Gibbs settings (``init_sweeps``,
    #: ``init_restarts``, ``init_holdout``) act in the Gibbs runs only (none once the last refinement has run).
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
        "refine_docs",
    }

    @classmethod
    def state_bytes(cls, n_topics: int, n_words: int, **params: Any) -> int:
        """Bytes of the arrays :meth:`_init_state` allocates (:func:`kernels._pf_state.allocated_bytes` and the
        buffer), from their shapes; ``docs/particle-filter.md``, "Memory", gives the leading terms."""
        m = cls._settings_only(n_topics=n_topics, n_words=n_words, **params)
        cap, n_buf = m._buffer_sizes()
        buffer = 4 * cap + 2 * cap + 8 * (n_buf + 1)  # buf_words_, buf_z_, buf_doc_ptr_
        return st.allocated_bytes(int(m.n_particles), int(n_words), int(n_topics), *m._sizes()) + buffer

    # Settings (meanings in the class docstring), stored untouched by the generated ``__init__``.
    n_particles: int = 16
    ess_threshold: float = 0.2
    rejuvenation: str = "reservoir"
    n_rejuvenate: int = 30
    reservoir_size: int = 1000
    history_tokens: int = 1_000_000
    history_docs: int = 10_000
    alpha: float = 0.1
    beta: float = 0.01
    init_docs: int = 200
    init_max_tokens: int = 1_000_000
    refine_docs: int = 4000
    init_sweeps: int = 100
    init_restarts: int = 4
    init_holdout: float = 0.2
    pool_factor: float = 2.0
    window: int = 1_000_000

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
            # rejuvenation would ever run, silently (e.g. P/5 with P ≤ 5).
            raise ValueError(
                f"ess_threshold·n_particles must exceed 1 (ESS ≥ 1, so resampling could never trigger), got "
                f"{self.ess_threshold}·{self.n_particles} = {self.ess_threshold * self.n_particles:g}; use "
                f"ess_threshold > 1/n_particles = {1 / self.n_particles:g}"
            )
        if self.rejuvenation not in _MODES:
            raise ValueError(f"rejuvenation must be one of {_MODES}, got {self.rejuvenation!r}")
        for name in ("n_rejuvenate", "init_docs", "init_sweeps", "refine_docs"):
            check_non_negative_int(name, getattr(self, name))
        for name in ("reservoir_size", "history_tokens", "history_docs", "init_max_tokens", "init_restarts"):
            check_positive_int(name, getattr(self, name))
        check_interval("alpha", self.alpha, 0.0, low_open=True, high_open=True)
        check_interval("beta", self.beta, 0.0, low_open=True, high_open=True)
        check_interval("init_holdout", self.init_holdout, 0.0, 1.0, low_open=True, high_open=True)
        if self.n_particles == 1 and self.pool_factor != 1.0:  # else "must be in [1.0, 1.0]" leaves one guessing
            raise ValueError(f"pool_factor must be 1 with n_particles = 1 (no copies to share), got {self.pool_factor}")
        check_interval("pool_factor", self.pool_factor, 1.0, float(max(self.n_particles, 1)))
        check_non_negative_int("window", self.window)

    @classmethod
    def params_from_state(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Snapshots written before ``refine_docs`` existed never refined: they read as ``refine_docs = 0``; those
        written before ``window`` never forgot: ``window = 0`` (so a restore with the default says it changes)."""
        return {"refine_docs": 0, "window": 0, **params}

    # ------------------------------------------------------------------ sizes
    def _buffer_sizes(self) -> tuple[int, int]:
        """(token slots, document slots) of the Gibbs buffer: none without an initial sample."""
        if self.init_docs == 0:
            return 1, 0
        return int(self.init_max_tokens), max(int(self.init_docs), int(self.refine_docs))

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

    def _bundles(self) -> st.State:
        return st.State(self.words_, self.doc_rows_, self.reservoir_, self.particles_)

    def _config(self) -> st.Config:
        return st.Config(float(self.alpha), float(self.beta), float(self.ess_threshold), int(self.n_rejuvenate))

    def memory_bytes(self) -> int:
        """Bytes of the learned state (the formula in ``docs/particle-filter.md``); constant over the stream."""
        bundles = sum(a.nbytes for _, a in st.arrays(*self._bundles()))
        return int(bundles + sum(getattr(self, a).nbytes for a in _BUFFERS))

    def _init_state(self) -> None:
        prng = self.rng_.integers(0, 2**63, size=4, dtype=np.int64).astype(np.uint64)
        prng[0] |= np.uint64(1)  # xoshiro's state must not be all zero
        self._allocate(prng)
        cap, n_buf = self._buffer_sizes()
        self.buf_words_ = np.zeros(cap, dtype=np.int32)
        self.buf_z_ = np.zeros(cap, dtype=np.int16)  # topics of the tokens of the last Gibbs run's documents
        self.buf_doc_ptr_ = np.zeros(n_buf + 1, dtype=np.int64)
        self.buf_docs_ = 0
        self.gibbs_docs_ = 0  # documents in the last Gibbs run (their tokens' topics are in buf_z_)
        self.gibbs_at_ = int(self.init_docs)  # buffered documents at which Gibbs runs next; 0: never again
        self.initialized_ = self.init_docs == 0
        self.evidence_tokens_ = 0  # tokens the filter scored (log_evidence_'s), not the Gibbs sample's

    def _allocate(self, prng: NDArray[np.uint64]) -> None:
        """Empty bundles (:func:`kernels._pf_state.allocate`) driven by the generator state ``prng``."""
        P, W, K = self.n_particles, self.n_words, self.n_topics
        C, R, D = self._sizes()
        self.words_, self.doc_rows_, self.reservoir_, self.particles_ = st.allocate(P, W, K, C, R, D, prng)

    # ------------------------------------------------------------------ learning
    @staticmethod
    def _int_counts(batch: Batch) -> NDArray[np.int64]:
        return np.maximum(1, np.rint(batch.counts)).astype(np.int64)

    def flush(self) -> None:
        """Run the initial Gibbs sample on the documents buffered so far, if it has not run (a corpus of fewer
        than ``init_docs`` documents: the filter had learned nothing, and eval scored a uniform model). A refinement
        still due is left alone: the benchmarks' single pass does not run it either."""
        if not self.initialized_ and self.buf_docs_:
            self._gibbs(last=True)

    def _check_fit_batch(self, batch: Batch) -> None:
        """The filter samples a topic per token, so the rounded counts are tokens it holds in memory and adds to
        int32 counts: a document of more than :data:`MAX_DOC_TOKENS` or a batch of more than
        :data:`MAX_BATCH_TOKENS` is refused (before, a count of 1e19 wrapped to a negative token total and 1e12
        asked for 7 TiB)."""
        tokens = np.maximum(1.0, np.rint(batch.counts))
        doc_of = np.repeat(np.arange(batch.n_docs), np.diff(batch.indptr))
        per_doc = np.bincount(doc_of, weights=tokens, minlength=batch.n_docs)
        if per_doc.size and per_doc.max() > MAX_DOC_TOKENS:
            d = int(np.argmax(per_doc))
            raise ValueError(
                f"document {d} has {per_doc[d]:.4g} tokens (rounded counts); the particle filter samples a topic "
                f"per token and takes at most {MAX_DOC_TOKENS:,} per document"
            )
        if tokens.sum() > MAX_BATCH_TOKENS:
            raise ValueError(
                f"the batch has {tokens.sum():.4g} tokens (rounded counts); the particle filter takes at most "
                f"{MAX_BATCH_TOKENS:,} per partial_fit (split the batch)"
            )

    def _partial_fit(self, batch: Batch) -> NDArray[np.float64]:
        theta = np.full((batch.n_docs, self.n_topics), 1.0 / self.n_topics)
        counts = self._int_counts(batch) if self.gibbs_at_ else None  # the tokens to buffer, once per batch
        d = 0
        while d < batch.n_docs:
            want = self.gibbs_at_ - self.buf_docs_  # documents until the next Gibbs run (if any)
            if not self.initialized_:  # buffer only; the first Gibbs run gives these documents' mixtures
                assert counts is not None
                end, full = self._keep(batch, counts, d, min(batch.n_docs, d + want))
                if full or self.buf_docs_ >= self.gibbs_at_:
                    n = self.buf_docs_  # the batch's documents are the buffer's last end - d
                    theta[d:end] = self._gibbs(last=full)[n - (end - d) : n]
                d = end
            else:  # filter, and keep the documents while refining
                end, full = min(batch.n_docs, d + want) if self.gibbs_at_ else batch.n_docs, False
                if self.gibbs_at_:  # only the documents the buffer holds: a refinement restarts from it
                    assert counts is not None
                    end, full = self._keep(batch, counts, d, end)
                theta[d:end] = self._filter(batch.slice(d, end))
                if self.gibbs_at_ and (full or self.buf_docs_ >= self.gibbs_at_):
                    self._gibbs(last=full)
                d = end
        return theta

    def _filter(self, batch: Batch) -> NDArray[np.float64]:
        """Steps 1–6 over every token of ``batch`` (:func:`kernels._pf_filter.filter_docs`); the mixtures."""
        counts = self._int_counts(batch)
        limit = _pf_halve.COUNT_LIMIT - int(counts.sum())  # n_k bounds every n_kw: the cheap test first
        if self.particles_.nk.max() > limit and self.words_.rows.max() > limit:
            _pf_halve.halve_counts(self._bundles())
        self._forget()
        cs = np.concatenate(([0], np.cumsum(counts)))
        per_doc = cs[batch.indptr[1:]] - cs[batch.indptr[:-1]]
        max_len = max(1, int(per_doc.max())) if per_doc.size else 1
        tok = np.zeros(max_len, dtype=np.int64)
        out = np.empty((batch.n_docs, self.n_topics), dtype=np.float64)
        rc = filter_docs(CSR(batch.indptr, batch.word_ids, counts), tok, self._config(), self._bundles(), out)
        if rc != 0:  # pragma: no cover - excluded by the validated pool size
            raise RuntimeError("particle filter: count-row pool exhausted")
        self.evidence_tokens_ += int(counts.sum())
        return out

    def _forget(self) -> None:
        """Halve the counts until they hold at most ``window`` tokens (``docs/particle-filter.md``, "Forgetting"):
        once a batch in a long stream, a few times after a Gibbs refinement installed its whole buffer. A halving
        that frees nothing ends it (the reservoir's tokens floor the counts; counts are rounded down, so the words a
        topic holds once do not). The ``"history"`` mode keeps its own bounded memory, which floors the counts above
        any smaller window: it is left alone."""
        if not self.window or self.rejuvenation == "history":
            return
        held = self._tokens_held()
        while held > self.window:
            _pf_halve.halve_counts(self._bundles())
            held, before = self._tokens_held(), held
            if held >= before:
                return

    def _tokens_held(self) -> int:
        """The most tokens any particle's counts hold (Σ_k n_k): what ``window`` bounds."""
        return int(self.particles_.nk.sum(axis=1).max())

    def _keep(self, batch: Batch, counts: NDArray[np.int64], lo: int, hi: int) -> tuple[int, bool]:
        """Append documents ``lo:hi`` of ``batch`` to the Gibbs buffer. Returns (the first document not appended,
        whether the buffer's tokens are full: that document did not fit). ``counts``: the batch's rounded counts."""
        for d in range(lo, hi):
            a, b = int(batch.indptr[d]), int(batch.indptr[d + 1])
            toks = np.repeat(batch.word_ids[a:b], counts[a:b])
            used = int(self.buf_doc_ptr_[self.buf_docs_])
            if used + toks.size > self.buf_words_.size:
                return d, True
            self.buf_words_[used : used + toks.size] = toks
            self.buf_docs_ += 1
            self.buf_doc_ptr_[self.buf_docs_] = used + toks.size
        return hi, False

    def _gibbs(self, last: bool) -> NDArray[np.float64]:
        """Gibbs on the buffered documents — the initialisation (best of ``init_restarts``), or a refinement
        warm-started from the previous run — then every particle starts from it. The next run is due when the
        buffer has doubled, up to ``refine_docs``; after the last (or when ``last``: the buffer's tokens are full)
        the buffer is emptied. Returns the Gibbs mixtures of the buffered documents."""
        n_docs = self.buf_docs_
        doc_ptr = self.buf_doc_ptr_[: n_docs + 1].copy()
        sample = TokenDocs(doc_ptr, self.buf_words_[: doc_ptr[-1]].astype(np.int64))
        prior = st.Prior(float(self.alpha), float(self.beta), self.n_words * float(self.beta))
        parts = self.particles_
        if not self.initialized_:
            plan = InitPlan(self.init_sweeps, self.init_restarts, self.init_holdout)
            z, theta = gibbs_init(sample, self.n_topics, prior, plan, parts.prng)
        else:
            known = self.buf_z_[: self.buf_doc_ptr_[self.gibbs_docs_]].astype(np.int64)
            z, theta = gibbs_refine(sample, known, prior, self.n_topics, self.init_sweeps, parts.prng)
            self._allocate(parts.prng.copy())  # the particles restart from the new sample
            self.particles_.ctr[list(_CUMULATIVE)] = parts.ctr[list(_CUMULATIVE)]
            self.particles_.fst[st.LOG_EVIDENCE] = parts.fst[st.LOG_EVIDENCE]
        self._install(sample, z, theta)
        self.gibbs_at_ = 0 if last or n_docs >= self.refine_docs else min(2 * n_docs, int(self.refine_docs))
        if self.gibbs_at_:
            self.buf_z_[: z.size] = z
            self.gibbs_docs_ = n_docs
        else:  # done: empty the buffer (it keeps its size, so memory stays constant)
            self.buf_words_[:] = 0
            self.buf_z_[:] = 0
            self.buf_doc_ptr_[:] = 0
            self.buf_docs_ = self.gibbs_docs_ = 0
        return theta

    def _install(self, sample: TokenDocs, z: NDArray[np.int64], theta: NDArray[np.float64]) -> None:
        rc = install_init(sample, z, float(self.alpha), theta, self._bundles())
        if rc != 0:  # pragma: no cover - excluded by the validated pool size
            raise RuntimeError("particle filter: count-row pool exhausted during initialisation")
        self.initialized_ = True

    def initialize_from(self, docs: Docs, z: ArrayLike) -> NDArray[np.float64]:
        """Start the filter from a given initial model (experiments: "one fixed initial model", best-of-N by
        NMI).

        ``docs`` is the initial sample and ``z`` the topic of each of its tokens, in the order of
        ``np.repeat(word_ids, rounded counts)`` document by document. Only allowed before any document was
        seen. No refinement follows (the sample is not Gibbs's to redo). Returns the initial documents' mixtures.
        """
        if self.n_tokens_seen_ or self.particles_.ctr[st.TOKENS] or self.buf_docs_:
            raise ValueError("initialize_from needs a fresh model")
        docs = as_batch(docs, self.n_words)
        self._check_fit_batch(docs)
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
        self._install(TokenDocs(doc_ptr, words), zz, theta)
        self.gibbs_at_ = 0
        self.n_docs_seen_ += docs.n_docs
        self.n_tokens_seen_ += float(words.size)
        return theta

    # ------------------------------------------------------------------ read-outs
    def _phi_columns(self, cols: NDArray[np.int64]) -> NDArray[np.float64]:
        weights = self.particles_.weights
        return mean_phi_columns(cols, weights / weights.sum(), float(self.beta), self.words_, self.particles_.nk)

    def _transform(self, batch: Batch) -> NDArray[np.float64]:
        if batch.n_docs == 0:
            return np.zeros((0, self.n_topics))
        cols, local = np.unique(batch.word_ids, return_inverse=True)
        phi = self._phi_columns(cols.astype(np.int64))
        docs = CSR(batch.indptr, local.astype(np.int64), batch.counts)
        return fold_in_mean_field(docs, phi, float(self.alpha), 50)

    def topic_word(self) -> NDArray[np.float64]:
        phi = np.ascontiguousarray(self._phi_columns(np.arange(self.n_words, dtype=np.int64)))
        phi /= phi.sum(axis=1, keepdims=True)
        return phi

    def topic_weights(self) -> NDArray[np.float64]:
        w = self.particles_.weights / self.particles_.weights.sum()
        nk = (w[:, None] * self.particles_.nk).sum(axis=0)
        tot = nk.sum()
        if tot <= 0:
            return np.full(self.n_topics, 1.0 / self.n_topics)
        return np.asarray(nk / tot, dtype=np.float64)

    def background_topic(self, phi: NDArray[np.float64] | None = None) -> int | None:
        """The topic the most documents use, if at least :data:`BACKGROUND_DOCS` times as many as use the next
        topic, else None (``phi`` is not needed).

        The documents are those the filter still keeps counts for (the reservoir's, and the open one), with their
        whole document–topic counts n_d· in the heaviest particle: a document uses topic k when n_dk > 0. Every
        article uses the generic words, a desk's words only its own articles, so the background is the topic that
        stands out by documents, as the online HDP's does by tables (``OnlineHDP.background_topic``); the test on
        φ (:func:`kernels.background.background_topic`) picked the football desk on the particle filter's demo stream.
        """
        docs = self.doc_rows_
        held = np.flatnonzero(docs.slot_refs[:-1] > 0)  # the last slot is scratch
        if held.size < 2 or self.n_topics < 2:
            return None
        heaviest = int(np.argmax(self.particles_.weights))
        using = np.count_nonzero(docs.drows[docs.dptr[held, heaviest]] > 0, axis=0)
        first, second = np.argsort(-using, kind="stable")[:2]
        return int(first) if using[first] > 0 and using[first] >= BACKGROUND_DOCS * using[second] else None

    def merge_topics(self, into: int, src: int) -> None:
        """Merge topic ``src`` into ``into`` in every particle: each token assigned to ``src`` is relabelled
        ``into`` — in the topic–word rows, the document–topic rows, n_k, the reservoir's z and the Gibbs buffer's
        topics — so every particle holds exactly the counts its assignments would give had they said ``into``
        wherever they said ``src`` (the merged topic is the union of the two: Bryant & Sudderth 2012's merge,
        which for hard counts is exact). ``src`` is left empty."""
        into, src = check_merge(into, src, self.n_topics)
        for counts in (self.words_.rows, self.doc_rows_.drows, self.particles_.nk):
            counts[:, into] += counts[:, src]
            counts[:, src] = 0
        for z in (
            self.reservoir_.res_z[: self.particles_.ctr[st.FILL]],
            self.buf_z_[: self.buf_doc_ptr_[self.gibbs_docs_]],
        ):
            z[z == src] = into

    def reset_words(self, word_ids: ArrayLike) -> None:
        ids = self._check_word_ids(word_ids)
        if ids.size == 0:
            return
        mask = np.zeros(self.n_words, dtype=np.bool_)
        mask[ids] = True
        forget_words(ids, mask, self._bundles())
        if self.buf_docs_:  # drop the words from the Gibbs buffer too, with the topics of their tokens
            ptr = self.buf_doc_ptr_[: self.buf_docs_ + 1]
            keep = ~mask[self.buf_words_[: ptr[-1]]]
            kept_before = np.concatenate(([0], np.cumsum(keep)))
            for buf in (self.buf_words_, self.buf_z_):
                kept = buf[: ptr[-1]][keep]
                buf[:] = 0
                buf[: kept.size] = kept
            self.buf_doc_ptr_[: self.buf_docs_ + 1] = kept_before[ptr]

    def diagnostics(self) -> dict[str, float]:
        C, R, _ = self._sizes()
        ctr, fst = self.particles_.ctr, self.particles_.fst
        return {
            "ess": float(fst[st.LAST_ESS]),
            "ess_fraction": float(fst[st.LAST_ESS]) / self.n_particles,
            "resamples": float(ctr[st.RESAMPLES]),
            "rejuvenations": float(ctr[st.REJUVENATIONS]),
            "reservoir_fill": float(ctr[st.FILL]) / R if R else 0.0,
            "reservoir_tokens": float(ctr[st.FILL]),
            "pool_fill": float(C - 1 - ctr[st.N_FREE]) / (C - 1),
            "pool_peak_fill": float(ctr[st.PEAK_ROWS]) / (C - 1),
            "collapses": float(ctr[st.COLLAPSES]),
            "resample_copied_mb": float(ctr[st.COPIED]) * 4 / 1e6,
            "cow_rows": float(ctr[st.COW_ROWS]),
            "log_evidence_per_token": float(fst[st.LOG_EVIDENCE]) / max(self.evidence_tokens_, 1),
            "initialized": float(self.initialized_),
            "buffered_docs": float(self.buf_docs_),
            "next_gibbs_at_docs": float(self.gibbs_at_),
            "state_mb": self.memory_bytes() / 1e6,
            "model_tokens": float(self._tokens_held()),
        }

    @property
    def log_evidence_(self) -> float:
        """The filter's estimate of log P(w_1..w_i) over the tokens it filtered (not the Gibbs sample), the sum of
        each token's one-step-ahead predictive log-probability; after a Gibbs refinement restarted the particles,
        the terms after it condition on the new sample (a prequential score rather than one marginal's)."""
        return float(self.particles_.fst[st.LOG_EVIDENCE])

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> dict[str, StateValue]:
        state: dict[str, StateValue] = {name: a.copy() for name, a in st.arrays(*self._bundles())}
        for a in _BUFFERS:
            state[a.rstrip("_")] = getattr(self, a).copy()
        state["buf_docs"] = int(self.buf_docs_)
        state["gibbs_docs"] = int(self.gibbs_docs_)
        state["gibbs_at"] = int(self.gibbs_at_)
        state["initialized"] = bool(self.initialized_)
        state["evidence_tokens"] = int(self.evidence_tokens_)
        return state

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.words_ = st.restore(self.words_, state)
        self.doc_rows_ = st.restore(self.doc_rows_, state)
        self.reservoir_ = st.restore(self.reservoir_, state)
        self.particles_ = st.restore(self.particles_, state)
        for a in _BUFFERS:
            if a != "buf_z_" or "buf_z" in state:  # snapshots older than refine_docs have no buf_z (nor need it)
                setattr(self, a, st.restore_array(a.rstrip("_"), getattr(self, a), state))
        self.buf_docs_ = int(state["buf_docs"])
        self.initialized_ = bool(state["initialized"])
        self.gibbs_docs_ = int(state.get("gibbs_docs", 0))
        self.gibbs_at_ = int(state.get("gibbs_at", 0 if self.initialized_ else self.init_docs))
        # Older snapshots did not count them: the tokens seen is the nearest count they hold.
        self.evidence_tokens_ = int(state.get("evidence_tokens", self.particles_.ctr[st.TOKENS]))

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {
            "n_particles": 4,
            "ess_threshold": 0.5,
            "n_rejuvenate": 5,
            "reservoir_size": 50,
            "init_docs": 3,
            "init_max_tokens": 500,
            "refine_docs": 8,
            "init_sweeps": 5,
            "init_restarts": 2,
        }
