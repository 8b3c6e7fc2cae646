"""Snapshots on a bad day: damaged data and meta, versions after FLUSHALL, announcements; the faults injected
into a real redis-server (``redis_faults.RedisServer``)."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest

from service.snapshot import NoReadableSnapshot, SnapshotCorrupt, SnapshotStore

from .redis_faults import STATS, RedisServer, data_key, meta_for, meta_key, payload, resign, server, store

pytestmark = pytest.mark.integration

__all__ = ["server", "store"]  # fixtures, imported for pytest


# ------------------------------------------------------------------------------------------ corrupt snapshots
def overwrite_middle(store: SnapshotStore, v: int) -> None:
    size = int(store.r.strlen(data_key(store, v)))  # type: ignore[arg-type]
    store.r.setrange(data_key(store, v), size // 2, np.random.default_rng(0).bytes(size // 4))


def overwrite_all(store: SnapshotStore, v: int) -> None:
    size = int(store.r.strlen(data_key(store, v)))  # type: ignore[arg-type]
    store.r.set(data_key(store, v), np.random.default_rng(1).bytes(size))


def truncate_half(store: SnapshotStore, v: int) -> None:
    data = store.r.get(data_key(store, v))
    assert isinstance(data, bytes)
    store.r.set(data_key(store, v), data[: len(data) // 2])


def truncate_10(store: SnapshotStore, v: int) -> None:
    store.r.set(data_key(store, v), store.r.getrange(data_key(store, v), 0, 9))


DAMAGE = {
    "random-bytes-in-the-middle": overwrite_middle,
    "random-bytes-everywhere": overwrite_all,
    "truncated-to-half": truncate_half,
    "truncated-to-10-bytes": truncate_10,
}


@pytest.mark.parametrize("resigned", [False, True], ids=["meta-as-is", "meta-resigned"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_newest_snapshot_is_refused_and_the_previous_one_is_used(
    store: SnapshotStore, damage: str, resigned: bool
) -> None:
    versions = [store.save(payload(i), meta_for(i)).version for i in range(1, 4)]
    newest = versions[-1]
    DAMAGE[damage](store, newest)
    if resigned:
        resign(store, newest)

    with pytest.raises(SnapshotCorrupt) as caught:
        store.load(newest, nonnegative=STATS)
    assert f"snapshot {newest}" in str(caught.value)
    with pytest.raises(SnapshotCorrupt):
        store.load(nonnegative=STATS)  # the latest, by default

    found = store.load_newest_readable(nonnegative=STATS)
    assert found is not None
    assert found.version == versions[-2] and found.meta["version"] == versions[-2]
    assert [v for v, _ in found.skipped] == [newest] and found.skipped[0][1]
    assert found.payload["articles_learned"] == 100 * 2
    np.testing.assert_array_equal(found.payload["kernel"]["state"]["phi"], payload(2)["kernel"]["state"]["phi"])


@pytest.mark.parametrize(
    ("meta", "reason"),
    [
        ("{not json", "meta is not JSON"),
        ("[" * 50_000 + "]" * 50_000, "meta is not JSON"),
        ("[1, 2]", "not a JSON object"),
        ({"drop": "sha256"}, "lacks 'sha256'"),
        ({"drop": "size_bytes"}, "lacks 'size_bytes'"),
        ({"set": ("size_bytes", "12")}, "'size_bytes'"),
        ({"set": ("version", 99)}, "says version 99"),
    ],
)
def test_damaged_meta_is_refused_with_a_reason(store: SnapshotStore, meta: Any, reason: str) -> None:
    store.save(payload(1), meta_for(1))
    newest = store.save(payload(2), meta_for(2)).version
    if isinstance(meta, str):
        store.r.set(meta_key(store, newest), meta)
    else:
        doc = json.loads(store.r.get(meta_key(store, newest)))  # type: ignore[arg-type]
        if "drop" in meta:
            del doc[meta["drop"]]
        else:
            doc[meta["set"][0]] = meta["set"][1]
        store.r.set(meta_key(store, newest), json.dumps(doc))
    with pytest.raises(SnapshotCorrupt, match=reason):
        store.load(newest)
    found = store.load_newest_readable()
    assert found is not None and found.version == newest - 1 and reason.strip("'") in found.skipped[0][1]


def test_what_a_checksum_cannot_see_negative_and_nan_statistics_and_a_caller_check(store: SnapshotStore) -> None:
    store.keep = 4
    good = store.save(payload(1), meta_for(1)).version
    flipped = payload(2)
    flipped["kernel"]["state"]["phi"][7, 1] = -3.0  # a sign bit flipped in N^Φ, then checksummed as valid
    bad_sign = store.save(flipped, meta_for(2)).version
    nan = payload(3)
    nan["vocabulary"]["counts"][0] = np.nan
    bad_nan = store.save(nan, meta_for(3)).version

    with pytest.raises(SnapshotCorrupt, match="NaN"):
        store.load(bad_nan)
    assert store.load(bad_sign) is not None  # without naming the statistics, a negative value is legitimate
    with pytest.raises(SnapshotCorrupt, match=r"kernel\.state\.phi holds negative"):
        store.load(bad_sign, nonnegative=STATS)

    found = store.load_newest_readable(nonnegative=STATS)
    assert found is not None and found.version == good
    assert [v for v, _ in found.skipped] == [bad_nan, bad_sign]

    def topics_match(meta: dict[str, Any], data: dict[str, Any]) -> None:
        shape = data["kernel"]["state"]["phi"].shape
        if shape[1] != meta["topics"]:
            raise ValueError(f"phi has {shape[1]} topics, meta says {meta['topics']}")

    wrong = store.save(payload(4), {**meta_for(4), "topics": 5}).version
    with pytest.raises(SnapshotCorrupt, match="phi has 4 topics, meta says 5"):
        store.load(wrong, validate=topics_match)
    found = store.load_newest_readable(nonnegative=STATS, validate=topics_match)
    assert found is not None and found.version == good and len(found.skipped) == 3


def test_nothing_stored_is_none_and_nothing_readable_is_an_error(store: SnapshotStore) -> None:
    assert store.is_empty() and store.load() is None and store.load_newest_readable() is None
    for i in range(1, 3):
        store.save(payload(i), meta_for(i))
    assert not store.is_empty()
    for v in store.kept_versions():
        truncate_10(store, v)
    with pytest.raises(NoReadableSnapshot) as caught:
        store.load_newest_readable()
    assert [v for v, _ in caught.value.skipped] == [2, 1]


def test_latest_pointing_at_garbage_or_at_a_vanished_version(store: SnapshotStore) -> None:
    for i in range(1, 4):
        store.save(payload(i), meta_for(i))
    store.r.delete(data_key(store, 3))
    assert store.load(3) is None
    found = store.load_newest_readable()
    assert found is not None and found.version == 2 and "no longer stored" in found.skipped[0][1]
    store.r.set("t:snapshot:latest", b"\xff garbage")
    with pytest.raises(SnapshotCorrupt, match="not a version"):
        store.load()
    found = store.load_newest_readable()
    assert found is not None and found.version == 2


def test_without_latest_the_committed_versions_are_still_found(store: SnapshotStore) -> None:
    """``P:snapshot:latest`` alone gone (an ``allkeys-*`` eviction, an operator's DEL): the versions committed are
    still candidates. Before, nothing was, and a learner restarted then started a new model over intact ones."""
    for i in range(1, 5):
        store.save(payload(i), meta_for(i))
    store.r.delete("t:snapshot:latest")
    assert store.kept_versions() == [4, 3, 2]
    found = store.load_newest_readable()
    assert found is not None and found.version == 4
    store.r.delete("t:snapshot:kept")  # the index gone too: the versions whose commit ran
    store.r.set(data_key(store, 5), b"x", ex=store.pending_ttl_s)  # and a write never committed
    store.r.set(meta_key(store, 5), b"{}", ex=store.pending_ttl_s)
    assert store.kept_versions() == [4, 3, 2, 1]
    store.r.delete(*store.r.keys("t:snapshot:*"))
    assert store.kept_versions() == [] and store.load_newest_readable() is None


def test_only_the_newest_keep_versions_stay_and_uncommitted_writes_are_not_fallbacks(store: SnapshotStore) -> None:
    for i in range(1, 7):
        store.save(payload(i), meta_for(i))
    assert store.kept_versions() == [6, 5, 4]
    for v in (1, 2, 3):  # superseded: still readable for a replica in the middle of a load, but expiring
        assert 0 < int(store.r.ttl(data_key(store, v))) <= store.ttl_s  # type: ignore[arg-type]
    for v in (4, 5, 6):
        assert int(store.r.ttl(data_key(store, v))) == -1  # type: ignore[arg-type]
    # A writer that died between writing and committing version 7 leaves keys that expire on their own and
    # that no reader takes for a snapshot.
    store.r.set(data_key(store, 7), b"x", ex=60)
    store.r.set(meta_key(store, 7), b"{}", ex=60)
    assert store.latest_version() == 6 and store.kept_versions()[0] == 6


def test_stored_versions_are_found_under_a_prefix_with_glob_characters(server: Any) -> None:
    """The fallback search scans for ``P:snapshot:*:meta``: a prefix such as ``ts[eu]`` matched nothing of its own,
    and ``t*`` would take another prefix's versions for its own."""
    odd, star, other = (SnapshotStore.from_url(server.url(), prefix=p, keep=3) for p in ("ts[eu]", "t*", "tx"))
    for v in (1, 2):
        odd.save(payload(v), meta_for(v))
    other.save(payload(1), meta_for(1))
    assert odd.versions() == [1, 2] and star.versions() == [] and other.versions() == [1]


def test_a_member_of_the_kept_index_that_is_no_version_is_passed_over(store: SnapshotStore) -> None:
    """Corrupt bytes in ``P:snapshot:kept`` stopped every learner's restore with a traceback and left new replicas
    waiting for ever, though readable snapshots existed."""
    for i in range(1, 4):
        store.save(payload(i), meta_for(i))
    store.r.zadd(f"{store.prefix}:snapshot:kept", {b"junk": 99, b"\xff": 98})
    assert store.kept_versions() == [3, 2, 1]
    found = store.load_newest_readable()
    assert found is not None and found.version == 3


def test_an_uncommitted_write_is_no_fallback_when_latest_is_garbage(store: SnapshotStore) -> None:
    """A writer died after writing version 4 whole but before its commit; then ``latest`` was overwritten. The
    readers fall back to what was committed (3), not to the write nobody committed."""
    for i in range(1, 4):
        store.save(payload(i), meta_for(i))
    meta = json.loads(store.r.get(meta_key(store, 3)))  # type: ignore[arg-type]
    store.r.set(data_key(store, 4), store.r.get(data_key(store, 3)), ex=store.pending_ttl_s)  # type: ignore[arg-type]
    store.r.set(meta_key(store, 4), json.dumps({**meta, "version": 4}), ex=store.pending_ttl_s)
    assert store.load(4) is not None  # readable, so only its missing commit can keep it out
    store.r.set("t:snapshot:latest", b"\xff garbage")
    assert store.committed_versions() == [1, 2, 3]
    found = store.load_newest_readable()
    assert found is not None and found.version == 3


def test_snapshots_written_before_the_kept_index_existed_are_still_fallbacks(store: SnapshotStore) -> None:
    for i in range(1, 4):
        store.save(payload(i), meta_for(i))
    store.r.delete("t:snapshot:kept")  # the layout of earlier releases: no index
    store.r.set(data_key(store, 4), b"x", ex=60)  # and an uncommitted write above latest
    store.r.set(meta_key(store, 4), b"{}", ex=60)
    assert store.kept_versions() == [3, 2, 1]
    truncate_half(store, 3)
    found = store.load_newest_readable()
    assert found is not None and found.version == 2 and [v for v, _ in found.skipped] == [3]


# ------------------------------------------------------------------------------------------ versions
def test_versions_never_go_backwards_after_flushall(store: SnapshotStore) -> None:
    last = 0
    for i in range(1, 4):
        last = store.save(payload(i), meta_for(i)).version
    assert last == 3
    store.r.flushall()  # Redis lost everything (restart without persistence, an operator's mistake)
    assert store.is_empty() and store.load_newest_readable() is None
    info = store.save(payload(4), meta_for(4), min_version=last)  # the learner carries its last version
    assert info.version == 4 and store.latest_version() == 4 and store.kept_versions() == [4]
    assert store.save(payload(5), meta_for(5)).version == 5  # and the counter continues from there
    # A counter that fell behind `latest` (restored from an old dump) does not make versions repeat.
    store.r.set("t:snapshot:version", 1)
    assert store.save(payload(6), meta_for(6)).version == 6
    # `latest` only moves forward: a commit of an older version (reached only by a stale writer) keeps it.
    assert store.save(payload(7), meta_for(7), min_version=20).version == 21
    assert store.latest_version() == 21


def test_announcements_follow_latest(store: SnapshotStore) -> None:
    seen: list[int] = []
    watcher = store.watch(timeout=0.1)
    next(watcher)  # subscribed
    for i in range(1, 4):
        store.save(payload(i), meta_for(i))
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:
        v = next(watcher)
        if v is not None:
            seen.append(v)
    watcher.close()
    assert seen == [1, 2, 3]


@pytest.mark.parametrize(
    ("user", "rules"),
    [
        ("no-channel", ["~*", "+@all", "resetchannels"]),  # every key, no channel
        ("prefix-only", ["~acl-prefix-only:*", "+@all", "allchannels"]),  # only the prefix's keys
    ],
)
def test_a_redis_user_limited_to_what_the_docs_name_commits_whole_snapshots(
    server: RedisServer, user: str, rules: list[str]
) -> None:
    """Redis 7 gives an ACL user no pub/sub channel unless granted (``resetchannels``; 6.2's
    ``acl-pubsub-default``). The commit script published the new version before trimming old ones, so each
    commit stopped there with NOPERM, half done: ``latest`` moved, old versions kept for ever, the writer told it
    failed (no summary, no history). The announcement now comes last and its refusal is ignored. And a write
    without a fence named the key ``""`` to the script, which a user allowed only the prefix's keys may not."""
    prefix = f"acl-{user}"
    admin = SnapshotStore.from_url(server.url(), prefix=prefix).r
    admin.execute_command("ACL", "SETUSER", user, "on", ">pw-xyz", *rules)
    store = SnapshotStore.from_url(server.url().replace("redis://", f"redis://{user}:pw-xyz@", 1), prefix=prefix)
    for i in range(1, 6):
        assert store.save(payload(i), meta_for(i)).version == i
    assert store.latest_version() == 5 and store.kept_versions() == [5, 4, 3]
    assert admin.pttl(data_key(store, 2)) > 0 and admin.ttl(data_key(store, 5)) == -1  # trimmed, kept


def test_drift_is_measured_against_the_last_snapshot_written(store: SnapshotStore) -> None:
    """A topic changes meaning and the snapshot that first sees it fails to write (a Redis hiccup): the next
    snapshot written still shows the change, measured against the last snapshot written, so the learner's
    renewal of the topic's id (drift > 0.5) is not lost. Before, the failed capture's φ became the reference and
    the written snapshot showed no drift."""
    from concurrent.futures import Future

    from kernels import SCVB0
    from service.checkpoint import Capture, SnapshotWriter
    from service.metrics import Metrics

    fail = [False]
    written: list[np.ndarray] = []

    def save(cap: Capture) -> Any:
        if fail[0]:
            raise ConnectionError("Redis away")
        return store.save(cap.payload, cap.meta)

    writer = SnapshotWriter(store, Metrics(), lambda seq, stop: True, save, lambda cap, info: written.append(cap.drift))
    model = SCVB0(n_topics=3, n_words=6, seed=0)

    def snapshot(seq: int) -> None:
        done: Future[Capture] = Future()
        done.set_result(writer.capture(seq, model, {}, [str(i) for i in range(6)], {}, {}, {}))
        writer.submit(done)
        assert writer.wait_idle(30)

    try:
        snapshot(1)
        model.phi_[:, 1] = [10, 10, 0, 0, 0, 0]
        snapshot(2)
        model.phi_[:, 1] = [0, 0, 0, 0, 10, 10]  # slot 1 holds another topic now
        fail[0] = True
        snapshot(3)  # not written
        fail[0] = False
        snapshot(4)
    finally:
        writer.close()
    assert len(written) == 3 and written[-1][1] > 0.5
