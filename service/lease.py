"""One writer per Redis prefix: a lease with a fencing token.

A learner holds the lease before it joins the consumer group and renews it while it runs; a second learner on
the same prefix waits as a standby and takes over once the lease expires (the holder died, or was paused or cut
off for longer than the TTL). Every take-over draws a new *fencing token* from a counter that only grows, and
every snapshot write carries the writer's token (:meth:`Lease.fence`): Redis commits it only while that token is
still the newest (:meth:`service.snapshot.SnapshotStore.save`), so an old holder that wakes up after a pause can
never overwrite its successor's state — whatever its clock or its belief about the lease says.

Keys (``P`` = ``TOPICSTREAM_REDIS_PREFIX``, name ``learner`` by default):

``P:lease:learner``        hash, with a TTL: ``id`` (uuid of the holding process), ``host``, ``pid``, ``token``,
                           ``acquired_at`` (Unix seconds); absent when nobody holds the lease
``P:lease:learner:token``  the newest fencing token handed out (never expires, never decreases while Redis keeps
                           its data; after Redis lost it, a holder passes its last token as ``min_token``; lost
                           or garbled under a holder the lease hash still names, its next commit puts it back)
``P:lease:learner:grace``  while the counter is missing: until when a standby leaves the lease to its old holder

Every step that reads and changes a key is one Lua script, so two processes racing see one winner.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis

from .snapshot import Fence, connect

__all__ = ["Holder", "Lease", "LeaseKeeper"]

log = logging.getLogger(__name__)

# KEYS: lease, token counter, grace marker. ARGV: id, ttl ms, min token, host, pid, now, expected token ('' = any),
# grace ms. Returns the new token, or 0 when someone else holds the lease (or, with an expected token, took it
# meanwhile), or while a grace period after Redis lost the counter is running.
_ACQUIRE = """
local holder = redis.call('HGET', KEYS[1], 'id')
if holder then
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(redis.call('HGET', KEYS[1], 'token'))
  end
  return 0
end
local raw = redis.call('GET', KEYS[2])
local current = tonumber(raw or '0') or 0
if ARGV[7] ~= '' and current ~= 0 and current ~= tonumber(ARGV[7]) then
  return 0
end
local grace = tonumber(ARGV[8])
if (not raw) and ARGV[7] == '' and grace > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local until_ms = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  if until_ms == 0 then
    redis.call('SET', KEYS[3], now + grace, 'PX', 3 * grace)
    return 0
  end
  if now < until_ms then
    return 0
  end
end
local token = current
local floor = tonumber(ARGV[3])
if floor > token then token = floor end
token = token + 1
redis.call('SET', KEYS[2], token)
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'token', token, 'host', ARGV[4], 'pid', ARGV[5], 'acquired_at', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
"""

# KEYS: lease. ARGV: id, token, ttl ms. 1 when renewed, 0 when the lease is not ours (any more).
_RENEW = """
local id, token = unpack(redis.call('HMGET', KEYS[1], 'id', 'token'))
if id == ARGV[1] and tonumber(token) == tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
"""

# KEYS: lease. ARGV: id. 1 when released, 0 when it was not ours.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease (for logs and metrics)."""

    id: str
    host: str
    pid: int
    token: int
    acquired_at: float
    expires_in_s: float


class Lease:
    """A lease named ``name`` under ``prefix``, held for ``ttl_s`` seconds at a time.

    ``token`` is this process's fencing token while it holds the lease (None before the first acquisition).
    Methods other than :meth:`acquire` raise redis errors (ConnectionError, TimeoutError) as they come: a
    holder that must ride out an outage uses :class:`LeaseKeeper`.
    """

    def __init__(self, client: redis.Redis, prefix: str = "topicstream", name: str = "learner", ttl_s: float = 10.0):
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self.r = client
        self.key = f"{prefix}:lease:{name}"
        self.token_key = f"{self.key}:token"
        self.ttl_s = ttl_s
        self.id = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.token: int | None = None
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, prefix: str = "topicstream", name: str = "learner", ttl_s: float = 10.0) -> Lease:
        """A lease on its own client whose timeouts fit well inside the TTL (a renewal must not wait behind a
        snapshot transfer or a long connect)."""
        timeout = max(0.2, ttl_s / 4)
        return cls(connect(url, socket_timeout=timeout, connect_timeout=timeout, retries=1), prefix, name, ttl_s)

    @property
    def _ttl_ms(self) -> int:
        return max(1, round(self.ttl_s * 1000))

    @property
    def identity(self) -> dict[str, Any]:
        """This process as a lease holder: what snapshot metas record as their writer."""
        return {"host": self.host, "pid": self.pid, "id": self.id}

    def _try(self, min_token: int, expected: int | None, grace_s: float = 0.0) -> bool:
        args: list[str | int | float] = [
            self.id,
            self._ttl_ms,
            int(min_token),
            self.host,
            self.pid,
            time.time(),
            expected or "",
            max(0, round(grace_s * 1000)),
        ]
        token = int(self._acquire(keys=[self.key, self.token_key, f"{self.key}:grace"], args=args))
        if token <= 0:
            return False
        self.token = token
        return True

    def try_acquire(self, min_token: int = 0, grace_s: float = 0.0) -> bool:
        """Take the lease if nobody holds it (or renew it if we do); never waits. The new token is greater than
        every token handed out under this prefix and than ``min_token`` (pass the last token this process held,
        so that tokens grow even after Redis lost its data).

        ``grace_s`` > 0: when the token counter is missing (a new prefix, or Redis came back empty), do not take
        the lease until ``grace_s`` seconds after the first such attempt, so that the holder from before the
        data loss — whose state is the newest — can :meth:`reclaim` it first (its keeper tries every ttl/3; use
        a grace of 2 × ttl). A standby passes it; it delays the very first start on a new prefix by as much.
        """
        return self._try(min_token, None, grace_s)

    def acquire(
        self,
        min_token: int = 0,
        timeout: float | None = None,
        stop: threading.Event | None = None,
        poll_s: float | None = None,
        grace_s: float = 0.0,
    ) -> bool:
        """Wait until the lease is ours (True), ``timeout`` seconds pass or ``stop`` is set (False).

        A standby polls every ``poll_s`` (default ttl/5), so it takes over within that of the holder's expiry;
        it keeps waiting through Redis errors. ``min_token`` and ``grace_s``: as for :meth:`try_acquire`.
        """
        poll = poll_s if poll_s is not None else self.ttl_s / 5
        deadline = None if timeout is None else time.monotonic() + timeout
        stop = stop or threading.Event()
        unreachable = False
        while True:
            try:
                if self.try_acquire(min_token, grace_s):
                    return True
                unreachable = False
            except redis.RedisError as e:  # a standby waits through a Redis outage like any other wait
                if not unreachable:
                    log.warning("waiting for lease %s: Redis unusable (%s); still waiting", self.key, e)
                unreachable = True
            left = poll if deadline is None else min(poll, deadline - time.monotonic())
            if left <= 0 or stop.wait(left):
                return False

    def reclaim(self) -> bool:
        """Take the lease again after it lapsed (expired during a pause or an outage, or Redis came back
        empty), but only if nobody else held it in between: the counter must still be our token, or be gone
        with the rest of Redis's data. True when it is ours again (with a new, greater token)."""
        if self.token is None:
            return False
        return self._try(self.token, self.token)

    def renew(self) -> bool:
        """Extend the lease by ``ttl_s`` if we still hold it with our token; False when it is not ours."""
        if self.token is None:
            return False
        return bool(self._renew(keys=[self.key], args=[self.id, self.token, self._ttl_ms]))

    def release(self) -> bool:
        """Give the lease up (on a clean shutdown, so a standby takes over at once). The token counter stays."""
        return bool(self._release(keys=[self.key], args=[self.id]))

    def holder(self) -> Holder | None:
        """Who holds the lease now, or None."""
        pipe = self.r.pipeline(transaction=True)
        pipe.hgetall(self.key)
        pipe.pttl(self.key)
        fields, pttl = pipe.execute()
        if not fields:
            return None
        f = {k.decode(): v.decode() for k, v in fields.items()}
        try:
            return Holder(
                f["id"], f["host"], int(f["pid"]), int(f["token"]), float(f["acquired_at"]), max(0, pttl) / 1000
            )
        except (KeyError, ValueError):
            return None  # not a record this module wrote

    def is_held(self) -> bool:
        """Whether Redis says we hold the lease now (one round trip)."""
        h = self.holder()
        return h is not None and h.id == self.id and h.token == self.token

    def fence(self) -> Fence:
        """What a snapshot write must carry: our token, checked in Redis at commit, our identity, and the lease
        hash that names us (a counter lost or garbled under us is put back rather than fencing us out)."""
        if self.token is None:
            raise RuntimeError("the lease was never acquired: no fencing token")
        return Fence(self.token_key, self.token, self.identity, self.key, self.id)


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def _awake_clock() -> float:
    """Seconds on a clock that also runs while the machine is suspended (Linux's CLOCK_BOOTTIME; elsewhere the
    monotonic clock): after a suspend longer than the TTL the lease has expired in Redis, and a keeper timing
    itself on CLOCK_MONOTONIC, which stops meanwhile, would believe in it for up to ttl/3 more."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


class LeaseKeeper(threading.Thread):
    """Renews a held lease every ``interval_s`` (default ttl/3) in the background.

    ``lost`` is set, and the thread ends, when Redis says someone else has the lease (or had it meanwhile):
    the process must stop writing and step down. ``unreachable`` is set while Redis does not answer (or answers
    only with errors) and cleared when it does again: the learner keeps learning through an outage (its writes
    fail and are retried later). When Redis answers again but the lease lapsed meanwhile (expired, or Redis came
    back empty), the keeper reclaims it if nobody else held it in between (:meth:`Lease.reclaim`);
    ``lease.token`` then grows.
    """

    def __init__(self, lease: Lease, interval_s: float | None = None):
        super().__init__(name=f"lease-keeper:{lease.key}", daemon=True)
        self.lease = lease
        self.interval_s = interval_s if interval_s is not None else lease.ttl_s / 3
        self.lost = threading.Event()
        self.unreachable = threading.Event()
        self._halt = threading.Event()
        self._stepping = threading.Lock()
        self._attempted_at = _awake_clock()  # when the last finished renewal was started (answered or not)

    def stop(self) -> None:
        """End the thread, and return once its renewal in flight, if any, is answered: it starts no other (it does
        not release the lease: call ``lease.release()`` after this; a renewal answered after the release found no
        lease and reclaimed it, so a standby waited a whole TTL)."""
        self._halt.set()
        with self._stepping:  # the thread's step in flight ends first; the thread checks _halt before the next
            pass

    def step(self) -> None:
        """One renewal (what the thread does every interval; a caller may ask for one at any time)."""
        with self._stepping:
            self._renew_once()

    def _renew_once(self) -> None:
        started = _awake_clock()
        try:
            self._step()
        finally:  # only once it is answered: a caller of still_held meanwhile waits for the answer
            self._attempted_at = started

    def still_held(self) -> bool:
        """False once the lease is known to be lost. When no renewal was even tried for longer than the TTL (the
        process was frozen: SIGSTOP, a paused VM, heavy swapping), the lease may have expired and been taken over
        meanwhile: renew now, on the caller's thread (after the renewal in progress, if any: the keeper's own
        thread wakes up with the process), before the caller acts on it (e.g. publishes)."""
        if not self.lost.is_set() and _awake_clock() - self._attempted_at > self.lease.ttl_s:
            self.step()
        return not self.lost.is_set()

    def _step(self) -> None:
        try:
            renewed = self.lease.renew()
            before = self.lease.token
            if renewed or self.lease.reclaim():
                if not renewed:
                    log.warning(
                        "lease %s had lapsed and nobody took it: reclaimed, fencing token %s -> %s",
                        self.lease.key,
                        before,
                        self.lease.token,
                    )
                elif self.unreachable.is_set():
                    log.info("Redis answers again; lease %s still held", self.lease.key)
                self.unreachable.clear()
                return
            holder = self.lease.holder()
        except redis.RedisError as e:  # down, timing out, refusing writes (a replica, out of memory): not usable
            if not self.unreachable.is_set():
                log.warning("cannot renew lease %s: Redis unusable (%s); still learning", self.lease.key, e)
            self.unreachable.set()
            return
        self.unreachable.clear()
        log.error(
            "lease %s lost: held by %s (token %s); ours was %s",
            self.lease.key,
            f"{holder.host} pid {holder.pid}" if holder else "nobody, after another holder",
            holder.token if holder else "?",
            self.lease.token,
        )
        self.lost.set()

    def run(self) -> None:
        while not self.lost.is_set():
            with self._stepping:
                if self._halt.is_set():  # under the lock: once stop() has returned, this thread renews no more
                    return
                self._renew_once()
            self._halt.wait(self.interval_s)
