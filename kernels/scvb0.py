"""Stochastic collapsed variational Bayes (SCVB0) for LDA, streaming and in constant memory.

Foulds, Boyles, DuBois, Smyth & Welling, "Stochastic Collapsed Variational Bayesian Inference for Latent
Dirichlet Allocation", KDD 2013 (``shared/seeds/000_*``): Algorithm 2 with minibatches, burn-in passes, and
the clumped document update of Eq. 9. Notation follows the seed: N^Φ (W×K expected word–topic counts),
N^Z (K), N^Θ_j (K, per document, local to one ``partial_fit`` call), γ (K, per distinct word of a document).

The numerics live in ``@njit(cache=True, nogil=True)`` functions over typed arrays (:mod:`kernels._scvb0_numba`);
the Python class only
validates input, draws random numbers from ``self.rng_`` (so results are bit-identical for a seed) and
computes the per-minibatch step sizes and corpus sizes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._base import Saved, StateValue, TopicModel, check_interval, check_non_negative_int, check_positive_int
from ._batch import Batch, as_batch, join_batches
from ._moves import Columns, birth_column, birth_counts, delete_column, merge_columns, split_column
from ._schedule import StepSize
from ._scvb0_numba import _RHO_THETA_TABLE, Config, Plan, ThetaSteps, Topics, _fit, _infer
from ._special import digamma_array
from .background import TOPIC_USE_SHARE, background_by_documents

__all__ = ["DOC_HALF_LIFE", "SCVB0"]

#: Documents after which the counts of documents that use each topic are halved (:meth:`SCVB0.background_topic`):
#: they follow the stream, and a hygiene move that emptied a topic is forgotten within a few thousand articles.
DOC_HALF_LIFE = 1000.0


def minka_alpha(n_theta: NDArray[np.float64], alpha: float, iterations: int = 5) -> float:
    """Symmetric Dirichlet α by Minka's fixed point on document–topic counts ``n_theta`` (D×K), from ``alpha``.

    α ← α Σ_j Σ_k [ψ(N_kj + α) − ψ(α)] / (K Σ_j [ψ(N_j + Kα) − ψ(Kα)])  (Asuncion et al., UAI 2009,
    ``shared/seeds/002_*`` §3.1, with a flat prior; Minka 2000). Returns ``alpha`` for an empty batch.
    """
    D, K = n_theta.shape
    n_doc = n_theta.sum(axis=1)
    if D == 0 or not n_doc.sum() > 0:
        return float(alpha)
    a = float(alpha)
    for _ in range(iterations):
        num = float((digamma_array(n_theta + a) - digamma_array(np.array([a]))[0]).sum())
        den = K * float((digamma_array(n_doc + K * a) - digamma_array(np.array([K * a]))[0]).sum())
        if not (num > 0 and den > 0):
            break
        a = min(max(a * num / den, 1e-4), 1e3)
    return a


# -------------------------------------------------------------------------------------------- the model
@dataclass(eq=False, repr=False, kw_only=True)
class SCVB0(TopicModel):
    """Streaming SCVB0 (seed 000, Algorithm 2, Eqs. 5–9) for LDA with K topics over a vocabulary of W slots.

    Parameters
    ----------
    n_topics, n_words, seed
        K, W, and the seed of the only random generator (``rng_``): same seed and input → bit-identical state.
    alpha, eta : float
        Symmetric Dirichlet priors on θ and φ (seed: α=0.1, η=0.01).
    phi_scale, phi_tau, phi_kappa, phi_floor : float
        Step size of N^Φ and N^Z (Eqs. 7–8), ρ^Φ_t = max(floor, scale/(τ+t)^κ) capped at 1, for minibatch t
        (:class:`kernels.StepSize`). The floor keeps the model following the stream: once reached, N^Φ is an
        exponential moving average with a memory of about 1/floor minibatches.
    theta_scale, theta_tau, theta_kappa : float
        Step size of N^Θ_j (Eqs. 6/9), ρ^Θ_t = s/(τ+t)^κ, t = token iteration within the document
        (seed: 1, 10, 0.9).
    batch_size : int
        Most documents per internal minibatch: a ``partial_fit`` batch of n documents is split into ⌈n/B⌉
        minibatches of equal size (±1), each followed by one update of N^Φ.
    burn_in : int
        Passes over each document that update only N^Θ_j before the pass that also feeds N^Φ (seed: 1).
    window : float
        The streaming meaning of the corpus size C of Eqs. 7–8: the model summarises roughly the last
        ``window`` tokens. Minibatch t uses C_t = min(window, tokens seen so far including this minibatch), so
        early on N^Φ carries about the weight of what has actually been seen (η smooths a small sample
        properly; with minibatches smaller than B it trails it: 43 % after 100 one-document batches, against
        100 % after one minibatch of 100) and later it holds ``window`` tokens' worth of counts. It should be about
        (tokens per minibatch)/``phi_floor`` so that the count mass matches the EMA memory.
    transform_passes : int
        CVB0 sweeps over a document in :meth:`transform` (fold-in with the topics fixed).
    start_docs : int
        The stream's first documents, learned again as one batch once this many have come (0: never), so that
        Algorithm 2's first step (ρ^Φ_0 = 1), which replaces the random N^Φ, is taken on a whole minibatch however
        the stream cuts them (:meth:`_learn_start_again`). A quiet stream's first batch may be one article, and a
        first step from one article gives every topic a share of the same words, which the next articles cannot
        tell apart: fed 1-3 articles at a time (K = 20, one pass, seeds 0-2) BBC kept 4-5 topics empty and its
        held-out NPMI was −0.03 to −0.12, against 0.14-0.16 with all 20 used (``docs/scvb0.md``, "The first step").
        One minibatch (``batch_size``'s default): only the first step is redone, and the small steps after it
        keep their refinement (learning the first 300 again, a stream of ten-article batches converged more
        slowly). The documents are kept until then (at most ``start_docs`` plus one batch; snapshots carry them)
        and topic moves wait for the restart (:attr:`starting`). A first batch of ``start_docs`` or more is not
        learned again: nothing would change.
    learn_alpha : bool
        Learn the symmetric α from the stream (:func:`minka_alpha` on each ``partial_fit`` batch's N^Θ, smoothed
        with the step size ρ^Φ); ``alpha`` is then only the starting value. Off by default: measured on
        20 Newsgroups and BBC it did not improve held-out log-likelihood (``docs/topic-hygiene.md``).
    background : float
        b ≥ 0. With b > 0 topic 0 is a background topic: its Dirichlet prior in document j is α_0 = b·C_j
        (C_j its tokens; the other topics keep α), so every document keeps a share of about b/(1+b) for it and
        the words that all documents use (said, told, people, year…) collect there instead of being spread
        over the others; :meth:`background_topic` then returns 0 (unless the slot learned a topic of its own
        instead, which happens: see that method). The slot starts from the first batch's word frequencies
        (:meth:`_start_background`; with ``start_docs``, the first ``start_docs`` documents'), and topic hygiene
        moves a desk it took out of it (``kernels.hygiene``, "split"). Off (0) by default: measured one pass on
        the benchmark corpora (``docs/scvb0.md``), b = 0.02 raises NPMI on BBC K=100 from 0.134 to 0.149 and on
        20NG K=50 from 0.165 to 0.173, but lowers held-out log-likelihood by 0.001–0.015 nats/word.
    background_warmup : float
        Documents over which b grows linearly from 0 to ``background`` (0: b from the start). While the topics are
        still flat, CVB0 gives the slot far more than b/(1+b): with equal likelihoods a document's share for it
        settles at b/(b + Kα/C_j), 91 % at b = 0.2, K = 20, α = 0.1, C_j = 100, and the slot swallows whole
        subjects. On the demo generator's stream through the service's vocabulary (W = 65,536) it held 70 % of
        the mass after 500 articles and still two desks after 18,000; grown over 10,000 documents its words were
        89–93 % generic at 12,000 articles in four runs of six, and every planted row (the generic words' too) was
        recovered from 18,000 on in five (``docs/scvb0.md``, "Background topic").

    Initialisation: N^Φ uniform(0, 1) per entry (Algorithm 2: "randomly initialize"), N^Z = Σ_w N^Φ_w; each
    document's N^Θ_j is uniform(0,1) per entry, rescaled to sum to C_j. With the default schedule ρ^Φ_0 = 1,
    so the random N^Φ only steers the first minibatch and is then replaced (an O(W·K) reset, once).

    Defaults, chosen by held-out log-likelihood per word (document completion, one pass, mean of 2 seeds) with
    ``benchmarks/tune_scvb0.py``; full table and reasoning in ``docs/scvb0.md``:

    ==========================================  ==========  =========  ==================
    config                                      20ng K=100  bbc K=100  Reuters prequential
    ==========================================  ==========  =========  ==================
    seed's Φ schedule (10, 1000, 0.9), B=100    -8.559      -8.791     -7.444
    seed's Φ schedule, B=256                    -8.747      -9.224     -7.671
    **defaults**                                **-8.208**  **-7.703** **-7.217**
    B=16 / B=128                                -8.280/-8.173 -7.700/-7.758 -7.287/-7.207
    κ=0.5 / κ=0.9                               -8.311/-8.215 -7.757/-7.704 -7.308/-7.205
    τ=10                                        -8.248      -7.935     -7.321
    floor=0 / 0.02 / 0.05                       -8.208/-8.208/-8.245  -7.703 (all)  -7.217/-7.217/-7.249
    window=1e5 / 3e5 / 3e6                      -8.362/-8.247/-8.212  -7.725/-7.700/-7.703  -7.231/-7.209/-7.219
    burn_in=0 / 2                               -8.365/-8.243 -7.974/-7.695 -7.475/-7.227
    α=0.05, η=0.005                             -8.178      -7.667     -7.215
    transform_passes=3 / 20                     -8.208/-8.209 -7.707/-7.703 -7.216/-7.219
    ==========================================  ==========  =========  ==================

    Φ: s=1, τ=1 (ρ^Φ_0 = 1): the seed's schedule, tuned for millions of documents, barely leaves the
    random start on thousands. The table predates the tokenizer change; re-measured since on the benchmark
    harness (``docs/benchmarks.md`` corpora, minibatches of 100, one pass, shared fold-in, mean of 3 seeds),
    B=100 with equal-size minibatches beats B=64 (which cut each 100 into 64 + 36): Reuters −6.826 vs −6.845,
    BBC K=100 −7.567 vs −7.583, 20NG K=50 −7.729 vs −7.745. κ=0.8 would gain another 0.016 on Reuters but
    follows a topic that appears mid-stream too slowly (``tests/test_hygiene.py``), so κ stays 0.7
    (``docs/scvb0.md``). Floor 0.01: floors up to
    0.02 cost nothing here (the schedule only reaches 0.01 after ~720 minibatches) and 0.01 gives a memory of
    ~100 minibatches; window 1e6 ≈ (tokens per minibatch)/floor, smaller windows over-smooth. burn_in=1 and the
    seed's Θ schedule and α, η are kept (α=0.05, η=0.005 measured slightly better, see the docs).

    Cost per minibatch: O(tokens·K·(burn_in+1) + touched rows·K); never O(W·K) except a ρ = 1 step (the first
    one with the defaults) and a rare renormalisation of the scale s. Single thread, K=100, 20ng: about
    2.4–4 M tokens/s (``benchmarks/bench_scvb0.py``).
    """

    algorithm: ClassVar[str] = "scvb0"
    #: Only K, W and the seed are fixed on a restored model. The state (N^Φ = s·M, N^Z, the update count t) has
    #: the same meaning under any other setting: the priors α, η enter each update (Eq. 5) and read-out
    #: afresh, the Φ and Θ schedules are evaluated at the stored t and at each document's token count, and
    #: ``batch_size``, ``burn_in``, ``window`` and ``transform_passes`` shape only future updates. The seed acts
    #: only on a new model: a restored one continues the stored random generator.
    restore_fixed: ClassVar[frozenset[str]] = TopicModel.restore_fixed
    _set_state_installs_all = True
    #: Hygiene's own defaults (duplicate threshold 0.25, births), calibrated on SCVB0 (docs/topic-hygiene.md).
    hygiene_defaults: ClassVar[Mapping[str, Any] | None] = MappingProxyType({})

    #: The learned state (:meth:`_init_state`): N^Φ = ``scale_``·M (M under "phi"), N^Z, the update count t,
    #: the α in use (snapshots from before α could be learned lack it: α is the setting) and how many recent
    #: documents use each topic.
    saved: ClassVar[tuple[Saved, ...]] = (
        Saved("phi_", shape=lambda K, W: (W, K)),
        Saved("scale_"),
        Saved("nz_", shape=lambda K, W: (K,)),
        Saved("n_updates_", float),  # an int in snapshots from before fractional steps
        Saved("alpha_", missing=lambda m: float(m.alpha)),
        # Documents that use each topic, and documents, both decayed (:meth:`background_topic`); snapshots from
        # before they were kept start from none.
        Saved("topic_docs_", shape=lambda K, W: (K,), missing=lambda m: np.zeros(int(m.n_topics))),
        Saved("docs_", missing=lambda m: 0.0),
    )

    # Settings (meanings in the class docstring), stored untouched by the generated ``__init__``.
    alpha: float = 0.1
    eta: float = 0.01
    phi_scale: float = 1.0
    phi_tau: float = 1.0
    phi_kappa: float = 0.7
    phi_floor: float = 0.01
    theta_scale: float = 1.0
    theta_tau: float = 10.0
    theta_kappa: float = 0.9
    batch_size: int = 100
    burn_in: int = 1
    window: float = 1_000_000.0
    transform_passes: int = 5
    start_docs: int = 100
    learn_alpha: bool = False
    background: float = 0.0
    background_warmup: float = 0.0

    # ------------------------------------------------------------------ settings
    def _validate_params(self) -> None:
        check_interval("alpha", self.alpha, 0.0, low_open=True, high_open=True)
        check_interval("eta", self.eta, 0.0, low_open=True, high_open=True)
        check_interval("phi_scale", self.phi_scale, 0.0, low_open=True, high_open=True)
        check_interval("theta_scale", self.theta_scale, 0.0, low_open=True, high_open=True)
        check_interval("phi_tau", self.phi_tau, 0.0, high_open=True)
        check_interval("theta_tau", self.theta_tau, 0.0, high_open=True)
        check_interval("phi_kappa", self.phi_kappa, 0.0, 1.0, low_open=True)
        check_interval("theta_kappa", self.theta_kappa, 0.0, 1.0, low_open=True)
        check_interval("phi_floor", self.phi_floor, 0.0, 1.0, high_open=True)
        check_positive_int("batch_size", self.batch_size)
        check_non_negative_int("burn_in", self.burn_in)
        check_interval("window", self.window, 0.0, low_open=True, high_open=True)
        check_positive_int("transform_passes", self.transform_passes)
        check_non_negative_int("start_docs", self.start_docs)
        check_interval("background", self.background, 0.0, high_open=True)
        check_interval("background_warmup", self.background_warmup, 0.0, high_open=True)
        if self.background > 0 and self.n_topics < 2:  # slot 0 would be the only slot, with no topic beside it
            raise ValueError(f"background > 0 needs n_topics >= 2 (slot 0 is the background), got {self.n_topics}")
        if not isinstance(self.learn_alpha, bool | np.bool_):
            raise ValueError(f"learn_alpha must be a bool, got {self.learn_alpha!r}")
        self._rho_phi = StepSize(
            scale=float(self.phi_scale),
            tau=float(self.phi_tau),
            kappa=float(self.phi_kappa),
            floor=float(self.phi_floor),
        )
        scale, tau, kappa = float(self.theta_scale), float(self.theta_tau), float(self.theta_kappa)
        rho_theta = StepSize(scale, tau, kappa)
        table = np.array([rho_theta(t) for t in range(_RHO_THETA_TABLE)])
        self._theta_steps = ThetaSteps(table, scale, tau, kappa)

    def _init_state(self) -> None:
        K, W = int(self.n_topics), int(self.n_words)
        # The first documents, kept to be learned again as one batch (start_docs), and the generator's state
        # before the random N^Φ below is drawn, so that the restart draws it again.
        self.start_: Batch | None = Batch.from_docs([]) if int(self.start_docs) > 0 else None
        self.start_rng_: dict[str, Any] | None = (
            copy.deepcopy(dict(self.rng_.bit_generator.state)) if self.start_ is not None else None
        )
        self.phi_ = self.rng_.random((W, K))  # M, with N^Φ = scale_ · M
        self.scale_ = 1.0
        self.nz_ = self.phi_.sum(axis=0)  # N^Z = Σ_w N^Φ_w
        self.n_updates_ = 0.0  # minibatches that updated N^Φ, a small one counting its fraction (t of ρ^Φ_t)
        self.alpha_ = float(self.alpha)  # the α in use (learned when learn_alpha)
        self.topic_docs_ = np.zeros(K)  # documents that use topic k (TOPIC_USE_SHARE), halved every DOC_HALF_LIFE
        self.docs_ = 0.0  # documents, decayed alike

    # ------------------------------------------------------------------ learning and inference
    @property
    def starting(self) -> bool:
        """Whether the first ``start_docs`` documents are still being gathered: they will be learned again as one
        batch from the random start, so topic moves made meanwhile would be lost (topic hygiene waits)."""
        return self.start_ is not None

    def _after_partial_fit(self, batch: Batch) -> None:
        """Keep the batch while starting, and learn the start again once ``start_docs`` documents have come."""
        if self.start_ is None or not batch.n_docs:
            return
        if self.n_docs_seen_ == batch.n_docs and batch.n_docs >= int(self.start_docs):
            self.start_ = self.start_rng_ = None  # a first batch that big was learned as one batch already
            return
        self.start_ = join_batches((self.start_, batch))
        if self.start_.n_docs >= int(self.start_docs):
            self._learn_start_again()

    def flush(self) -> None:
        """Learn the first documents again as one batch now if fewer than ``start_docs`` came (a short corpus)."""
        if self.start_ is not None and self.start_.n_docs:
            self._learn_start_again()

    def _learn_start_again(self) -> None:
        """Start again from the same random N^Φ (the generator's state is put back) and learn the documents kept
        since the start as one batch: the model is then the one a single batch of them would have made, however
        the stream cut them up (``start_docs``). The mixtures published for them meanwhile came from the model
        learned batch by batch; the batches count is kept."""
        assert self.start_ is not None and self.start_rng_ is not None
        docs, batches = self.start_, self.n_batches_seen_
        self.rng_.bit_generator.state = self.start_rng_
        self._init_state()
        self.start_ = self.start_rng_ = None
        self.n_docs_seen_, self.n_tokens_seen_ = 0, 0.0
        super().partial_fit_transform(docs)
        self.n_batches_seen_ = batches

    def _theta_init(self, batch: Batch) -> NDArray[np.float64]:
        """Initial N^Θ_j per document: uniform(0,1) entries rescaled to sum to C_j (draws from ``rng_``)."""
        u = self.rng_.random((batch.n_docs, int(self.n_topics)))
        csum = np.concatenate(([0.0], np.cumsum(batch.counts)))
        c = csum[batch.indptr[1:]] - csum[batch.indptr[:-1]]
        return u * (c / u.sum(axis=1))[:, None]

    def _minibatches(self, n_docs: int) -> NDArray[np.int64]:
        """Document bounds of the internal minibatches: ⌈n/B⌉ minibatches of as equal sizes as possible.

        Equal sizes, not B, B, …, remainder: before small minibatches took fractional steps (:meth:`_schedule`),
        a small remainder got the step of a full one from a fraction of the documents (measured: with B = 64 and
        batches of 100, the 64 + 36 split cost 0.016–0.025 nats/word of held-out log-likelihood after one pass on
        BBC, 20NG and Reuters); equal sizes keep every step near a whole one.
        """
        B = int(self.batch_size)
        n_mb = (n_docs + B - 1) // B
        return (np.arange(n_mb + 1, dtype=np.int64) * n_docs) // max(n_mb, 1)

    def _schedule(
        self, batch: Batch, mb_docs: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """ρ^Φ and C for each minibatch of ``batch`` (entries of token-less minibatches are placeholders), and t
        after them.

        A minibatch of fewer than B documents with tokens (a quiet stream makes batches of a few articles) counts
        as a fraction f of a step: its ρ is 1 − (1 − ρ^Φ_t)^f and t moves by f, so minibatches adding up to one
        full one forget as much as it. With a whole step each, a night of one-article batches kept only the last
        ~1/ρ articles (at ρ's floor of 0.01, a hundred) instead of the window's ~25,000. f is the minibatch's
        share of the tokens a full minibatch holds, B times the mean document length seen so far: Eq. 7 weighs
        every token alike, so a long article takes a longer step than a brief (with f = d/B a one-document
        minibatch took the same step whatever its length: fed one at a time, the briefs of a stream alternating
        10- and 1,000-token articles held half of N^Φ instead of their 1 %)."""
        n_mb = mb_docs.shape[0] - 1
        bounds = batch.indptr[mb_docs]
        csum = np.concatenate(([0.0], np.cumsum(batch.counts)))
        mb_tokens = csum[bounds[1:]] - csum[bounds[:-1]]
        rhos = np.zeros(n_mb)
        corpus = np.zeros(n_mb)
        t = float(self.n_updates_)
        seen, docs_seen, B = self.n_tokens_seen_, float(self.n_docs_seen_), float(self.batch_size)
        doc_tokens = csum[batch.indptr[1:]] - csum[batch.indptr[:-1]]
        for b in range(n_mb):
            lo, hi = mb_docs[b], mb_docs[b + 1]
            docs_seen += hi - lo
            if mb_tokens[b] > 0:
                seen += mb_tokens[b]
                full = np.count_nonzero(doc_tokens[lo:hi]) >= B  # B documents with tokens: a whole step
                share = 1.0 if full else min(1.0, mb_tokens[b] * docs_seen / (seen * B))  # tokens / (B·mean)
                rhos[b] = 1.0 - (1.0 - self._rho_phi(t)) ** share
                corpus[b] = min(float(self.window), seen)
                t += share
        return rhos, corpus, t

    def _alpha_now(self) -> float:
        """The α in use: the learned ``alpha_`` with ``learn_alpha``, else the ``alpha`` setting (which
        ``set_params`` may change on a restored model)."""
        return float(self.alpha_) if self.learn_alpha else float(self.alpha)

    def _topics(self) -> Topics:
        return Topics(self.phi_, self.nz_)

    def _background_now(self, ahead: int = 0) -> float:
        """The background slot's weight b for documents ``ahead`` of those seen: ``background``, grown linearly
        from 0 over the first ``background_warmup`` documents (with ``ahead`` counted in)."""
        b, warmup = float(self.background), float(self.background_warmup)
        if warmup <= 0.0:
            return b
        return b * min(1.0, (self.n_docs_seen_ + ahead) / warmup)

    def _config(self, ahead: int = 0) -> Config:
        """The settings the numba code reads (α as in use now, :meth:`_alpha_now`; b as for documents ``ahead``
        of those seen, :meth:`_background_now`)."""
        return Config(
            self._alpha_now(),
            self._background_now(ahead),
            float(self.eta),
            self._theta_steps,
            int(self.burn_in),
            int(self.transform_passes),
        )

    def _partial_fit(self, batch: Batch) -> NDArray[np.float64]:
        K = int(self.n_topics)
        if batch.n_docs == 0:
            return np.empty((0, K))
        theta0 = self._theta_init(batch)
        mb_docs = self._minibatches(batch.n_docs)
        rhos, corpus, t = self._schedule(batch, mb_docs)
        plan = Plan(theta0, mb_docs, rhos, corpus)
        config = self._config(batch.n_docs)
        first = self.n_updates_ == 0.0 and t > 0.0
        scale, theta = _fit(batch.csr, self._topics(), float(self.scale_), plan, config)
        self.scale_ = float(scale)
        self.n_updates_ = t
        if first and self.background > 0:
            self._start_background(batch)
        # Each document's own counts N^Θ_j, out of its mixture (normalised N^Θ_j + α_j, Eq. 5's document term).
        doc_len = batch.doc_tokens()
        a = np.full((batch.n_docs, K), config.alpha)
        if config.background > 0:
            a[:, 0] = config.background * doc_len
        n_theta = np.maximum(theta * a.sum(axis=1, keepdims=True) + theta * doc_len[:, None] - a, 0.0)
        decay = 0.5 ** (batch.n_docs / DOC_HALF_LIFE)
        using = (n_theta >= TOPIC_USE_SHARE * doc_len[:, None]) & (doc_len > 0)[:, None]  # an empty one uses none
        self.topic_docs_ = decay * self.topic_docs_ + using.sum(axis=0)
        self.docs_ = decay * self.docs_ + float(np.count_nonzero(doc_len > 0))
        if self.learn_alpha and np.any(corpus > 0):
            if self.background > 0:  # Minka's fixed point is for the symmetric α of the other topics
                n_theta = n_theta[:, 1:]
            rho = 1.0 - float(np.prod(1.0 - rhos[corpus > 0]))  # the batch's minibatches' steps together
            self.alpha_ = (1.0 - rho) * self.alpha_ + rho * minka_alpha(n_theta[doc_len > 0], self.alpha_)
        return theta

    def _start_background(self, batch: Batch) -> None:
        """After the first batch that updated the topics: the background slot's words := that batch's word
        frequencies, its mass kept (N^Z_0 unchanged). A background topic is the stream's word distribution with
        the subjects' words worn away (SAGE, Eisenstein, Ahmed & Xing, ICML 2011, fixes it to the corpus's
        log-frequencies), so it starts there. Started at random like the others, the slot is an ordinary topic
        while its prior is small (``background_warmup``) and may first take a subject and keep it: offline, with
        ``make run``'s settings (K = 20, b = 0.2, warm-up 10,000) and batches of random size as polls return
        them, a desk was still in the slot after 8,000 articles in 3 of 6 runs, against none with this start
        (``docs/scvb0.md``, "The slot's first words"). Kept in the slot over the whole warm-up instead, the
        words stayed the stream's mixture (13 % generic) and the slot took until 20,000 articles to gather the
        generic words. A first batch of a few articles would start it as their desk: with ``start_docs`` the
        first batch holds ``start_docs`` documents at least. The first batch can still give it a desk (``make
        run``'s did): topic hygiene then moves the desk out (``TopicHygiene.split_background``)."""
        _, word_ids, counts = batch.csr
        freq = np.bincount(word_ids, weights=counts, minlength=int(self.n_words))
        column = self.phi_[:, 0]
        mass = float(column.sum())
        if mass > 0.0 and freq.sum() > 0.0:
            column[:] = freq * (mass / freq.sum())

    def _transform(self, batch: Batch) -> NDArray[np.float64]:
        if batch.n_docs == 0:
            return np.empty((0, int(self.n_topics)))
        return _infer(batch.csr, self._topics(), float(self.scale_), self._config())

    def topic_word(self) -> NDArray[np.float64]:
        """φ_k = (N^Φ_·k + η) / Σ_w (N^Φ_wk + η), shape (K, W); rows normalised exactly."""
        # One K×W array, in row order (callers read topics as rows: a transposed view made each of them copy it);
        # the rest is in place.
        phi = np.multiply(self.phi_.T, self.scale_, order="C")
        phi += float(self.eta)
        phi /= phi.sum(axis=1, keepdims=True)
        return phi

    @property
    def background_slot(self) -> int | None:
        """The slot reserved for the background topic: 0 when ``background`` > 0, else None (no φ needed)."""
        return 0 if self.background > 0 else None

    def background_topic(self, phi: NDArray[np.float64] | None = None) -> int | None:
        """The topic that the most recent documents use, if at least half of them use it and twice as many as use
        the next topic (:func:`kernels.background.background_by_documents`; ``phi`` is not needed), else None.

        A document uses a topic holding at least 5 % of its own tokens; the counts are halved every
        :data:`DOC_HALF_LIFE` documents. With ``background`` > 0 that is the slot when it holds the generic words;
        the slot's prior does not always win them (on the demo generator's stream, started at random before
        :meth:`_start_background`, it took the cars desk at b = 0.02 and 0.05), and a slot that took a desk is used
        by its desk's articles only, so it is not marked.
        The test on φ alone (:func:`kernels.background.background_topic`, nearest the corpus-wide word
        distribution) marked a slot holding the generic words of the demo stream at b = 0.2 as nothing, and the
        football desk as the background without a slot."""
        return background_by_documents(self.topic_docs_, self.docs_)

    def topic_weights(self) -> NDArray[np.float64]:
        """N^Z normalised."""
        nz = np.maximum(self.nz_, 0.0)
        tot = nz.sum()
        if not tot > 0:
            return np.full(int(self.n_topics), 1.0 / int(self.n_topics))
        return nz / tot

    def reset_words(self, word_ids: ArrayLike) -> None:
        """Zero the rows of N^Φ for ``word_ids`` and take their mass out of N^Z (O(len(ids)·K))."""
        ids = self._check_word_ids(word_ids)
        if ids.size == 0:
            return
        if self.start_ is not None:  # the kept documents' counts of these slots were another word's
            self.start_ = self.start_.without_words(ids)
        removed = self.phi_[ids].sum(axis=0) * self.scale_
        self.phi_[ids] = 0.0
        left = self.nz_ - removed
        # What is left below 1e-9 of a topic's mass is the subtraction's rounding (~1e-14 after every word went),
        # not counts: kept, topic_weights() would normalise it into a confident-looking prevalence.
        self.nz_ = np.where(left > 1e-9 * self.nz_, left, 0.0)

    def diagnostics(self) -> dict[str, float]:
        return {
            "rho_phi": float(self._rho_phi(self.n_updates_)),
            "window_tokens": float(min(float(self.window), self.n_tokens_seen_)),
            "phi_scale_s": float(self.scale_),
            "alpha": self._alpha_now(),
        }

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        return {"batch_size": 4, "window": 2000.0, "transform_passes": 5, "start_docs": 20}

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> dict[str, StateValue]:
        """The :attr:`saved` state, and while starting the kept documents and the generator's start state."""
        state = super()._get_state()
        if self.start_ is not None:
            state["start_indptr"] = self.start_.indptr.copy()
            state["start_word_ids"] = self.start_.word_ids.copy()
            state["start_counts"] = self.start_.counts.copy()
            state["start_rng"] = copy.deepcopy(self.start_rng_)
        return state

    def _set_state(self, state: Mapping[str, Any]) -> None:
        super()._set_state(state)
        if "start_indptr" in state:  # checked as a batch of documents is (word ids in range, counts positive)
            arrays = (np.array(state[k]) for k in ("start_indptr", "start_word_ids", "start_counts"))
            self.start_ = as_batch(Batch(*arrays), int(self.n_words))
            self.start_rng_ = copy.deepcopy(dict(state["start_rng"]))
        else:  # past its start, or a snapshot from before start_docs
            self.start_ = self.start_rng_ = None

    # ------------------------------------------------------------------ topic moves (kernels.hygiene)
    def _columns(self) -> Columns:
        """N^Φ = s·M and N^Z (count units) as the moves of ``kernels._moves`` take them."""
        return Columns(self.phi_, self.nz_, self.scale_, self.scale_)

    def merge_topics(self, into: int, src: int) -> None:
        """Merge topic ``src`` into ``into`` (N^Φ columns and N^Z added); ``src`` is left empty (φ uniform). The
        documents that use the merged topic are taken as the more of the two counts: a duplicate's documents use
        both halves (their sum counted them twice, and the football desk of the demo stream, merged again and
        again, came to look used by 62 % of the articles); the next batches correct it."""
        merge_columns(self._columns(), into, src)
        self.topic_docs_[into] = max(self.topic_docs_[into], self.topic_docs_[src])
        self.topic_docs_[src] = 0.0

    def delete_topic(self, k: int) -> None:
        """Empty topic ``k``, reassigning its expected tokens to the others (``kernels._moves.delete_column``)."""
        delete_column(self._columns(), float(self.eta), self.topic_weights(), k)
        self.topic_docs_[k] = 0.0

    def birth_topic(
        self, k: int, word_ids: ArrayLike, word_probs: ArrayLike, share: float
    ) -> tuple[float, Callable[[], None]]:
        """Give topic ``k`` a ``share`` of the window's tokens with word distribution ``word_probs`` over
        ``word_ids``, taken from the other topics word by word (``kernels._moves.birth_column``).

        Returns the tokens moved and a function that undoes the move.
        """
        ids, counts = birth_counts(word_ids, word_probs, share, float(self.nz_.sum()))
        return birth_column(self._columns(), k, ids, counts)

    def split_topic(
        self, k: int, j: int, word_ids: ArrayLike, fractions: ArrayLike, rest: float
    ) -> tuple[float, Callable[[], None]]:
        """Move the fraction ``fractions[i]`` of topic ``k``'s expected count of word ``word_ids[i]`` (``rest``
        of every other word's) to the empty topic ``j`` (``kernels._moves.split_column``).

        Returns the tokens moved and a function that undoes the move.
        """
        moved, undo = split_column(self._columns(), k, j, word_ids, fractions, rest)
        return moved * self.scale_, undo
