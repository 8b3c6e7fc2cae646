"""What each topic id stood for once its topic had formed, so that a topic that changes meaning slowly gets a fresh id.

A topic id must not change meaning (docs/topic-hygiene.md, "Lineage"). :func:`service.lineage_feed.renewals` gives a
fresh id to a slot whose words jump between two snapshots. A slot can also move to another subject in many small
steps, none of them a jump: one subject fades out of the stream while another grows in the slot it leaves (a review
saw it in the online HDP: 0.81 in Hellinger distance from where the slot started, never more than 0.36 between two
snapshots). So the snapshot writer keeps, for every slot, its *anchor*: the slot's word distribution (φ row) once
its id's topic had formed. Until then the anchor follows the slot at every written snapshot; a topic has formed
once its id has existed for :data:`ANCHOR_AFTER_DOCS` documents per slot (the hygiene warm-up's 40) and weighs at
least :data:`RENEW_WEIGHT`. A move that changes a slot's words (a merge into it, a split of it) or a new id starts it
over. Each snapshot holds the anchors as the writer goes on with them (:meth:`TopicAnchors.state_after`: formed
rows only, their roots in float16), and a learner that restores it takes them (:meth:`TopicAnchors.load`), so what
a topic drifted before a restart still counts after it (before, a restart anchored every topic where it stood:
a slot moving to another subject step by step, restarted half way, kept its id for good). A snapshot without
anchors (an older version's) is anchored where it stands: formed where the topics weigh enough, once the model is
past that warm-up. A slot is
another topic when it is more than :data:`ANCHOR_DRIFT` from its anchor *and* puts less than :data:`ANCHOR_KEPT`
of the weight its anchor put on the anchor's :data:`ANCHOR_WORDS` first words: a topic that only sharpens (a muddle
settling on one of its subjects) keeps all of that weight, one that another subject took over keeps little.

How far a formed topic moves from its anchor while it keeps its subject, measured through the real learner with a
snapshot every 500 articles (``docs/topic-hygiene.md``, "Lineage"): 0.63 (SCVB0 on the dated Reuters stream), 0.56
(SCVB0 on the demo generator's news cycles, a car/health muddle settling on health); the online HDP's 0.697 on
Reuters was a general topic on talks becoming one on the trade talks with Japan. Hence :data:`ANCHOR_DRIFT` = 0.7.
Of their anchors' first 20 words, formed topics that kept their subject kept 64 % or more of the weight (the
muddles that settled over 100 %); the talks topic kept 17 %, and the slot of ``make run``'s stream that the
generic words took over kept 15 % when it was renewed (under 50 % from 13,000 of its 32,000 articles on).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from kernels.summaries import hellinger_rows

__all__ = ["ANCHOR_AFTER_DOCS", "ANCHOR_DRIFT", "ANCHOR_KEPT", "ANCHOR_WORDS", "RENEW_WEIGHT", "TopicAnchors"]

#: A formed topic whose words are more than this (Hellinger) from its anchor ...
ANCHOR_DRIFT = 0.7
#: ... and that puts less than this share of the weight its anchor put on the anchor's first words on them now, is
#: another topic: it gets a fresh id.
ANCHOR_KEPT = 0.5
#: How many of an anchor's most probable words :data:`ANCHOR_KEPT` weighs.
ANCHOR_WORDS = 20
#: Documents per slot (learned by the kernel since the id was given out) before a topic counts as formed.
ANCHOR_AFTER_DOCS = 40
#: A slot lighter than this (its share of the topic weights) is neither checked nor anchored: a nearly empty slot's
#: word distribution is noise, and may jump for nothing.
RENEW_WEIGHT = 0.01


class TopicAnchors:
    """The anchors of a model's slots (writer thread; see the module docstring): one float32 K×W copy of φ."""

    def __init__(self) -> None:
        self.phi: NDArray[np.float32] | None = None  # the anchors, one row per slot
        self.ids = np.zeros(0, dtype=np.int64)  # the id each row anchors
        self.since = np.zeros(0, dtype=np.int64)  # documents learned when that id was first seen in its slot
        self.formed = np.zeros(0, dtype=bool)  # the row is frozen: the topic had formed
        self.top = np.zeros((0, 0), dtype=np.int64)  # each anchor's ANCHOR_WORDS most probable words
        self.top_mass = np.zeros(0)  # ... and the weight the anchor puts on them

    def restore(
        self, phi: NDArray[np.floating], ids: Sequence[int], weights: NDArray[np.floating], docs_learned: int
    ) -> None:
        """Anchor a restored model's topics where they are now: formed where they weigh at least RENEW_WEIGHT, if
        the model has learned ANCHOR_AFTER_DOCS documents per slot (before, its topics are still forming)."""
        self.phi = np.asarray(phi, dtype=np.float32).copy()
        self.ids = np.asarray(ids, dtype=np.int64).copy()
        self.since = np.zeros(len(self.ids), dtype=np.int64)
        self.formed = (np.asarray(weights) >= RENEW_WEIGHT) & (docs_learned >= ANCHOR_AFTER_DOCS * len(self.ids))
        self._top(np.arange(len(self.ids)))

    def _top(self, rows: NDArray[np.intp]) -> None:
        """Take the first words of the anchors in ``rows`` (after those rows changed)."""
        assert self.phi is not None
        n = min(ANCHOR_WORDS, self.phi.shape[1])
        if self.top.shape != (len(self.phi), n):
            self.top, self.top_mass = np.zeros((len(self.phi), n), dtype=np.int64), np.zeros(len(self.phi))
        if len(rows):
            anchors = self.phi[rows]
            self.top[rows] = np.argpartition(-anchors, n - 1, axis=1)[:, :n]
            self.top_mass[rows] = np.take_along_axis(anchors, self.top[rows], axis=1).sum(axis=1, dtype=np.float64)

    def compare(self, phi: NDArray[np.floating], ids: Sequence[int]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """For each slot of ``phi`` that still carries the anchored id and whose topic had formed: its Hellinger
        distance from its anchor (0 elsewhere), and the share of the weight its anchor put on the anchor's first
        words that it puts on them now (1 elsewhere)."""
        far, kept = np.zeros(len(ids)), np.ones(len(ids))
        if self.phi is None or self.phi.shape != phi.shape or len(ids) != len(phi):
            return far, kept
        checked = self.formed & (np.asarray(ids, dtype=np.int64) == self.ids)
        if checked.any():
            far[checked] = hellinger_rows(phi, self.phi)[checked]
            now = np.take_along_axis(phi, self.top, axis=1).sum(axis=1)
            kept[checked] = now[checked] / np.maximum(self.top_mass[checked], 1e-300)
        return far, kept

    def update(
        self,
        phi: NDArray[np.floating],
        ids: Sequence[int],
        weights: NDArray[np.floating],
        docs_learned: int,
        changed: Iterable[int] = (),
    ) -> None:
        """After snapshot ``phi`` (slot ids ``ids``, topic ``weights``, ``docs_learned`` documents) is written:
        new ids and the ``changed`` slots (a move changed their words) start over; rows not formed follow φ."""
        step = self._step(phi, ids, weights, docs_learned, changed)
        if step is None:  # a capture that does not name its slots' ids: nothing to anchor
            return
        if self.phi is None or self.phi.shape != phi.shape:  # the first snapshot of a new model: ids given at 0
            self.phi = np.asarray(phi, dtype=np.float32).copy()
        self.ids, self.since, self.formed, follow = step
        self.phi[follow] = phi[follow]
        self._top(follow)

    def _step(
        self,
        phi: NDArray[np.floating],
        ids: Sequence[int],
        weights: NDArray[np.floating],
        docs_learned: int,
        changed: Iterable[int],
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_], NDArray[np.intp]] | None:
        """What :meth:`update` makes of the bookkeeping, without changing it: the ids, when each was first seen in
        its slot, which rows are formed, and the rows that follow ``phi``; None when ``ids`` do not name the rows."""
        ids_now = np.asarray(ids, dtype=np.int64).copy()
        n = len(ids_now)
        if n != len(phi):
            return None
        if self.phi is None or self.phi.shape != phi.shape:
            was, since, formed = ids_now, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        else:
            was, since, formed = self.ids, self.since.copy(), self.formed.copy()
        anew = ids_now != was
        anew[list(changed)] = True
        since[anew], formed[anew] = docs_learned, False
        follow = np.flatnonzero(~formed)
        formed |= (docs_learned - since >= ANCHOR_AFTER_DOCS * n) & (np.asarray(weights) >= RENEW_WEIGHT)
        return ids_now, since, formed, follow

    def state_after(
        self,
        phi: NDArray[np.float32],
        ids: Sequence[int],
        weights: NDArray[np.floating],
        docs_learned: int,
        changed: Iterable[int] = (),
    ) -> dict[str, NDArray[np.generic]] | None:
        """The anchors as :meth:`update` with these arguments will leave them, for the snapshot of ``phi``, so that
        a learner that restores it goes on from them (:meth:`load`): before, a restart anchored every topic where
        it stood, and what a topic had drifted before the restart no longer counted. Formed rows only (the others
        follow φ, which the snapshot holds), as the square roots of their word probabilities in float16: 2 bytes
        a word, and a Hellinger distance off by less than 0.001 (relative error 2⁻¹¹ on each root)."""
        step = self._step(phi, ids, weights, docs_learned, changed)
        if step is None:
            return None
        ids_now, since, formed, follow = step
        rows = np.flatnonzero(formed)
        followed = np.zeros(len(ids_now), dtype=bool)
        followed[follow] = True
        roots = np.empty((len(rows), phi.shape[1]), dtype=np.float16)
        for i in range(0, len(rows), _ROWS_PER_STEP):  # bounded float32 temporaries
            chunk = rows[i : i + _ROWS_PER_STEP]
            src = np.array(phi[chunk], dtype=np.float32)
            kept = ~followed[chunk]
            if kept.any():
                assert self.phi is not None  # a row that does not follow was anchored before
                src[kept] = self.phi[chunk[kept]]
            roots[i : i + len(chunk)] = np.sqrt(src)
        return {"ids": ids_now, "since": since, "formed": formed, "roots": roots}

    def load(self, state: object, phi: NDArray[np.floating]) -> bool:
        """Take the anchors a snapshot holds (:meth:`state_after`) for the restored model's ``phi``; False, and
        nothing changed, when ``state`` is not exactly what :meth:`state_after` writes for a model of that shape."""
        n, width = phi.shape
        if not isinstance(state, dict) or set(state) != {"ids", "since", "formed", "roots"}:
            return False
        ids, since, formed, roots = (state[k] for k in ("ids", "since", "formed", "roots"))
        if not (
            all(isinstance(a, np.ndarray) for a in (ids, since, formed, roots))
            and (ids.dtype, since.dtype, formed.dtype, roots.dtype) == (np.int64, np.int64, np.bool_, np.float16)
            and ids.shape == since.shape == formed.shape == (n,)
            and roots.shape == (int(formed.sum()), width)
            and bool(np.isfinite(roots).all() and (roots >= 0).all() and (since >= 0).all())
        ):
            return False
        rows = np.flatnonzero(formed)
        self.phi = np.asarray(phi, dtype=np.float32).copy()
        for i in range(0, len(rows), _ROWS_PER_STEP):
            self.phi[rows[i : i + _ROWS_PER_STEP]] = np.square(roots[i : i + _ROWS_PER_STEP], dtype=np.float32)
        self.ids, self.since, self.formed = ids.copy(), since.copy(), formed.copy()
        self._top(np.arange(n))
        return True


#: Rows converted at a time by :meth:`TopicAnchors.state_after` and :meth:`TopicAnchors.load`.
_ROWS_PER_STEP = 16
