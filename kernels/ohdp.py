"""Online HDP topic model (the service's ``ohdp``): streaming, one pass, constant memory, stable topic ids.

A collapsed, zero-order (CVB0) treatment of the HDP after Sato, Kurihara & Nakagawa, "Practical collapsed
variational Bayes inference for hierarchical Dirichlet process" (KDD 2012), run stochastically like SCVB0 (seed
000). The topics are collapsed: a document's word–topic responsibilities are γ_wk ∝ φ̂_kw (N_jk^{¬w} + α0 β_k)
with φ̂_kw = (N_wk + η)/(N_k + Vη) held fixed during the document (V: the vocabulary in use, estimated from the
slots' tokens, not the capacity W; docs/ohdp.md, "The vocabulary in use"); the corpus stick β is the posterior mean of
the top-level stick given the expected number of "tables" per topic (E[m_jk], Sato et al.), with the sticks
ordered by size (the size-biased order of the GEM prior). New topics are *born* from the remaining stick: an
empty topic explains every word with φ̂ = 1/V, so a document whose words the existing topics explain badly opens
one. Inside a minibatch, documents see the raw counts and tables of the documents processed before them (as the
sequential first sweep of a collapsed sampler does), so topics are born at the data's own scale rather than all
at once. The W×K statistics G = N^Φ, the step size and the window D are those of :mod:`kernels._hdp_base`.

The seed's own algorithm (Wang, Paisley & Blei 2011, seed 004: stick-breaking online variational Bayes) is
:class:`kernels.ohdp_stick.StickBreakingHDP`; ``docs/ohdp.md`` compares the two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._base import Saved, StateValue, TopicModel, check_interval, check_non_negative_int
from ._batch import CSR
from ._concentration import gamma_fixed_point
from ._hdp_base import Minibatch, OnlineHDPBase
from ._moves import Columns, birth_column, birth_counts, delete_column, merge_columns, split_column
from ._ohdp_numba import Fixed, Step, Written, beta_from_tables, cvb_batch

__all__ = ["BACKGROUND_TABLES", "OnlineHDP", "estimated_vocabulary"]

# Constructor arguments of snapshots written while this class also held the stick-breaking variant
# (``inference="collapsed"``, and ``doc_topics``, which only that variant read).
_LEGACY_PARAMS = ("inference", "doc_topics")


#: How many times the next topic's expected tables the background topic must have (:meth:`OnlineHDP.background_topic`;
#: measured ratios 1.8–6 where a generic topic exists, docs/ohdp.md).
BACKGROUND_TABLES = 1.5


def estimated_vocabulary(tokens: NDArray[np.float64]) -> int:
    """The number of distinct words the stream uses, estimated from each slot's token count: Chao's (1984)
    lower-bound estimator S = S_obs + f1²/(2 f2) (f1(f1 − 1)/2 when f2 = 0), with S_obs the slots seen, f1 and f2
    those seen once and twice (counts in (0, 1] and (1, 2]), capped at the capacity ``tokens.size``; at least 1.

    Early in a stream of real text most words seen are singletons and S is near the capacity (the Dirichlet over
    the whole vocabulary of the kernel's fixed-W equations); a stream of few, repeated words (the demo's
    generator: about 700 words in 65,536 slots) gets S ≈ S_obs. Counting only the slots seen (S_obs) instead
    made the first minibatches of real corpora open extra topics (held-out likelihood 0.02 nats/word worse on
    20 Newsgroups and Reuters, docs/ohdp.md).
    """
    seen = int(np.count_nonzero(tokens))
    f1 = int(np.count_nonzero((tokens > 0.0) & (tokens <= 1.0)))
    f2 = int(np.count_nonzero((tokens > 1.0) & (tokens <= 2.0)))
    unseen = f1 * f1 / (2.0 * f2) if f2 > 0 else f1 * (f1 - 1) / 2.0
    return max(1, min(int(tokens.size), round(seen + unseen)))


@dataclass(eq=False, repr=False, kw_only=True)
class OnlineHDP(OnlineHDPBase):
    """Online hierarchical Dirichlet process topic model with corpus truncation K = ``n_topics`` (collapsed).

    Parameters
    ----------
    n_topics : int
        Corpus-level truncation K (the seed uses 150). Topics carrying mass are counted by ``topics_used``.
    n_words : int
        Vocabulary capacity W (slots). φ̂'s denominator N^Z_k + Vη counts the vocabulary the stream uses, V
        (:func:`estimated_vocabulary`, at most W), not the capacity: an empty topic explains a word with
        φ̂ = 1/V, so opening a topic is as easy in a service's 65,536 slots, few of them filled, as in a corpus's
        exact vocabulary (with 1/W the demo stream's 16 planted topics fell into 4 or 5 muddled ones).
    seed : int
        Seed of ``rng_`` (the order in which free topic ids are handed to new topics).
    gamma : float
        Corpus-level concentration γ (seed: 1); with ``learn_concentrations``, where learning starts.
    alpha : float
        Document-level concentration α0 (seed: 1); with ``learn_concentrations``, where learning starts.
    eta : float
        Topic Dirichlet η (seed: 0.01).
    kappa, tau0 : float
        ρ_t = (τ0 + t)^−κ (seed: κ = 0.6, τ0 = 64); t counts internal minibatches from 0 (the seed's Fig. 2
        from 1: its first step is 65^−0.6 = 0.0817, ours 64^−0.6 = 0.0825), one of d < S documents counting d/S
        (its step is then 1 − (1 − ρ_t)^(d/S)).
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
    settle_docs : int
        Documents during which the document step converges to ``tol``; after them it stops at ``settled_tol``.
        200 with the over-relaxed sweeps, as 500 were without them (``docs/ohdp.md``, "Fewer settling documents").
    settled_tol : float
        The looser tolerance of every document step (learning and inference) once the model has seen
        ``settle_docs`` documents. Early on all topics are empty and alike, and a document needs tens of sweeps
        to break that symmetry (stopped early, it spreads over several new topics that persist as duplicates);
        once the topics are apart, a few sweeps reach what the stochastic updates can use (SCVB0 makes one
        burn-in pass), while a document that opens a new topic still moves a lot and keeps sweeping up to
        ``max_iter``. Measured in ``docs/ohdp.md`` ("Speed against gensim"): 1.2–2.6× faster on the news
        corpora at an equal or better held-out likelihood, every planted topic of the demo generator still recovered.
        Once settled, the sweeps also run in float32 (``kernels._ohdp_numba.cvb_batch``; ``docs/ohdp.md``, "Sweeps in
        float32 once settled").
    relax, settled_relax : float
        Over-relaxation w of the document sweeps (``kernels._ohdp_numba._cvb_doc``) while the model settles and
        after: each sweep moves a word's responsibilities w times as far as the plain update would (never below
        half of it): the plain sweep's fixed points (a document with several may settle on another), reached in
        fewer sweeps. 1 is the plain sweep.
        Measured in ``docs/ohdp.md`` ("Over-relaxed sweeps"): 1.7 / 1.3 sweep BBC 1.2–1.5× faster than 1 / 1 at
        an equal or better held-out likelihood in four runs of five.
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
    #: ``settle_docs``, ``settled_tol``, ``relax``, ``settled_relax``, ``sequential``, ``batch_size``, ``window`` and
    #: the concentrations' priors shape only the document step and future updates.
    restore_fixed: ClassVar[frozenset[str]] = TopicModel.restore_fixed
    #: 13 % faster loaded from numba's cache than in the process that compiled it (kernels/_numba_cache.py).
    compiled_apart: ClassVar[tuple[str, ...]] = ("kernels._ohdp_numba:cvb_batch",)
    _set_state_installs_all = True
    #: Merges and deletes (docs/ohdp.md, "Splinters, and the co-occurrence merge"): merges by distance at the
    #: HDP's threshold 0.35 (its copies of one topic lie at 0.25–0.35; at 0.25 the demo kept its generic words in
    #: two topics and one desk twice) and by co-occurrence, on the latest 1,024 documents (on 256 its small
    #: splinters hold too few documents' worth to be judged); the held-out delete move, scored on documents not
    #: yet learned (the learner collects them after the snapshot it plans on), and the held-out merge of a
    #: background learned as two topics; no births, since the HDP opens topics on its own. It does not take two
    #: subjects it learned as one topic apart, though: up to two splits a pass do (``make run --algorithm ohdp``
    #: kept stocks and tennis in one topic to its end without them; docs/ohdp.md, "Splits").
    hygiene_defaults: ClassVar[Mapping[str, Any] | None] = MappingProxyType(
        {
            "threshold": 0.35,
            "max_births": 0,
            "max_splits": 2,
            "merge_correlation": 0.3,
            "delete_tries": 8,
            "merge_background": True,
            "recent_window": 1024,
        }
    )

    #: The learned state after the corpus statistics (:attr:`OnlineHDPBase.saved`): the expected tables (under
    #: "stick_u": the key of the versions in which this class also held the stick-breaking estimator, so that
    #: snapshots load in both directions), the order of free topic ids, and the tokens per slot (snapshots from
    #: before V was estimated lack them: a slot holding statistics counts as seen often, 3 tokens).
    saved: ClassVar[tuple[Saved, ...]] = (
        *OnlineHDPBase.saved,
        Saved("tables_", key="stick_u", shape=lambda K, W: (K,)),
        Saved("topic_rank_", np.int64, shape=lambda K, W: (K,)),
        Saved("word_tokens_", shape=lambda K, W: (W,), missing=lambda m: np.where(m.topic_stat_.any(axis=1), 3.0, 0.0)),
    )

    # Settings of this estimator (those both online HDPs take come first: :class:`OnlineHDPBase`).
    sequential: bool = True
    settle_docs: int = 200
    settled_tol: float = 1e-2
    relax: float = 1.7
    settled_relax: float = 1.3

    tables_: NDArray[np.float64] = field(init=False)
    topic_rank_: NDArray[np.int64] = field(init=False)
    word_tokens_: NDArray[np.float64] = field(init=False)

    def _validate_params(self) -> None:
        super()._validate_params()
        if not isinstance(self.sequential, bool | np.bool_):
            raise ValueError(f"sequential must be a bool, got {self.sequential!r}")
        check_interval("settled_tol", self.settled_tol, 0.0, high_open=True)
        check_non_negative_int("settle_docs", self.settle_docs)
        for name in ("relax", "settled_relax"):  # w < 1 under-relaxes (slower, but convergent); w ≥ 2 diverges
            check_interval(name, getattr(self, name), 0.0, 2.0, low_open=True, high_open=True)

    def _init_state(self) -> None:
        K, W = int(self.n_topics), int(self.n_words)
        self._init_corpus_state(np.zeros((W, K)))
        self.tables_ = np.zeros(K)  # Σ_j E[m_jk]: the expected tables per topic, the corpus stick's statistics
        # The order in which free topic ids are handed to new topics.
        self.topic_rank_ = self.rng_.permutation(K).astype(np.int64)
        self.word_tokens_ = np.zeros(W)  # tokens of each slot in the learned documents since its last reset

    def _vocab(self) -> int:
        """V, the vocabulary φ̂'s Dirichlet spreads η over: :func:`estimated_vocabulary` of the slots' tokens."""
        return estimated_vocabulary(self.word_tokens_)

    def _documents(self, mb: Minibatch, update: bool) -> tuple[int, NDArray[np.float64], tuple[float, float]]:
        tables = np.zeros(int(self.n_topics))
        alpha = self._alpha()
        settled = mb.seen >= int(self.settle_docs)
        if update:  # a learned document's words are in use from its own step on
            self.word_tokens_[mb.rows] += np.bincount(mb.slots, weights=mb.docs.counts, minlength=mb.rows.shape[0])
        step = Step(
            float(self.eta),
            self._vocab(),
            alpha,
            self._gamma(),
            float(self.settled_tol) if settled else float(self.tol),
            int(self.max_iter),
            bool(self.sequential) and update,
            float(self.settled_relax) if settled else float(self.relax),
            settled,  # sweeps in float32 once settled (kernels._ohdp_numba.cvb_batch)
        )
        fixed = Fixed(
            self.topic_stat_[mb.rows] * self.scale_, self.topic_total_ * self.scale_, self.tables_, self.topic_rank_
        )
        iters = cvb_batch(
            CSR(mb.docs.indptr, mb.slots, mb.docs.counts), fixed, step, Written(mb.stat, tables, mb.theta)
        )
        # (C2): Σ_j E[m_j] = the minibatch's expected tables; Σ_j −E[log w_j] at the α0 the step used
        return iters, tables, (float(tables.sum()), self._doc_log_aux(mb.docs))

    def _update_sticks(self, stick_stat: NDArray[np.float64], rho: float, mult: float) -> None:
        self.tables_ = (1.0 - rho) * self.tables_ + rho * mult * stick_stat

    def _beta(self) -> NDArray[np.float64]:
        return beta_from_tables(self.tables_, self.topic_rank_, self._gamma())

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
        # The versions that stored the tables under "stick_u" also read a "stick_v" (the stick-breaking
        # estimator's v): an empty one, so that they load these snapshots.
        return {**super()._get_state(), "stick_v": np.zeros(0)}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        super()._set_state(state)
        if sorted(self.topic_rank_.tolist()) != list(range(int(self.n_topics))):
            raise ValueError("topic_rank must be a permutation of the topic ids")

    def background_topic(self, phi: NDArray[np.float64] | None = None) -> int | None:
        """The topic that documents open the most tables for, if it has at least :data:`BACKGROUND_TABLES` times
        the next topic's expected tables (``phi`` is not needed), else None.

        In the Chinese restaurant franchise a document opens a table for each topic it draws on, so the expected
        tables per document, E[m_k]/D (``tables_`` / ``window``), measure how many documents use topic k whatever
        their subject: the background words (docs/ohdp.md, "The background topic"). Measured one pass, T = 150:
        the demo generator's background 1.21 tables per document against 0.20 for the next topic; BBC's "said new
        people told" 0.44 against 0.23; Reuters' "said company dlrs mln" 0.61 against 0.34.
        """
        if int(self.n_topics) < 2:
            return None
        first, second = np.argsort(-self.tables_, kind="stable")[:2]
        top = float(self.tables_[first])
        return int(first) if top > 0.0 and top >= BACKGROUND_TABLES * float(self.tables_[second]) else None

    def reset_words(self, word_ids: ArrayLike) -> None:
        super().reset_words(word_ids)
        self.word_tokens_[self._check_word_ids(word_ids)] = 0.0

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
        got = delete_column(self._columns(), float(self.eta), self.topic_weights(), k, vocab=self._vocab())
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
