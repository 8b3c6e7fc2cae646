"""What each topic id stood for once its topic had formed, so that a topic that changes meaning slowly gets a fresh id.

A topic id must not change meaning (docs/topic-hygiene.md, "Lineage"). :func:`service.lineage_feed.renewals` gives a
fresh id to a slot whose words jump between two snapshots. A slot can also move to another subject in many small
steps, none of them a jump: one subject fades out of the stream while another grows in the slot it leaves (a review
saw it in the online HDP: 0.81 in Hellinger distance from where the slot started, never more than 0.36 between two
snapshots). So the snapshot writer keeps, for every slot, its *anchor*: the slot's word distribution (φ row) once
its id's topic had formed. Until then the anchor follows the slot at every written snapshot; a topic has formed
once its id has existed for :data:`ANCHOR_AFTER_DOCS` documents per slot (the hygiene warm-up's 40) and weighs at
least :data:`RENEW_WEIGHT`. A move that changes a slot's words (a merge into it, a split of it) or a new id starts it
over. A restored model's topics count as formed where they weigh enough: the anchors are not in the snapshot, so
what a topic drifted before a restart is not counted after it.

How far a formed topic moves from its anchor while it keeps its subject, measured through the real learner with a
snapshot every 500 articles (``docs/topic-hygiene.md``, "Lineage"): 0.63 (SCVB0 on the dated Reuters stream), 0.56
(SCVB0 on the demo generator's news cycles, a car/health muddle settling on health); the online HDP's 0.697 on
Reuters was a general topic on talks becoming one on the trade talks with Japan. Hence :data:`ANCHOR_DRIFT` = 0.7.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from kernels.summaries import hellinger_rows

__all__ = ["ANCHOR_AFTER_DOCS", "ANCHOR_DRIFT", "RENEW_WEIGHT", "TopicAnchors"]

#: A formed topic whose words are more than this (Hellinger) from its anchor is another topic: it gets a fresh id.
ANCHOR_DRIFT = 0.7
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

    def restore(self, phi: NDArray[np.floating], ids: Sequence[int], weights: NDArray[np.floating]) -> None:
        """Anchor a restored model's topics where they are now: formed where they weigh at least RENEW_WEIGHT."""
        self.phi = np.asarray(phi, dtype=np.float32).copy()
        self.ids = np.asarray(ids, dtype=np.int64).copy()
        self.since = np.zeros(len(self.ids), dtype=np.int64)
        self.formed = np.asarray(weights) >= RENEW_WEIGHT

    def distances(self, phi: NDArray[np.floating], ids: Sequence[int]) -> NDArray[np.float64]:
        """Hellinger distance of each slot of ``phi`` from its anchor, where the slot still carries the anchored
        id and its topic had formed; 0 elsewhere."""
        out = np.zeros(len(ids))
        if self.phi is None or self.phi.shape != phi.shape:
            return out
        checked = self.formed & (np.asarray(ids, dtype=np.int64) == self.ids)
        if checked.any():
            out[checked] = hellinger_rows(phi, self.phi)[checked]
        return out

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
        ids_now = np.asarray(ids, dtype=np.int64)
        if self.phi is None or self.phi.shape != phi.shape:  # the first snapshot of a new model: ids given at 0
            self.phi = np.asarray(phi, dtype=np.float32).copy()
            n = len(ids_now)
            self.ids, self.since, self.formed = ids_now.copy(), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        anew = ids_now != self.ids
        anew[list(changed)] = True
        self.ids = ids_now.copy()
        self.since[anew], self.formed[anew] = docs_learned, False
        follow = np.flatnonzero(~self.formed)
        self.phi[follow] = phi[follow]
        old_enough = docs_learned - self.since >= ANCHOR_AFTER_DOCS * len(ids_now)
        self.formed |= old_enough & (np.asarray(weights) >= RENEW_WEIGHT)
