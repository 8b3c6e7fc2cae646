"""Topic hygiene: merge duplicate topics, retire negligible ones, split muddled ones, and give a freed slot to what
the model misses.

Run at snapshot time, off the batch loop, on a kernel that supports the topic moves the settings use
(:class:`kernels.SCVB0` and :class:`kernels.OnlineHDP`, the collapsed HDP, all of them;
:class:`kernels.ParticleFilterLDA` merges only, with ``max_births=0``: :meth:`TopicHygiene.missing_moves`)::

    hygiene = TopicHygiene()
    events = hygiene.apply(model, recent_docs)   # recent_docs: a kernels.Batch of recent documents, or None
    events = hygiene.apply(model, recent_docs, unseen_docs)  # with the held-out delete move: documents not learned

The moves edit the kernel's summed sufficient statistics in place (memoized moves: Hughes & Sudderth, NIPS 2013,
"Memoized online variational inference for Dirichlet process mixture models", and their ``bnpy`` library, whose
``birth``/``merge``/``delete`` moves change the whole-data summaries instead of revisiting the data), always as a
*reassignment* of expected tokens between topics (``kernels._moves``), never adding or losing data.

Moves and their acceptance rules, in the order ``apply`` runs them:

retire
    A live topic whose weight (``model.topic_weights()``) is below ``retire_below`` is deleted; its tokens go
    to the other topics by responsibility (bnpy's delete move). Off by default (``retire_below=0``): on real
    corpora it bounds the HDP's count at a cost in held-out likelihood (``docs/ohdp.md``), so the HDP deletes by
    the held-out move below instead.
delete (held-out)
    Off by default (``delete_tries=0``). With ``unseen_docs`` (documents the model has not learned yet) and
    past the warm-up, live topics under ``delete_below`` (by prevalence or by share of the tokens, whichever is
    smaller: :meth:`~kernels.TopicModel.token_shares`) are deleted, smallest first in groups, when document
    completion on ``unseen_docs`` does not drop by more than ``delete_tolerance`` (:mod:`kernels._delete`); they
    are retire events. Scored on documents already learned, the topics born from them would pass. For the HDP.
background merge (held-out)
    Off by default (``merge_background=False``). With ``unseen_docs`` and past the warm-up: the two heaviest
    topics are merged when the merged topic is then the background the model marks and document completion on
    ``unseen_docs`` does not drop by more than ``delete_tolerance`` plus
    :data:`kernels._background_merge.TOLERANCE` (:mod:`kernels._background_merge`: the generic words learned as two
    topics, which neither merge below sees). For the HDP.
merge
    Two live topics whose word distributions are closer than ``threshold`` in Hellinger distance,
    H(p, q) = sqrt(1 − Σ_w sqrt(p_w q_w)), are merged: the smaller into the larger (the larger keeps its id).
    Bryant & Sudderth (NIPS 2012, "Truly nonparametric online variational inference for HDPs") merge
    topic pairs that their objective prefers after the merge; in a collapsed model with fixed topics a pair
    under the threshold explains the same words, so its merge changes the likelihood of no document by more
    than the difference between the two rows. The closest pair goes first, then distances to the merged topic
    are recomputed, until no pair is under the threshold. With ``merge_correlation`` and ``recent_docs``, two
    live topics whose proportions in ``recent_docs`` correlate above it are merged as well, however far apart
    their words (:mod:`kernels._cooccur`: splinters of one topic share its documents; off by default, for the
    HDP). The default threshold, 0.25, is calibrated on the planted corpora (``docs/topic-hygiene.md``):
    duplicates learned by SCVB0 lie at 0.05–0.09 on the demo generator's corpus and 0.16–0.18 on an LDA-drawn
    one, distinct learned topics at ≥ 0.25 there and ≥ 0.23 on 20 Newsgroups. The collapsed HDP's splinters of
    one topic lie at 0.25–0.35 when they are copies and far beyond when they split its words between them: the
    HDP merges at 0.35 and by co-occurrence (``OnlineHDP.hygiene_defaults``).
near merge (held-out)
    Off by default (``near_merge_tries=0``). With ``unseen_docs``, after the merges by distance: live pairs whose
    proportions in ``unseen_docs`` correlate above :data:`kernels._near_merge.CORRELATED` (0.3), then those between
    ``threshold`` and :data:`kernels._near_merge.BELOW` (0.5) apart, the background slot in none (a desk a split
    has just moved out of it lies near it), are merged on a copy, the correlated ones first, then the closest, and
    the merge is kept when document completion on ``unseen_docs`` drops by less than
    :data:`kernels._near_merge.TOLERANCE` nats per token of the pair (:mod:`kernels._near_merge`: one subject learned
    as two topics, which no other merge sees; at most ``near_merge_tries`` proposals).
split
    Off by default (``max_splits=0``; measured in ``docs/topic-hygiene.md``; the online HDP's ``hygiene_defaults``
    split, since it has no births: ``docs/ohdp.md``, "Splits"). If ``recent_docs`` is given, a
    slot is free and the model is past ``warmup_docs``: each live topic holding
    ≥ ``split_min_tokens`` of the build documents' tokens (by responsibility θ_dk φ_kw / Σ_j θ_dj φ_jw) is fitted
    two halves by EM (``kernels._split``); it is *muddled* when they lie more than ``split_threshold`` apart
    (Hellinger) and the smaller holds ≥ ``split_min_share`` of its tokens. Most separated first, the smaller
    half's share of each word of the topic's whole-window statistics moves to the free slot (the larger half keeps
    the slot and id); *accepted* if the held-out gain exceeds ``split_min_gain`` (as births), else undone exactly.
    At most ``max_splits`` splits and 2·``max_splits`` tries per call; no free slot, no split (a split never
    pushes out a live topic). The background slot (a kernel's ``background_slot``) is never split into, but it is
    tried once per call even with ``max_splits=0``: a desk it took while its prior was still small (SCVB0's
    ``background_warmup``) keeps it for thousands of documents, and no other move takes a desk out of it. Its
    half nearer the build documents' word frequencies (the generic words) stays, the other moves, whichever is
    smaller (``SplitProposal.keeping_nearer``). Bryant & Sudderth (NIPS 2012) split topics online; Hughes &
    Sudderth (bnpy) accept proposals on the whole-data objective.
birth
    If ``recent_docs`` is given and a slot is free (weight below ``empty_below`` after the moves above), a
    topic is proposed from what the model explains worst: the documents of ``recent_docs`` (even positions)
    whose per-token log-likelihood Σ c_w log Σ_k θ_dk φ_kw / N_d is in the worst ``birth_quantile``; one new
    word distribution ψ is fitted to them by EM with the existing topics fixed (each document d mixes ψ
    with its current prediction p_dw at its own weight π_d), started from the worst document's words weighted
    by their surprise c_w / p_dw — the targeted-subsample birth of Hughes & Sudderth and of Bryant & Sudderth
    (new topics from the documents the model explains worst). The proposal gets the share of the
    window's tokens that ψ took in those documents, reassigned word by word from the other topics. It is
    *accepted* if the mean per-token log-likelihood of the held-out half of ``recent_docs`` (odd positions,
    θ refitted by ``model.transform``) rises by more than ``birth_min_gain`` nats; otherwise it is undone
    exactly. Up to ``max_births`` births per call; the first rejection ends the births.

Cost at K = 100, W = 65,536: one K×W square root and one K×K×W product for the merges (≈ 0.1 s), and per birth
proposal two ``model.transform`` calls on ``recent_docs`` and one ``topic_word()`` (≈ 0.05–0.2 s for a few
hundred documents). Splits, when a slot is free: one ``transform`` of the build documents and a small EM per
large topic (entries of the build documents that the topic holds), then per tried split one ``transform`` of
the held-out documents and one ``topic_word()``.

Events are plain dataclasses (:class:`Event`) with the kernel's slot ids; :mod:`service.lineage` turns them
into stable topic ids with history.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._background_merge import TOLERANCE, heldout_background_merge
from ._base import check_interval, check_non_negative_int, check_positive_int, mass_topics
from ._batch import Batch, RecentDocs, as_batch, recent_batch
from ._birth import birth_proposal
from ._cooccur import CORRELATION_MIN_DOCS, correlated_merges
from ._delete import heldout_deletes
from ._distinct import distinct_documents
from ._events import Event, SupportsTopicMoves
from ._moves import mean_loglik, swap_for_merge, token_probs
from ._near_merge import heldout_near_merges
from ._replay import replay_moves
from ._split import SplitProposal, muddled_topics

__all__ = [
    "DEFAULT_THRESHOLD",
    "SPLIT_THRESHOLD",
    "Event",
    "RecentDocs",
    "TopicHygiene",
    "hellinger_matrix",
    "mass_topics",
    "recent_batch",
]

#: Hellinger distance below which two topics are duplicates (see the module docstring for the calibration).
DEFAULT_THRESHOLD = 0.25
#: Distinct documents (:func:`kernels._distinct.distinct_documents`) the co-occurrence merges and the held-out
#: moves need: with fewer, correlations and held-out scores are noise, and a flood of one story is one document.
MIN_EVIDENCE_DOCS = 32
#: Hellinger distance between a topic's two halves above which it is muddled (calibration: docs/topic-hygiene.md).
SPLIT_THRESHOLD = 0.4


def hellinger_matrix(phi: NDArray[np.floating]) -> NDArray[np.float64]:
    """Pairwise Hellinger distances between the rows of ``phi`` (K×W, rows sum to 1), shape K×K."""
    root = np.sqrt(np.asarray(phi, dtype=np.float64))
    bc = root @ root.T
    return np.sqrt(np.clip(1.0 - bc, 0.0, 1.0))


class TopicHygiene:
    """Duplicate merges, retirements, splits and births for a streaming topic model (see the module docstring).

    Parameters
    ----------
    threshold : float
        Hellinger distance under which two topics are duplicates and are merged (default 0.25).
    retire_below : float
        Topics with a weight under this are deleted (0 disables).
    empty_below : float
        A slot with a weight under this is free for a birth.
    warmup_docs : int or None
        No retirements or merges before the model has learned from this many documents (``None``: 40 per topic
        slot). Early in a stream the topics have not separated yet: on 20 Newsgroups at K = 100, dozens of
        topics are still within Hellinger 0.1 of one another after 3,000 documents, merging them only churns
        slots (91 merges in one pass with a 2,000-document warm-up, 7 with 4,000) and costs held-out
        likelihood and coherence.
    max_merges : int or None
        Merges per call; ``None``: a quarter of the slots. A bound, so that a snapshot taken before the topics
        have separated (the first batches of a stream, when every topic is still near the corpus mean) cannot
        collapse the model.
    max_births : int
        Birth proposals per call (0 disables births).
    max_splits : int
        Splits per call; 0 (the default) disables splits: measured, they replace births without a clear gain
        (``docs/topic-hygiene.md``). ``max_splits=2`` turns them on.
    split_threshold : float
        Hellinger distance between a topic's two halves above which it is muddled.
    split_min_share : float
        The smaller half's least share of the topic's tokens in the build documents.
    split_min_tokens : float
        The fewest (expected) tokens of the build documents a topic must hold to be considered for a split.
    split_min_gain : float
        Held-out gain (nats per token) a split must bring to be kept.
    split_background : bool
        Try to split the background slot once per call even with ``max_splits=0`` (its generic half stays, the
        other leaves: "split" above). On by default.
    birth_quantile : float
        The share of the build documents, worst explained first, that a birth proposal is fitted to.
    birth_min_gain : float
        Held-out gain (nats per token) a birth must bring to be kept.
    em_iterations : int
        EM iterations of a birth proposal and of a split's two halves.
    merge_correlation : float or None
        With ``recent_docs``, merge two live topics whose proportions θ_·k in them correlate above this (Pearson;
        :mod:`kernels._cooccur`); ``None`` (the default) disables it. On the planted corpora every pair above 0.3
        was two parts of one planted topic, and no two planted topics' parts correlated above 0.24
        (``docs/ohdp.md``).
    delete_tries, delete_below, delete_tolerance
        Scored proposals per call of the held-out delete move (0 disables), the weight (prevalence or share of the
        tokens) under which a topic is a candidate, and the drop of the completion score (nats per token) still
        accepted.
    merge_background : bool
        Try the held-out background merge (above) once per call.
    near_merge_tries : int
        Scored proposals per call of the held-out near merge (above); 0 (the default) disables it: on 20 Newsgroups
        and BBC it cost 0.002–0.007 nats per word of held-out likelihood (``docs/topic-hygiene.md``, "Near pairs").
    recent_window : int
        How many of the latest learned documents the moves are planned on: :meth:`apply` uses the last this many
        of ``recent_docs``, and a caller keeps that many (:class:`RecentDocs`). The co-occurrence merge needs
        enough of them for a small topic's proportions to be more than noise: the online HDP's splinters that
        hold 1.5–2 % of the mass hold fewer than ``CORRELATION_MIN_DOCS`` documents' worth of 256 documents, so
        the HDP plans on 1,024 (``docs/ohdp.md``).
    """

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        *,
        retire_below: float = 0.0,
        empty_below: float = 1e-4,
        warmup_docs: int | None = None,
        max_merges: int | None = None,
        max_births: int = 2,
        max_splits: int = 0,
        split_threshold: float = SPLIT_THRESHOLD,
        split_min_share: float = 0.1,
        split_min_tokens: float = 200.0,
        split_min_gain: float = 0.002,
        split_background: bool = True,
        birth_quantile: float = 0.2,
        birth_min_gain: float = 0.002,
        em_iterations: int = 30,
        delete_tries: int = 0,
        delete_below: float = 0.05,
        delete_tolerance: float = 0.0,
        merge_correlation: float | None = None,
        merge_background: bool = False,
        near_merge_tries: int = 0,
        recent_window: int = 256,
    ) -> None:
        check_interval("threshold", threshold, 0.0, 1.0, low_open=True)
        check_interval("retire_below", retire_below, 0.0, 1.0, high_open=True)
        check_interval("empty_below", empty_below, 0.0, 1.0, high_open=True)
        if warmup_docs is not None and (
            isinstance(warmup_docs, bool) or not isinstance(warmup_docs, int) or warmup_docs < 0
        ):
            raise ValueError(f"warmup_docs must be a non-negative integer or None, got {warmup_docs!r}")
        if max_merges is not None:
            check_positive_int("max_merges", max_merges)
        check_non_negative_int("max_births", max_births)
        check_non_negative_int("max_splits", max_splits)
        check_interval("split_threshold", split_threshold, 0.0, 1.0, low_open=True)
        check_interval("split_min_share", split_min_share, 0.0, 0.5, low_open=True)
        check_interval("split_min_tokens", split_min_tokens, 0.0)
        check_interval("split_min_gain", split_min_gain, 0.0)
        if not isinstance(split_background, bool):
            raise ValueError(f"split_background must be a bool, got {split_background!r}")
        check_interval("birth_quantile", birth_quantile, 0.0, 1.0, low_open=True)
        check_interval("birth_min_gain", birth_min_gain, 0.0)
        check_positive_int("em_iterations", em_iterations)
        self.threshold = float(threshold)
        self.retire_below = float(retire_below)
        self.empty_below = float(empty_below)
        self.warmup_docs = warmup_docs
        self.max_merges = max_merges
        self.max_births = int(max_births)
        self.max_splits = int(max_splits)
        self.split_threshold = float(split_threshold)
        self.split_min_share = float(split_min_share)
        self.split_min_tokens = float(split_min_tokens)
        self.split_min_gain = float(split_min_gain)
        self.split_background = split_background
        self.birth_quantile = float(birth_quantile)
        self.birth_min_gain = float(birth_min_gain)
        self.em_iterations = int(em_iterations)
        check_non_negative_int("delete_tries", delete_tries)
        check_interval("delete_below", delete_below, 0.0, 1.0)
        check_interval("delete_tolerance", delete_tolerance, 0.0)
        self.delete_tries, self.delete_below, self.delete_tolerance = delete_tries, delete_below, delete_tolerance
        if merge_correlation is not None:
            check_interval("merge_correlation", merge_correlation, 0.0, 1.0, high_open=True)
        self.merge_correlation = merge_correlation
        if not isinstance(merge_background, bool):
            raise ValueError(f"merge_background must be a bool, got {merge_background!r}")
        self.merge_background = merge_background
        check_non_negative_int("near_merge_tries", near_merge_tries)
        self.near_merge_tries = int(near_merge_tries)
        check_positive_int("recent_window", recent_window)
        self.recent_window = int(recent_window)

    @property
    def scores_unseen(self) -> bool:
        """True when a move is scored on documents the model has not learned (``unseen_docs`` of :meth:`apply`):
        the held-out delete move, the background merge or the near merge."""
        return self.delete_tries > 0 or self.merge_background or self.near_merge_tries > 0

    def missing_moves(self, model: object) -> list[str]:
        """The kernel methods these settings need that ``model`` lacks: ``merge_topics`` always, ``delete_topic``
        for retirements and the held-out delete, ``birth_topic`` and ``split_topic`` when births or splits are on
        (the particle filter merges only: its ``hygiene_defaults`` turn births off)."""
        needed = ["merge_topics"]
        if self.retire_below > 0 or self.delete_tries > 0:
            needed.append("delete_topic")
        if self.max_births > 0:
            needed.append("birth_topic")
        if self.max_splits > 0:
            needed.append("split_topic")
        return [name for name in needed if not callable(getattr(model, name, None))]

    # ------------------------------------------------------------------ the entry point
    def apply(
        self, model: SupportsTopicMoves, recent_docs: Batch | None = None, unseen_docs: Batch | None = None
    ) -> list[Event]:
        """Retire, delete and merge into the background (held-out, scored on ``unseen_docs``), merge (near pairs:
        held-out), split, then try births (on ``recent_docs``) on ``model`` in place; return what was done, in
        order. Each move reads each document once (:func:`kernels._distinct.distinct_documents`)."""
        missing = self.missing_moves(model)
        if missing:
            raise TypeError(
                f"{type(model).__name__} does not support the topic moves these settings use (no {', '.join(missing)})"
            )
        if getattr(model, "starting", False):  # its first documents will be learned again (SCVB0.start_docs)
            return []
        docs, unseen = self._evidence(model, recent_docs, unseen_docs)
        warmup = self.warmup_docs if self.warmup_docs is not None else 40 * int(model.n_topics)
        warm = int(model.n_docs_seen_) >= warmup
        keep = getattr(model, "background_slot", None)  # no move empties it: its prior holds the generic words
        events = self._removals(model, docs, unseen, keep) if warm else []
        background_split = self.split_background and keep is not None and callable(getattr(model, "split_topic", None))
        splits = warm and (self.max_splits > 0 or background_split)
        if docs is not None and docs.n_docs >= 4 and (self.max_births > 0 or splits):
            idx = np.arange(docs.n_docs)
            build, valid = docs.take(idx[0::2]), docs.take(idx[1::2])
            if splits:
                merged = {e.into for e in events if e.kind == "merge"}
                events += self._splits(model, build, valid, merged, keep)
            if self.max_births > 0:
                events += self._births(model, build, valid, keep)
        return events

    def _evidence(
        self, model: SupportsTopicMoves, recent_docs: Batch | None, unseen_docs: Batch | None
    ) -> tuple[Batch | None, Batch | None]:
        """The documents the moves read: the newest ``recent_window`` of ``recent_docs``, and ``unseen_docs`` when
        they are enough to judge by (:data:`MIN_EVIDENCE_DOCS`); each document once, since copies and empty
        documents made hygiene merge and delete real topics (:mod:`kernels._distinct`)."""
        docs = as_batch(recent_docs, model.n_words) if recent_docs is not None else None
        if docs is not None and docs.n_docs > self.recent_window:
            docs = docs.slice(docs.n_docs - self.recent_window, docs.n_docs)
        docs = distinct_documents(docs) if docs is not None else None
        unseen = distinct_documents(as_batch(unseen_docs, model.n_words)) if unseen_docs is not None else None
        if unseen is not None and unseen.n_docs < MIN_EVIDENCE_DOCS:
            unseen = None
        return docs, unseen

    def _removals(
        self, model: SupportsTopicMoves, docs: Batch | None, unseen: Batch | None, keep: int | None
    ) -> list[Event]:
        """The moves that free slots, in order: retirements, held-out deletes and the merge into the background
        (on ``unseen``), then merges of duplicates, of near pairs (on ``unseen``) and of correlated topics (on
        ``docs``)."""
        events = self._retire(model, keep)
        if unseen is not None and self.delete_tries > 0:
            events += [
                Event("retire", (k,), None, w)
                for k, w in heldout_deletes(
                    model,
                    unseen,
                    candidates_below=self.delete_below,
                    empty_below=self.empty_below,
                    tolerance=self.delete_tolerance,
                    max_tries=self.delete_tries,
                    keep=keep,
                )
            ]
        if unseen is not None and self.merge_background:
            joined = heldout_background_merge(model, unseen, tolerance=self.delete_tolerance + TOLERANCE, keep=keep)
            events += [joined] if joined is not None else []
        merges = self._merge(model, keep)
        if unseen is not None and self.near_merge_tries > 0:
            merges += heldout_near_merges(
                model,
                unseen,
                low=self.threshold,
                empty_below=self.empty_below,
                max_tries=self.near_merge_tries,
                keep=keep,
            )
        if docs is not None and self.merge_correlation is not None and docs.n_docs >= MIN_EVIDENCE_DOCS:
            merges += correlated_merges(
                model,
                docs,
                threshold=self.merge_correlation,
                empty_below=self.empty_below,
                min_docs=CORRELATION_MIN_DOCS,
                limit=self._merge_limit(model) - len(merges),
                keep=keep,
            )
        return events + merges

    def replay(
        self, model: SupportsTopicMoves, events: Sequence[Event], forgotten: ArrayLike | None = None
    ) -> list[Event]:
        """Make on ``model`` the moves that :meth:`apply` chose on a copy of it; return those still made.

        So the moves can be *planned* on a copy, off the batch loop (the service plans on the snapshot it has
        just captured), and *made* on the live model later, when they cost only row updates. A move that no
        longer fits the live model is skipped (:func:`kernels._replay.replay_moves` says when); ``forgotten``:
        word ids whose vocabulary slots were given to other words since the copy.
        """
        return replay_moves(model, events, self.empty_below, forgotten)

    # ------------------------------------------------------------------ retire
    def _retire(self, model: SupportsTopicMoves, keep: int | None) -> list[Event]:
        if self.retire_below <= 0.0:
            return []
        events: list[Event] = []
        weights = model.topic_weights()
        for k in np.argsort(weights, kind="stable"):
            w = float(weights[k])
            if w >= self.retire_below:
                break
            if w < self.empty_below or k == keep:
                continue  # already free, or the background slot
            if np.count_nonzero(weights >= self.empty_below) <= 1:
                break
            model.delete_topic(int(k))
            events.append(Event("retire", (int(k),), None, w))
            weights = model.topic_weights()
        return events

    # ------------------------------------------------------------------ merge
    def _merge_limit(self, model: SupportsTopicMoves) -> int:
        """Merges per call, by distance and by co-occurrence together (``max_merges``)."""
        return self.max_merges if self.max_merges is not None else max(1, int(model.n_topics) // 4)

    def _merge(self, model: SupportsTopicMoves, keep: int | None) -> list[Event]:
        weights = model.topic_weights().copy()
        live = np.flatnonzero(weights >= self.empty_below)
        if live.size < 2:
            return []
        root = np.sqrt(model.topic_word()[live])
        dist = np.sqrt(np.clip(1.0 - root @ root.T, 0.0, 1.0))
        np.fill_diagonal(dist, np.inf)
        dead = np.zeros(live.size, dtype=bool)
        events: list[Event] = []
        limit = self._merge_limit(model)
        while len(events) < limit:
            flat = int(np.argmin(dist))
            i, j = divmod(flat, dist.shape[0])
            d = float(dist[i, j])
            if not d < self.threshold:
                break
            a, b = int(live[i]), int(live[j])
            if swap_for_merge(a, b, weights, keep):
                i, j, a, b = j, i, b, a
            model.merge_topics(a, b)  # b into a: the larger topic (or the background slot) keeps its id
            events.append(Event("merge", (b,), a, d))
            wa, wb = weights[a], weights[b]
            merged = (wa * root[i] ** 2 + wb * root[j] ** 2) / max(wa + wb, 1e-300)
            root[i] = np.sqrt(merged)
            weights[a], weights[b] = wa + wb, 0.0
            dead[j] = True
            row = np.sqrt(np.clip(1.0 - root @ root[i], 0.0, 1.0))
            row[dead] = np.inf
            row[i] = np.inf
            dist[i, :] = row
            dist[:, i] = row
            dist[j, :] = np.inf
            dist[:, j] = np.inf
        return events

    # ------------------------------------------------------------------ split
    def _splits(
        self, model: SupportsTopicMoves, build: Batch, valid: Batch, merged: set[int | None], background: int | None
    ) -> list[Event]:
        """Split muddled topics into free slots, never into the ``background`` slot; never a topic that a merge of
        this call has just made (its halves were judged one topic a moment ago: splitting it again would only undo
        the merge). Up to ``max_splits`` of the other topics, and the background slot once, whatever
        ``max_splits``: a desk it took before its prior grew has no other way out (its generic half stays,
        :meth:`_muddled`)."""
        weights = model.topic_weights()
        free = [int(j) for j in np.flatnonzero(weights < self.empty_below) if j != background]
        if not free:
            return []
        muddled = [(k, prop) for k, prop in self._muddled(model, build, weights, background) if k not in merged]
        if not muddled:
            return []
        events: list[Event] = []
        base = mean_loglik(model.transform(valid), model.topic_word(), valid)
        tries = made = 0  # of the topics other than the background slot
        for k, prop in muddled:
            if not free:
                break
            if k != background:
                if made >= self.max_splits or tries >= 2 * self.max_splits:
                    continue
                tries += 1
            j = free.pop(0)
            _, undo = model.split_topic(k, j, prop.word_ids, prop.fractions, prop.rest)
            score = mean_loglik(model.transform(valid), model.topic_word(), valid)
            gain = score - base
            if not gain > self.split_min_gain:
                undo()
                free.insert(0, j)
                continue
            proposal = (prop.word_ids, prop.fractions, prop.rest)
            events.append(Event("split", (k, j), None, float(gain), proposal=proposal))
            made += int(k != background)
            base = score
        return events

    def _muddled(
        self, model: SupportsTopicMoves, build: Batch, weights: NDArray[np.float64], background: int | None
    ) -> list[tuple[int, SplitProposal]]:
        """The live topics whose two halves are far apart, most separated first (``kernels._split``)."""
        phi = model.topic_word()
        theta = model.transform(build)
        bg = background if self.split_background else None
        live = [
            int(k)
            for k in np.flatnonzero(weights >= self.empty_below)
            if k == bg or (self.max_splits > 0 and k != background)
        ]
        found = muddled_topics(
            phi,
            theta,
            token_probs(theta, phi, build),
            build,
            live,
            min_tokens=self.split_min_tokens,
            threshold=self.split_threshold,
            min_share=self.split_min_share,
            iterations=self.em_iterations,
        )
        if background is None:
            return found
        # The background slot may have taken a desk before its prior grew: the desk leaves, the generic words
        # (the half nearer the documents' own word frequencies) stay.
        words = np.bincount(build.word_ids, weights=build.counts, minlength=phi.shape[1]).astype(np.float64)
        return [(k, prop.keeping_nearer(words) if k == background else prop) for k, prop in found]

    # ------------------------------------------------------------------ birth
    def _births(self, model: SupportsTopicMoves, build: Batch, valid: Batch, keep: int | None) -> list[Event]:
        events: list[Event] = []
        phi = model.topic_word()
        base = mean_loglik(model.transform(valid), phi, valid)
        for _ in range(self.max_births):
            free = np.flatnonzero(model.topic_weights() < self.empty_below)
            free = free[free != keep] if keep is not None else free
            if free.size == 0:
                break
            proposal = birth_proposal(model, build, phi, self.birth_quantile, self.em_iterations)
            if proposal is None:
                break
            ids, probs, share = proposal
            k = int(free[0])
            _, undo = model.birth_topic(k, ids, probs, share)
            phi_new = model.topic_word()
            score = mean_loglik(model.transform(valid), phi_new, valid)
            gain = score - base
            if not gain > self.birth_min_gain:
                undo()
                break
            events.append(Event("birth", (k,), None, float(gain), proposal=(ids, probs, share)))
            phi, base = phi_new, score
        return events
