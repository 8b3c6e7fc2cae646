"""The learner's lease on a bad day: racing learners, expiry and take-over, fencing, Redis restarted empty; the
faults injected into a real redis-server (``redis_faults.RedisServer``); and a Redis that asks for a password
(no command prints it)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from service.cli import app
from service.dev.localstack import free_port
from service.lease import Lease, LeaseKeeper
from service.snapshot import FencedOut, SnapshotStore, SnapshotWriteFailed

from .redis_faults import PASSWORD, RedisServer, meta_for, payload, server, store, wait_until

pytestmark = pytest.mark.integration

__all__ = ["server", "store"]  # fixtures, imported for pytest


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
    # A TTL 20 times the renewal interval: the keeper thread may stall a second on a loaded machine and still renew.
    a, b = lease(server, ttl_s=2.0), lease(server, ttl_s=2.0)
    assert a.try_acquire() and not b.try_acquire()
    keeper = LeaseKeeper(a, interval_s=0.1)
    keeper.start()
    try:
        assert not b.acquire(timeout=3.0)  # renewed past its TTL: the standby keeps waiting
        assert a.is_held() and not keeper.lost.is_set()
    finally:
        keeper.stop()
        keeper.join(5)
    assert b.acquire(timeout=10)  # a stopped renewing: its lease expires, b takes over
    assert b.token is not None and a.token is not None and b.token == a.token + 1
    holder = b.holder()
    assert holder is not None and (holder.id, holder.token) == (b.id, b.token) and 0 < holder.expires_in_s <= 2.0
    assert not a.renew() and not a.reclaim() and not a.is_held()

    # The old holder wakes up: its keeper reports the lease lost at the first renewal.
    late = LeaseKeeper(a, interval_s=0.1)
    late.step()
    assert late.lost.is_set() and not late.unreachable.is_set()

    # A clean hand-over: release, and the standby needs no expiry.
    c = lease(server, ttl_s=30)
    assert b.release() and c.acquire(timeout=5, poll_s=0.05) and c.token == b.token + 1


def test_a_release_after_stop_is_not_undone_by_a_renewal_in_flight(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A learner's close stops its keeper and releases the lease; a renewal answered after the release found no
    lease, reclaimed it, and the standby waited a whole TTL. ``stop`` now waits out the renewal in flight."""
    a, b = lease(server, ttl_s=30.0), lease(server, ttl_s=30.0)
    assert a.try_acquire()
    renew = Lease.renew
    in_flight = threading.Event()

    def slow_renew(self: Lease) -> bool:
        in_flight.set()
        time.sleep(0.3)  # a Redis that answers slowly: the release lands in this window
        return renew(self)

    monkeypatch.setattr(Lease, "renew", slow_renew)
    keeper = LeaseKeeper(a, interval_s=0.05)
    keeper.start()
    try:
        assert in_flight.wait(5)
        keeper.stop()
        assert a.release()
    finally:
        keeper.stop()
        keeper.join(5)
    assert a.holder() is None
    assert b.acquire(timeout=1, poll_s=0.05)  # at once, not a TTL (30 s) later


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


@pytest.mark.parametrize("damage", [None, b"garbage", b"0"], ids=["deleted", "garbage", "lowered"])
def test_a_holder_whose_token_counter_was_damaged_keeps_writing(
    server: RedisServer, damage: bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    """The counter deleted (an operator's DEL, eviction under allkeys-lru), garbled or set back under the only
    learner: the lease hash still names it with its token, so nobody took over. Before, its next snapshot was
    fenced out and it stopped with "another learner took over" (exit 1, outputs repeated after the restart)."""
    store = SnapshotStore.from_url(server.url(), prefix="t")
    a = lease(server)
    assert a.try_acquire(min_token=6) and a.token == 7
    store.save(payload(1), meta_for(1), fence=a.fence())
    if damage is None:
        store.r.delete(a.token_key)
    else:
        store.r.set(a.token_key, damage)
    info = store.save(payload(2), meta_for(2), fence=a.fence())
    assert store.latest_version() == info.version and info.meta["fencing_token"] == 7
    assert store.r.get(a.token_key) == b"7"  # put back: a later take-over draws 8
    assert "the counter is put back to 7" in caplog.text

    # The hash is what tells: once another learner holds it, the same damage fences the old writer out.
    b = lease(server)
    store.r.delete(a.key)
    assert b.try_acquire() and b.token == 8
    store.r.delete(a.token_key)
    with pytest.raises(FencedOut):
        store.save(payload(3), meta_for(3), fence=a.fence())
    assert store.latest_version() == info.version and store.r.get(a.token_key) is None


def test_a_writer_handed_a_taken_version_number_overwrites_and_deletes_nothing(server: RedisServer) -> None:
    """A writer that slept through Redis losing its data may get a version number that the new learner has
    committed meanwhile (here: the counters set back by hand). Its write must not replace that snapshot, and its
    refused commit must not delete it. Before, a plain SET overwrote the committed data (a replica then served
    the fenced-out model under that version) and the fenced-out branch deleted it."""
    store_a = SnapshotStore.from_url(server.url(), prefix="t")
    store_b = SnapshotStore.from_url(server.url(), prefix="t")
    a, b = lease(server, ttl_s=0.3), lease(server, ttl_s=0.3)
    assert a.try_acquire()
    assert b.acquire(timeout=5)  # a paused past its TTL
    taken = store_b.save(payload(5), meta_for(5), fence=b.fence())
    store_a.r.set("t:snapshot:version", taken.version - 1)
    store_a.r.set("t:snapshot:latest", taken.version - 1)
    with pytest.raises(SnapshotWriteFailed, match="exists already"):
        store_a.save(payload(2), meta_for(2), fence=a.fence())
    store_a.r.set("t:snapshot:latest", taken.version)
    loaded = store_a.load(taken.version)
    assert loaded is not None and loaded[0]["fencing_token"] == b.token
    assert store_a.r.ttl(f"t:snapshot:{taken.version}:data") == -1  # committed: no expiry, untouched


def test_superseded_versions_expire_within_the_ttl(store: SnapshotStore) -> None:
    """Versions beyond the newest ``keep`` get the short expiry of ``TOPICSTREAM_SNAPSHOT_TTL_S`` (default 120 s:
    a replica loading one can finish), so Redis holds about keep + what was written in that time. Before, the
    default was 7 days: at a snapshot every 30 s, some 20,000 superseded snapshots."""
    from service.settings import Settings

    assert Settings.model_fields["snapshot_ttl_s"].default == store.ttl_s == 120
    for i in range(1, 7):
        store.save(payload(i), meta_for(i))
    kept = store.kept_versions()
    assert len(kept) == store.keep == 3, kept
    for v in set(range(1, max(kept) + 1)) - set(kept):
        assert 0 < store.r.ttl(f"{store.prefix}:snapshot:{v}:data") <= store.ttl_s


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
    # A TTL 30 times the renewal interval: a keeper thread held up on a loaded machine must not let the lease
    # lapse (with 1 s and a third of a second, a 0.7 s stall would have); the grace period is the test's subject.
    a, b = lease(server, ttl_s=3.0), lease(server, ttl_s=3.0)
    assert a.try_acquire()
    old_token = a.token
    keeper = LeaseKeeper(a, interval_s=0.1)
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
