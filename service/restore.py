"""How a learner starts: from the newest readable snapshot under its Redis prefix, or with a fresh model.

:func:`restore_or_create` checks what the checksum cannot vouch for (the kernel's and the vocabulary's own checks,
``service.compat.restore_plan`` against the settings), skips unreadable versions (counted in
``topicstream_snapshot_fallbacks_total``), and catches the restored topic lineage up with the events later
snapshots announced (:meth:`service.lineage.Lineage.catch_up`), past the ids its learner may have given out
unwritten (:meth:`service.lineage.Lineage.skip_reserve`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kernels import TopicModel
from kernels.registry import kernel_class

from .compat import restore_plan
from .lineage import Lineage, LineageEvent, LineageStore, stamp
from .metrics import Metrics
from .settings import Settings
from .snapshot import STATISTICS, NoReadableSnapshot, SnapshotStore
from .text import Tokenizer, Vocabulary

__all__ = ["Start", "StateMismatch", "forget_positions", "id_changed", "restore_or_create"]

log = logging.getLogger(__name__)


class StateMismatch(RuntimeError):
    """The snapshot in Redis was made with settings that contradict the current ones (or none is readable)."""


@dataclass
class Start:
    """What a learner starts from: the model and vocabulary, the input positions they reflect, the topic lineage
    (None: a fresh one), the lineage events the restore made (to push with the next snapshot), the version to
    continue above (and the one restored) and the articles learned."""

    model: TopicModel
    vocab: Vocabulary
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    lineage: Lineage | None = None
    events: list[LineageEvent] = field(default_factory=list)
    #: The restored snapshot's own lineage events (stamped) when P:lineage lacks them: the learner that wrote it
    #: stopped before pushing them. Published with the next snapshot.
    unpublished: list[LineageEvent] = field(default_factory=list)
    version: int = 0
    #: The version restored: ``version`` or, when newer versions were unreadable, an older one (0: none).
    restored_version: int = 0
    articles_learned: int = 0
    #: The brokers' id of the input topic the positions are in (:func:`service.kafka.topic_id`), when known.
    input_topic_id: str | None = None
    #: The hashes of the texts learned last (:meth:`service.duplicates.RecentTexts.state`), when the snapshot has them.
    recent_texts: NDArray[np.uint64] | None = None
    #: The topics' anchors (:meth:`service.anchors.TopicAnchors.state_after`), when the snapshot has them.
    anchors: object = None

    def forget_input_if_recreated(self, topic: str, now: str | None) -> dict[tuple[str, int], int]:
        """Drop the positions in ``topic`` when its id is ``now`` no longer the one they were read in (deleted
        and re-created, or created again by brokers that lost their data): an offset of the old log points
        into the middle of the new one, and resuming there would skip the new log's first messages without a
        word (no OFFSET_OUT_OF_RANGE: the offset is in range). Returns the positions dropped; the topic's
        partitions are then read from their beginning. Unknown ids (an older snapshot, brokers that give none)
        drop nothing."""
        return forget_positions(self.positions, topic) if id_changed(self.input_topic_id, now) else {}


def id_changed(was: str | None, now: str | None) -> bool:
    """Whether a topic's Kafka id ``was`` is known and the brokers now give another (``None``: unknown)."""
    return was is not None and now is not None and now != was


def forget_positions(positions: dict[tuple[str, int], int], topic: str) -> dict[tuple[str, int], int]:
    """Remove the positions in ``topic`` from ``positions``; returns them."""
    dropped = {tp: o for tp, o in positions.items() if tp[0] == topic}
    for tp in dropped:
        del positions[tp]
    return dropped


def restore_or_create(
    s: Settings, store: SnapshotStore, metrics: Metrics, lineage_store: LineageStore, tokenizer: Tokenizer
) -> Start:
    """The newest readable snapshot of ``store`` as a :class:`Start`, or a fresh model when there is none;
    :class:`StateMismatch` when snapshots exist but none is readable, or the newest contradicts the settings.
    ``tokenizer`` is the learner's: a snapshot learned with another is restored with a warning."""
    built: dict[int, tuple[TopicModel, Vocabulary]] = {}

    def build(meta: dict[str, Any], payload: dict[str, Any]) -> None:
        # Shapes and values the checksum cannot vouch for: the kernel's and vocabulary's own checks.
        kstate = payload["kernel"]
        built[int(meta["version"])] = (
            kernel_class(kstate["algorithm"]).from_state(kstate),
            Vocabulary.from_state(payload["vocabulary"]),
        )

    try:
        loaded = store.load_newest_readable(nonnegative=STATISTICS, validate=build)
    except NoReadableSnapshot as e:
        raise StateMismatch(
            f"no snapshot under Redis prefix {s.redis_prefix!r} is readable ({e}); refusing to start a new "
            "model over them: inspect or delete them, or use another TOPICSTREAM_REDIS_PREFIX"
        ) from None
    if loaded is None:
        log.info("no snapshot under prefix %r: starting a fresh %s model", s.redis_prefix, s.algorithm)
        factory: Callable[..., TopicModel] = kernel_class(s.algorithm)
        model = factory(n_topics=s.topics, n_words=s.vocab_size, seed=s.seed, **s.kernel_params)
        return Start(model, Vocabulary(s.vocab_size, admit_count=s.vocab_admit_count))
    for version, reason in loaded.skipped:
        metrics.snapshot_fallbacks.inc()
        log.error("snapshot %d is unreadable (%s): skipped", version, reason)
    if loaded.skipped:
        log.warning("restoring snapshot %d, the newest readable one", loaded.version)
    meta, payload = loaded.meta, loaded.payload
    plan = restore_plan(s, payload)
    if plan.refused:
        raise StateMismatch(
            f"the snapshot under Redis prefix {s.redis_prefix!r} does not match the settings:\n  "
            + "\n  ".join(plan.refused)
        )
    model, vocab = built[loaded.version]
    plan.apply_to(model, vocab)
    for line in plan.applied:
        log.info("%s", line)
    start = Start(model, vocab, positions={(t, int(p)): int(o) for t, p, o in payload["offsets"]})
    newest = max([int(meta["version"]), *(v for v, _ in loaded.skipped)])
    if "lineage" in payload:
        start.lineage = Lineage.from_state(payload["lineage"])
        # Ids its learner may have given out after this snapshot, and after any newer one that is unreadable.
        start.lineage.skip_reserve(1 + newest - int(meta["version"]))
        history = lineage_store.recent()
        version = int(meta["version"])
        own = [LineageEvent.from_json(raw) for raw in payload.get("lineage_events", [])]
        if own and not any(e.version == version for e in history):
            start.unpublished = stamp(own, version, float(meta["created_at"]))
        start.events = start.lineage.catch_up(history, version)
    # Continue above everything this prefix has seen, even versions whose data is unreadable.
    start.version, start.restored_version = newest, loaded.version
    _check_tokenizer(tokenizer.fingerprint(), payload.get("tokenizer"), loaded.version)
    start.articles_learned = int(payload.get("articles_learned", 0))
    start.input_topic_id = payload.get("input_topic_id")
    texts = payload.get("recent_texts")
    if isinstance(texts, np.ndarray) and texts.dtype == np.uint64 and texts.ndim == 1:
        start.recent_texts = texts
    start.anchors = payload.get("anchors")
    metrics.snapshot_seen(start.version, float(meta["created_at"]), int(meta["size_bytes"]))
    log.info(
        "restored snapshot %d (%d articles learned); offsets %s",
        loaded.version,
        start.articles_learned,
        start.positions,
    )
    return start


def _check_tokenizer(ours: str, learned_with: object, version: int) -> None:
    """Warn when the restored vocabulary was made by another tokenizer than ``ours`` (another stop-word file or
    stop-word languages, or an older version: none recorded): learning goes on, and words this tokenizer no
    longer makes fade from their slots as new ones come, but the topics' words change meanwhile."""
    if learned_with == ours:
        return
    was = f"fingerprint {learned_with}" if isinstance(learned_with, str) else "none recorded: an older version"
    log.warning(
        "snapshot %d was learned with another tokenizer (%s; this learner's %s): its vocabulary's words change "
        "as new ones take their slots",
        version, was, ours,
    )  # fmt: skip
