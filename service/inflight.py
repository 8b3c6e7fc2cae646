"""What travels with a batch through the batch loop (:mod:`service.worker`): :class:`InFlight`, the batch with
its decoded articles, word ids, delivery tracker and timings, and :class:`ModelRef`, what its output events say
about the model that computed them."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import Message
from numpy.typing import NDArray

from .kafka import DeliveryTracker
from .pipeline import Decoded, TopicLabels
from .text import EncodedBatch

__all__ = ["InFlight", "ModelRef"]


@dataclass(frozen=True)
class ModelRef:
    """What an output event says about the model that computed it.

    ``topic_ids[k]`` is the stable id of the topic in slot k (:mod:`service.lineage`; ids equal slots until topic
    hygiene merges or re-seeds one), ``names`` the names people gave topic ids (``topicstream label``),
    ``background`` the slot of the background topic (the words every article uses:
    :meth:`kernels.TopicModel.background_topic`), if the model has one: it keeps its weight in an output's
    ``mixture`` but is never one of its ``top_topics`` (see :func:`service.pipeline.output_records`).
    """

    labels: TopicLabels
    algorithm: str
    version: int
    n_topics: int
    topic_ids: tuple[int, ...] = ()
    names: dict[int, str] = field(default_factory=dict)
    background: int | None = None


@dataclass
class InFlight:
    """One batch on its way through the pipeline."""

    seq: int
    msgs: list[Message]
    decoded: Decoded
    tracker: DeliveryTracker = field(default_factory=DeliveryTracker)
    encoded: EncodedBatch | None = None
    model: ModelRef | None = None
    result: Future[NDArray[np.float64]] | None = None
    context: Any = None  # whatever the subclass's compute needs besides the batch (e.g. the replica's model)
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # per partition, after this batch
    timings: dict[str, float] = field(default_factory=dict)

    def release(self) -> None:
        """Drop the articles, word ids and mixtures once the batch is learned and published: while it waits for the
        broker's acknowledgements (an output topic slow to answer can keep many waiting), only its ``seq``,
        ``tracker`` and ``next_offsets`` are needed."""
        self.msgs = []
        self.decoded = Decoded([], [])
        self.encoded = None
        self.result = None
        self.context = None
