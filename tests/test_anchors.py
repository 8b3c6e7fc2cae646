"""A topic id keeps its meaning: a slot that moves to another subject in small steps gets a fresh id
(:mod:`service.anchors` with :func:`service.lineage_feed.renewals`), a topic that only evolves keeps its id.

Each test plays the snapshot writer's part on hand-made word distributions: describe (drift since the snapshot
before, distance from the anchors), ask ``renewals``, anchor the written snapshot, and give the renewed slots
fresh ids at the next capture as the learner does."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from kernels.summaries import hellinger_rows
from service.anchors import ANCHOR_AFTER_DOCS, ANCHOR_DRIFT, RENEW_WEIGHT, TopicAnchors
from service.checkpoint import Capture
from service.lineage_feed import RENEW_DRIFT, renewals

K, W = 4, 60


def subject(first: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """A topic over 10 words of its own (from ``first``), with a little mass on every word."""
    p = np.full(W, 1e-4)
    p[first : first + 10] = rng.dirichlet(np.ones(10)) + 0.05
    return p / p.sum()


class Stream:
    """Snapshots of a K-slot model, written one after the other; ``ids`` as the lineage gives them out."""

    def __init__(
        self, phi: NDArray[np.float64], weights: NDArray[np.float64] | None = None, docs: int = ANCHOR_AFTER_DOCS * K
    ) -> None:
        self.anchors = TopicAnchors()
        self.ids = list(range(K))
        self.next_id = K
        self.prev: NDArray[np.float64] | None = None
        self.prev_docs = 0
        self.docs = 0
        self.renewed: list[tuple[int, int, float]] = []  # (documents, slot, score)
        self.pending: list[int] = []
        self.weights = np.full(K, 1 / K) if weights is None else weights
        self.snapshot(phi, docs=docs)

    def snapshot(self, phi: NDArray[np.float64], docs: int = 200, changed: tuple[int, ...] = ()) -> None:
        for k in self.pending:  # the capture after a written snapshot gives its renewals fresh ids
            self.ids[k], self.next_id = self.next_id, self.next_id + 1
        self.docs += docs
        cap = Capture(0, {}, {}, None, self.weights.copy(), np.zeros(K), K)
        cap.topic_ids, cap.docs_learned = list(self.ids), self.docs
        if self.prev is not None:
            cap.drift, cap.drift_since_docs = hellinger_rows(phi, self.prev), self.prev_docs
        cap.anchor_drift, cap.anchor_kept = self.anchors.compare(phi, cap.topic_ids)
        slots, scores = renewals(cap)
        self.renewed += [(self.docs, k, s) for k, s in zip(slots, scores, strict=True)]
        self.pending = slots
        written = phi.astype(np.float32)
        self.held = self.anchors.state_after(written, cap.topic_ids, cap.weights, cap.docs_learned, changed)
        self.anchors.update(written, cap.topic_ids, cap.weights, cap.docs_learned, changed)
        self.prev, self.prev_docs = phi, self.docs

    def restart(self, from_snapshot: bool = True) -> None:
        """The learner restarts from the last snapshot: its anchors from what the snapshot holds, or (as before the
        snapshot held them) anchored where the restored topics stand."""
        assert self.prev is not None
        self.anchors = TopicAnchors()
        if from_snapshot:
            assert self.anchors.load(self.held, self.prev)
        else:
            self.anchors.restore(self.prev, self.ids, self.weights, self.docs)


@pytest.fixture
def topics() -> NDArray[np.float64]:
    rng = np.random.default_rng(3)
    return np.array([subject(10 * k, rng) for k in range(K + 1)])  # the last: a subject no slot has yet


def test_a_subject_that_grows_step_by_step_in_another_subjects_slot_gets_a_fresh_id(
    topics: NDArray[np.float64],
) -> None:
    """Slot 0 moves from its subject to a new one in 20 steps, each far below the jump the snapshot-to-snapshot
    rule needs (0.5): once it is more than 0.7 from the topic its id was anchored on, the next capture renews it,
    once, with that distance as the score. Before, the id kept the new subject for good."""
    stream = Stream(topics[:K])
    path = np.array([(1 - t) * topics[0] + t * topics[K] for t in np.linspace(0.0, 1.0, 21)])
    assert hellinger_rows(path[1:], path[:-1]).max() < RENEW_DRIFT / 2  # each step far below a jump
    for row in path[1:]:
        phi = topics[:K].copy()
        phi[0] = row
        stream.snapshot(phi)
    assert [(k, s > ANCHOR_DRIFT) for _, k, s in stream.renewed] == [(0, True)]
    assert stream.ids == [K, 1, 2, 3]


def test_a_topic_that_evolves_within_its_subject_keeps_its_id(topics: NDArray[np.float64]) -> None:
    """Every slot's words reshuffle within its subject, snapshot after snapshot (the ranks change, as a story's
    names do): none is renewed."""
    rng = np.random.default_rng(5)
    stream = Stream(topics[:K])
    for _ in range(30):
        phi = np.array([subject(10 * k, rng) for k in range(K)])
        stream.snapshot(phi)
    assert stream.renewed == [] and stream.ids == list(range(K))


def test_a_forming_topic_follows_its_slot_and_is_anchored_once_formed(topics: NDArray[np.float64]) -> None:
    """While an id is younger than ANCHOR_AFTER_DOCS documents per slot the anchor follows the slot: a topic still
    forming may move anywhere. A slot whose words a move changed (``changed``) starts over too."""
    stream = Stream(topics[:K])
    stream.snapshot(topics[:K], changed=(1,))  # a merge into slot 1: its id is kept, its anchor starts over
    phi = topics[:K].copy()
    for t in np.linspace(0.1, 1.0, 10):  # all of it inside the young period
        phi[1] = (1 - t) * topics[1] + t * topics[K]
        stream.snapshot(phi, docs=ANCHOR_AFTER_DOCS * K // 10 - 1)
    assert stream.renewed == [] and not stream.anchors.formed[1]
    stream.snapshot(phi)
    assert stream.anchors.formed[1]  # formed on the new subject: moving back is a change of meaning now
    for t in np.linspace(0.9, 0.0, 10):
        phi[1] = (1 - t) * topics[1] + t * topics[K]
        stream.snapshot(phi)
    assert [k for _, k, _ in stream.renewed] == [1]


def test_a_light_slot_is_anchored_when_it_first_weighs_enough(topics: NDArray[np.float64]) -> None:
    """A slot under RENEW_WEIGHT holds noise: it is not anchored while light, so a subject that grows in an empty
    slot keeps the id under which it became visible, and only a later change of that subject renews it."""
    weights = np.array([RENEW_WEIGHT / 2, 0.4, 0.3, 0.3 - RENEW_WEIGHT / 2])
    stream = Stream(topics[:K], weights)
    phi = topics[:K].copy()
    for t in np.linspace(0.1, 1.0, 10):
        phi[0] = (1 - t) * topics[0] + t * topics[K]
        stream.snapshot(phi)
    assert stream.renewed == [] and not stream.anchors.formed[0]
    stream.weights = np.array([0.1, 0.3, 0.3, 0.3])
    stream.snapshot(phi)
    assert stream.anchors.formed[0] and stream.renewed == []


def test_a_restored_model_is_anchored_where_it_was_restored(topics: NDArray[np.float64]) -> None:
    """After a restart the anchors start at the restored topics (formed where they weigh enough): a slot that then
    moves to another subject in small steps is renewed as it would have been without the restart."""
    stream = Stream(topics[:K])
    stream.anchors = TopicAnchors()
    stream.anchors.restore(topics[:K], list(range(K)), np.full(K, 1 / K), ANCHOR_AFTER_DOCS * K)
    assert stream.anchors.formed.all()
    phi = topics[:K].copy()
    for t in np.linspace(0.05, 1.0, 20):
        phi[2] = (1 - t) * topics[2] + t * topics[K]
        stream.snapshot(phi)
    assert [k for _, k, _ in stream.renewed] == [2]


def test_a_restart_during_the_warm_up_leaves_the_topics_forming(topics: NDArray[np.float64]) -> None:
    """A model restored before it learned ANCHOR_AFTER_DOCS documents per slot is still forming: its topics are
    not anchored where the restart found them (a review: 11 of 20 ids renewed after a restart at 100 documents)."""
    anchors = TopicAnchors()
    anchors.restore(topics[:K], list(range(K)), np.full(K, 1 / K), ANCHOR_AFTER_DOCS * K - 1)
    assert not anchors.formed.any()


def test_a_topic_that_only_sharpens_keeps_its_id(topics: NDArray[np.float64]) -> None:
    """A formed topic that was flat (2 % of its weight on its subject's words, the rest spread over every word)
    sharpens onto its subject step by step, until it is more than ANCHOR_DRIFT from its anchor: it still puts more
    weight on its anchor's first words than the anchor did, so it is the same topic and keeps its id."""
    flat = topics[:K].copy()
    flat[0] = 0.02 * topics[0] + 0.98 / W
    stream = Stream(flat)
    stream.snapshot(flat)  # formed, flat
    assert stream.anchors.formed[0]
    for t in np.linspace(0.1, 1.0, 10):
        phi = flat.copy()
        phi[0] = (1 - t) * flat[0] + t * topics[0]
        stream.snapshot(phi)
    assert hellinger_rows(topics[:1], flat[:1])[0] > ANCHOR_DRIFT
    assert stream.renewed == []


def test_a_jump_from_a_snapshot_of_a_model_still_forming_renews_nothing(topics: NDArray[np.float64]) -> None:
    """On a backlog the first two snapshots can be 500 and 7,000 documents apart: every topic formed in between,
    and the jump between them is no change of meaning (a review: 4 of 20 ids renewed, their subscribers told the
    topics had faded). A jump between two snapshots past the warm-up still renews the slot."""
    stream = Stream(topics[:K], docs=ANCHOR_AFTER_DOCS * K // 2)  # the first snapshot: still forming
    phi = topics[:K].copy()
    phi[1] = topics[K]
    stream.snapshot(phi, docs=40 * ANCHOR_AFTER_DOCS * K)
    assert stream.renewed == []
    stream.snapshot(topics[:K])  # both past the warm-up now: slot 1 jumps back
    assert [k for _, k, _ in stream.renewed] == [1]


@pytest.mark.parametrize("from_snapshot", [True, False])
def test_a_restart_goes_on_from_the_anchors_the_snapshot_holds(
    topics: NDArray[np.float64], from_snapshot: bool
) -> None:
    """Slot 0 moves to another subject in 20 small steps, and the learner restarts half way. With the anchors the
    snapshot holds, the slot is renewed as without the restart; anchored where the restart found it (before the
    snapshots held anchors), what it drifted before the restart no longer counted, and the old id took the new
    subject for good."""
    path = np.array([(1 - t) * topics[0] + t * topics[K] for t in np.linspace(0.0, 1.0, 21)])
    stream = Stream(topics[:K])
    for step, row in enumerate(path[1:], 1):
        phi = topics[:K].copy()
        phi[0] = row
        stream.snapshot(phi)
        if step == 10:
            stream.restart(from_snapshot)
    if from_snapshot:
        assert [(k, s > ANCHOR_DRIFT) for _, k, s in stream.renewed] == [(0, True)]
    else:
        assert stream.renewed == []


def test_the_anchors_a_snapshot_holds_are_those_the_writer_goes_on_with(topics: NDArray[np.float64]) -> None:
    """What :meth:`TopicAnchors.load` makes of a snapshot's anchors equals what the writer holds after writing it:
    the same ids, ages and formed rows, the anchors within float16's precision of their roots, the same distances
    within 0.001; a light slot still forming follows the restored topics."""
    rng = np.random.default_rng(8)
    weights = np.array([RENEW_WEIGHT / 2, 0.4, 0.3, 0.3 - RENEW_WEIGHT / 2])
    stream = Stream(topics[:K], weights)
    for _ in range(5):
        stream.snapshot(np.array([subject(10 * k, rng) for k in range(K)]), changed=(2,))
    kept, restored = stream.anchors, TopicAnchors()
    assert restored.load(stream.held, stream.prev)
    assert kept.phi is not None and restored.phi is not None
    assert list(restored.formed) == list(kept.formed) == [False, True, False, True]
    assert (restored.ids == kept.ids).all() and (restored.since == kept.since).all()
    np.testing.assert_allclose(restored.phi, kept.phi, rtol=2e-3, atol=1e-9)
    later = np.array([subject(10 * k, rng) for k in range(K)])
    for a, b in zip(restored.compare(later, stream.ids), kept.compare(later, stream.ids), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-3)


def test_anchors_that_do_not_fit_the_restored_model_are_not_taken(topics: NDArray[np.float64]) -> None:
    """A snapshot's anchors are read as untrusted bytes: another shape, dtype or key, or a negative or infinite
    root, and :meth:`TopicAnchors.load` says False and changes nothing (the learner then anchors the topics where
    they stand)."""
    stream = Stream(topics[:K])
    stream.snapshot(topics[:K])
    good = stream.held
    assert good is not None and good["formed"].all()
    roots = good["roots"]
    bad = [
        None,
        {**good, "extra": good["ids"]},
        {k: v for k, v in good.items() if k != "since"},
        {**good, "roots": roots.astype(np.float32)},
        {**good, "roots": roots[:, :-1]},
        {**good, "roots": roots[:-1]},
        {**good, "ids": good["ids"][:-1]},
        {**good, "formed": good["formed"].astype(np.int64)},
        {**good, "roots": np.where(np.arange(W) == 3, np.float16(-1), roots).astype(np.float16)},
        {**good, "roots": np.where(np.arange(W) == 3, np.float16(np.inf), roots).astype(np.float16)},
        {**good, "since": good["since"] - 10**9},
    ]
    for state in bad:
        anchors = TopicAnchors()
        assert not anchors.load(state, topics[:K]) and anchors.phi is None
    assert TopicAnchors().load(good, topics[:K])
