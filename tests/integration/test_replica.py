"""Read replicas serve mixtures from the learner's snapshots and follow new versions."""

from __future__ import annotations

import json
import threading
import time

import pytest

from service.kafka import ensure_topics
from service.learner import Learner
from service.replica import Replica
from service.schemas import TopicEvent
from service.settings import Settings

from .helpers import good_articles, produce, read_all, run_until

pytestmark = pytest.mark.integration


def test_replica_serves_the_snapshot_and_reloads(settings: Settings) -> None:
    s = settings
    first = good_articles(80, seed=4)
    produce(s, first)
    learner = Learner(s)
    run_until(learner, len(first))
    v1 = learner.version
    assert v1 >= 1

    rs = s.model_copy(update={"output_topic": s.output_topic + "-replica", "group_id": s.group_id + "-replicas"})
    ensure_topics(rs, {rs.output_topic: 1})
    replica = Replica(rs)
    assert replica.reload()
    replica.between_batches(None)  # the loop switches models between batches
    assert replica.version == v1
    stop = threading.Event()
    thread = threading.Thread(target=replica.run, args=(stop,), daemon=True)
    thread.start()
    try:
        outputs = read_all(rs, rs.output_topic, len(first))
        assert sorted(m.key().decode() for m in outputs) == sorted(json.loads(v)["id"] for v in first)
        for m in outputs:
            event = TopicEvent.model_validate_json(m.value())
            assert event.model.version == v1 and abs(sum(event.mixture) - 1) < 1e-4

        # The learner moves on; the replica picks up the new version without a restart.
        produce(s, good_articles(40, seed=5))
        learner2 = Learner(s)
        run_until(learner2, 40)
        assert learner2.version > v1
        deadline = time.monotonic() + 30
        while replica.version < learner2.version and time.monotonic() < deadline:
            time.sleep(0.2)
        assert replica.version == learner2.version
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    # Replicas never change the model they serve.
    assert replica.model is not None and replica.model.n_docs_seen_ == 120
