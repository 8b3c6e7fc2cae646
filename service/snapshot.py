"""Versioned, checksummed snapshots of the learner's state in Redis.

Layout (``P`` = ``TOPICSTREAM_REDIS_PREFIX``):

``P:snapshot:version``        counter, the last version number handed out
``P:snapshot:<v>:data``       the payload (see :func:`pack`), immutable once written
``P:snapshot:<v>:meta``       JSON: version, sha256, size_bytes, created_at, writer (host, pid, lease id),
                              fencing_token, and what the learner adds (algorithm, topics, articles_learned, ...)
``P:snapshot:latest``         the newest complete version; it only ever moves forward
``P:snapshot:kept``           sorted set of the newest ``keep`` complete versions (the fallbacks of a reader)
``P:summary``                 JSON: the newest topics with labels, prevalence and drift (for ``topicstream topics``)
``P:lease:learner[:token]``   the writer's lease and its fencing-token counter (see :mod:`service.lease`)
channel ``P:snapshots``       a message with the version number each time ``latest`` moves

Writing (:meth:`SnapshotStore.save`) takes three steps. (1) One Lua call hands out a version greater than the
counter, ``latest`` and the caller's ``min_version``: a learner that carries its last version continues from it
even when Redis came back empty, so one number never names two models. (2) Data and meta are written with a
"pending" TTL (an hour), so a writer that dies here leaves nothing behind for long. (3) One Lua call commits: it
checks the caller's fencing token against the lease's (a paused or partitioned old writer is refused and what it
wrote is deleted: :class:`FencedOut`), makes the keys permanent, moves ``latest`` forward, gives versions beyond
the newest ``keep`` a TTL (a replica reading one right now can finish) and announces the version. A reader never
sees a half-written snapshot.

Reading (:meth:`SnapshotStore.load`) trusts nothing it reads: any damage — bytes overwritten, truncated, meta
that is not JSON or lacks a field, checksum mismatch, arrays that do not fit the body, NaN or infinity, negative
statistics, or whatever the caller's ``validate`` finds — is one :class:`SnapshotCorrupt` with a reason.
:meth:`SnapshotStore.load_newest_readable` walks the kept versions newest first and returns the newest readable
one with the list of those it skipped and why.

The Lua steps touch keys they derive from the prefix: one Redis server (or a primary with replicas), not a
Redis Cluster.

Payloads are nested dicts of JSON values and numpy arrays (a kernel's ``state_dict``, the vocabulary's, the
offsets), stored by :func:`service.snapshot_format.pack` as a JSON document followed by the arrays' raw bytes
(no pickle); :func:`pack`, :func:`unpack`, :class:`SnapshotCorrupt` and :data:`STATISTICS` (the keys of
the statistics that must be non-negative) are re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import InitVar, dataclass, field
from typing import Any, NamedTuple

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from .redact import redact_url
from .snapshot_format import STATISTICS, SnapshotCorrupt, check_payload, pack, unpack

log = logging.getLogger(__name__)

__all__ = [
    "STATISTICS",
    "Fence",
    "FencedOut",
    "LoadedSnapshot",
    "NoReadableSnapshot",
    "SnapshotCorrupt",
    "SnapshotInfo",
    "SnapshotStore",
    "SnapshotWriteFailed",
    "check_payload",
    "connect",
    "pack",
    "unpack",
]

_META_FIELDS: dict[str, type | tuple[type, ...]] = {
    "version": int,
    "sha256": str,
    "size_bytes": int,
    "created_at": (int, float),
}

Validator = Callable[[dict[str, Any], dict[str, Any]], None]


class NoReadableSnapshot(SnapshotCorrupt):
    """Snapshots are stored but none of the kept versions is readable; ``skipped`` says why, newest first."""

    def __init__(self, skipped: list[tuple[int, str]]):
        self.skipped = skipped
        reasons = "; ".join(f"{v}: {why}" for v, why in skipped)
        super().__init__(f"no readable snapshot among {len(skipped)} kept version(s) ({reasons})")


class SnapshotWriteFailed(RuntimeError):
    """A snapshot was not committed (nothing it wrote is left behind); the state in Redis is unchanged."""


class FencedOut(SnapshotWriteFailed):
    """The writer's fencing token is no longer the lease's newest: another learner took over."""


# --------------------------------------------------------------------------------------------- Redis client
def connect(url: str, *, socket_timeout: float = 10.0, connect_timeout: float = 2.0, retries: int = 1) -> redis.Redis:
    """A Redis client that fails fast while Redis is down instead of stalling its caller.

    redis-py's default retries a failed command 10 times; with a connect timeout that is a minute or more per
    call during an outage. Here a command that met a broken connection is retried ``retries`` times (enough
    to replace a connection that a Redis restart closed) with redis-py's own jittered exponential backoff; a
    timeout is not retried, and a connection attempt gives up after ``connect_timeout`` seconds.
    ``socket_timeout`` bounds one reply, and also one whole request: Python's ``sendall`` counts the timeout
    over the whole send, so it must cover writing the largest snapshot (512 MB at 1 Gbit/s: about 5 s). A
    malformed URL is a ValueError that names the URL without its password.
    """
    try:
        return redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            # Only a broken connection is worth a retry (a restart closed it); a timeout would just wait again.
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), retries, (redis.ConnectionError,)),
            health_check_interval=30,
        )
    except ValueError as e:
        raise ValueError(f"invalid Redis URL {redact_url(url)}: {e}") from None


# --------------------------------------------------------------------------------------------- the store
class Fence(NamedTuple):
    """What a fenced write checks: the Redis key of the lease's fencing-token counter and the writer's token
    (plus the writer's identity, recorded in the meta). A plain ``(key, token)`` tuple works too.

    With ``lease_key`` and ``holder`` (the lease hash and the writer's lease id, as :meth:`service.lease.Lease.
    fence` gives them) a counter that is missing, not a number or below the token (deleted, evicted, garbled)
    does not fence out a writer that the lease hash names as its holder with this very token: nobody took the
    lease over (a take-over rewrites the hash), so the counter is put back to the token and the write goes on."""

    key: str
    token: int
    writer: dict[str, Any] | None = None
    lease_key: str = ""
    holder: str = ""


@dataclass(frozen=True)
class SnapshotInfo:
    version: int
    size_bytes: int
    sha256: str
    created_at: float
    meta: dict[str, Any]  # the meta document as written


@dataclass(frozen=True)
class LoadedSnapshot:
    """What :meth:`SnapshotStore.load_newest_readable` found: the newest readable version, and the newer kept
    versions it skipped, newest first, each with the reason (for the caller to log and count)."""

    meta: dict[str, Any]
    payload: dict[str, Any]
    version: int
    skipped: list[tuple[int, str]] = field(default_factory=list)


_NEXT_VERSION = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local latest = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local floor = tonumber(ARGV[1])
if latest > v then v = latest end
if floor > v then v = floor end
v = v + 1
redis.call('SET', KEYS[1], v)
return v
"""

# KEYS: latest, data, meta, kept, fence key, lease hash (the last two: `latest` again where there is none, so
# that a Redis user whose ACL allows only the prefix's keys may run it). ARGV: version, fenced, token, keep, ttl
# of superseded versions (ms), channel, key prefix of versions ("P:snapshot:"), holder's lease id (or '').
# Returns {1, previous latest, counter} moved, {0, latest, counter} stored but latest was already newer (only
# unfenced writers racing each other get there), {-1, lease's token} fenced out, {-2, 0} the data vanished before
# the commit. ``counter`` is false, or what the fencing-token counter held when it was put back to the token.
_COMMIT = """
local repaired = false
if ARGV[2] == '1' then
  local current = redis.call('GET', KEYS[5])
  local token = tonumber(ARGV[3])
  if ARGV[8] ~= '' and ((not current) or (tonumber(current) or 0) < token) then
    local id, held = unpack(redis.call('HMGET', KEYS[6], 'id', 'token'))
    if id == ARGV[8] and tonumber(held) == token then
      redis.call('SET', KEYS[5], token)
      repaired = current or '(missing)'
      current = ARGV[3]
    end
  end
  if (not current) or tonumber(current) ~= token then
    local meta = redis.call('GET', KEYS[3])
    if meta and tonumber(cjson.decode(meta)['fencing_token']) == tonumber(ARGV[3]) then
      redis.call('DEL', KEYS[2], KEYS[3])  -- our own write only: never another writer's version
    end
    return {-1, current or ''}
  end
end
if redis.call('EXISTS', KEYS[2], KEYS[3]) ~= 2 then
  redis.call('DEL', KEYS[2], KEYS[3])
  return {-2, 0}
end
local v = tonumber(ARGV[1])
redis.call('PERSIST', KEYS[2])
redis.call('PERSIST', KEYS[3])
redis.call('ZADD', KEYS[4], v, ARGV[1])
local latest = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local moved = 0
if v > latest then
  redis.call('SET', KEYS[1], ARGV[1])
  moved = 1
end
local n = redis.call('ZCARD', KEYS[4])
local keep = tonumber(ARGV[4])
if n > keep then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, n - keep - 1)) do
    redis.call('PEXPIRE', ARGV[7] .. old .. ':data', ARGV[5])
    redis.call('PEXPIRE', ARGV[7] .. old .. ':meta', ARGV[5])
  end
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, n - keep - 1)
end
if moved == 1 then
  -- Last, and its error ignored: a Redis user without this channel (Redis 7 ACL users have none by default)
  -- had the commit stop here, half done, at every snapshot (no trim, no summary, the writer told it failed).
  redis.pcall('PUBLISH', ARGV[6], ARGV[1])
end
return {moved, latest, repaired}
"""


@dataclass(eq=False)
class SnapshotStore:
    """Read and write snapshots under one key prefix, on the Redis ``client`` (kept as ``r``).

    ``keep`` newest versions stay; older ones expire after ``ttl_s``. Data written but not yet committed
    expires after ``pending_ttl_s`` (a writer that died mid-write leaves nothing behind for long).
    """

    client: InitVar[redis.Redis]
    prefix: str = "topicstream"
    keep: int = 3
    ttl_s: int = 120
    pending_ttl_s: int = 3600

    def __post_init__(self, client: redis.Redis) -> None:
        if self.keep < 1:
            raise ValueError("keep must be >= 1")
        self.r = client
        self._next_version = client.register_script(_NEXT_VERSION)
        self._commit = client.register_script(_COMMIT)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout: float = 10.0,
        connect_timeout: float = 2.0,
        retries: int = 1,
        **kwargs: Any,
    ) -> SnapshotStore:
        """A store on a client from :func:`connect` (fails fast while Redis is down)."""
        client = connect(url, socket_timeout=socket_timeout, connect_timeout=connect_timeout, retries=retries)
        return cls(client, **kwargs)

    def _key(self, *parts: object) -> str:
        return ":".join([self.prefix, *map(str, parts)])

    @property
    def channel(self) -> str:
        return self._key("snapshots")

    # ----------------------------------------------------------------------------------------- writing
    def save(
        self,
        payload: dict[str, Any],
        meta: dict[str, Any] | None = None,
        *,
        min_version: int = 0,
        fence: Fence | tuple[str, int] | None = None,
    ) -> SnapshotInfo:
        """Write ``payload`` as a new version and make it the latest; returns what was written.

        The version is greater than every version this prefix has handed out and than ``min_version`` (pass the
        last version this process wrote or restored: versions then grow even if Redis lost its data). With a
        ``fence`` the commit happens only while the fence's token is still the lease's newest; otherwise what
        was written is deleted and :class:`FencedOut` is raised. :class:`SnapshotWriteFailed` when the data
        vanished before the commit (Redis restarted mid-write). Redis errors (ConnectionError, TimeoutError)
        propagate: a write they interrupt before its commit expires on its own; one whose commit reply was
        lost may have been committed (``latest_version()`` says). Were ``latest`` already newer (unfenced writers
        racing each other), the version is stored and kept but ``latest`` stays where it is.
        """
        f = Fence(*fence) if fence is not None else None
        # The version first: while Redis is down this fails within the connect timeout, before the (large,
        # slow) pack. A version handed out but never committed is only a gap in the numbering.
        version = int(
            self._next_version(
                keys=[self._key("snapshot", "version"), self._key("snapshot", "latest")], args=[int(min_version)]
            )
        )
        data = pack(payload)
        writer = dict(f.writer) if f is not None and f.writer else {"host": socket.gethostname(), "pid": os.getpid()}
        meta_doc = {
            **(meta or {}),
            "version": version,
            "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "created_at": time.time(),
            "writer": writer,
            "fencing_token": f.token if f is not None else None,
        }
        data_key, meta_key = self._key("snapshot", version, "data"), self._key("snapshot", version, "meta")
        self._write_pending(version, data, json.dumps(meta_doc))
        latest = self._key("snapshot", "latest")
        lease_key, holder = (f.lease_key, f.holder) if f is not None and f.lease_key else (latest, "")
        status, detail, *repaired = self._commit(
            keys=[latest, data_key, meta_key, self._key("snapshot", "kept"), f.key if f is not None else latest,
                  lease_key],
            args=[version, int(f is not None), f.token if f is not None else 0, self.keep, self.ttl_s * 1000,
                  self.channel, self._key("snapshot", ""), holder],
        )  # fmt: skip
        if f is not None and repaired and repaired[0] is not None:
            was = repaired[0].decode(errors="replace") if isinstance(repaired[0], bytes) else repaired[0]
            log.warning(
                "fencing-token counter %s held %r, not this writer's token %d, but the lease %s names this writer "
                "as its holder with that token: nobody took over; the counter is put back to %d",
                f.key, was[:40], f.token, f.lease_key, f.token,
            )  # fmt: skip
        if status == -1:
            held = detail.decode() if isinstance(detail, bytes) else str(detail)
            raise FencedOut(
                f"snapshot {version} refused: fencing token {f.token if f else '?'} is no longer the newest "
                f"({f.key if f else '?'} = {held or 'missing'}); another learner holds the lease"
            )
        if status == -2:
            raise SnapshotWriteFailed(f"snapshot {version} vanished before it was committed (Redis restarted?)")
        return SnapshotInfo(version, meta_doc["size_bytes"], meta_doc["sha256"], meta_doc["created_at"], meta_doc)

    def _write_pending(self, version: int, data: bytes | memoryview, meta_json: str) -> None:
        """Store ``version``'s data and meta, uncommitted (they expire unless the commit keeps them); raises
        :class:`SnapshotWriteFailed` when that version is another writer's, and leaves its keys alone."""
        data_key, meta_key = self._key("snapshot", version, "data"), self._key("snapshot", version, "meta")
        pipe = self.r.pipeline(transaction=True)
        pipe.set(data_key, data, ex=self.pending_ttl_s, nx=True)
        pipe.set(meta_key, meta_json, ex=self.pending_ttl_s, nx=True)
        wrote = pipe.execute()
        # Not written: this number is someone's already (a writer that slept through Redis losing its data), or
        # ours, when redis-py sent the transaction again after a lost reply: then the meta is ours, to the byte.
        if not all(wrote) and self.r.get(meta_key) != meta_json.encode():
            mine = [key for key, ok in zip((data_key, meta_key), wrote, strict=True) if ok]
            if mine:
                self.r.delete(*mine)
            raise SnapshotWriteFailed(f"snapshot {version} exists already: another writer has that version")

    def is_empty(self) -> bool:
        """True when Redis holds no snapshot and no version counter under this prefix (never written, or Redis
        came back empty): a learner that finds this should re-publish its state at once."""
        return int(self.r.exists(self._key("snapshot", "version"), self._key("snapshot", "latest"))) == 0

    def is_stored(self, version: int) -> bool:
        """True while both the data and the meta of ``version`` are in Redis (an ``allkeys-*`` eviction takes
        either without a word)."""
        return int(self.r.exists(self._key("snapshot", version, "data"), self._key("snapshot", version, "meta"))) == 2

    def put_summary(self, summary: dict[str, Any]) -> None:
        self.r.set(self._key("summary"), json.dumps(summary))

    # ----------------------------------------------------------------------------------------- reading
    def latest_version(self) -> int | None:
        v = self.r.get(self._key("snapshot", "latest"))
        if v is None:
            return None
        try:
            return int(v)
        except ValueError:
            raise SnapshotCorrupt(f"{self._key('snapshot', 'latest')} holds {v[:40]!r}, not a version") from None

    def meta(self, version: int) -> dict[str, Any] | None:
        raw = self.r.get(self._key("snapshot", version, "meta"))
        return _parse_meta(raw, version) if raw is not None else None

    def load(
        self,
        version: int | None = None,
        *,
        nonnegative: Collection[str] = (),
        validate: Validator | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(meta, payload)`` of ``version`` (default: the latest), or None when it is not stored.

        Raises :class:`SnapshotCorrupt`, with the reason, for any damage (see the module docstring), when
        :func:`check_payload` fails (``nonnegative`` names the keys of statistics), or when ``validate(meta,
        payload)`` raises ValueError (e.g. shapes that do not match the settings). Redis errors propagate.
        """
        if version is None:
            version = self.latest_version()
            if version is None:
                return None
        pipe = self.r.pipeline(transaction=True)
        pipe.get(self._key("snapshot", version, "meta"))
        pipe.get(self._key("snapshot", version, "data"))
        raw_meta, data = pipe.execute()
        if raw_meta is None or data is None:
            return None
        meta = _parse_meta(raw_meta, version)
        if len(data) != meta["size_bytes"]:
            raise SnapshotCorrupt(f"snapshot {version} has {len(data)} bytes, its meta says {meta['size_bytes']}")
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise SnapshotCorrupt(f"snapshot {version} does not match its checksum")
        try:
            payload = unpack(data)
        except SnapshotCorrupt as e:
            raise SnapshotCorrupt(f"snapshot {version} cannot be decoded: {e}") from None
        try:
            check_payload(payload, nonnegative)
            if validate is not None:
                validate(meta, payload)
        except (ValueError, TypeError, KeyError, IndexError) as e:  # a validator reading damaged data may trip
            raise SnapshotCorrupt(f"snapshot {version} fails a check: {type(e).__name__}: {e}") from None
        return meta, payload

    def kept_versions(self) -> list[int]:
        """Committed versions a reader may fall back to, newest first: the newest ``keep`` and ``latest``.

        (Data from before the ``kept`` index existed: every stored version up to ``latest``.) Versions above
        ``latest`` are writes not committed yet, or never: they are not candidates. Without ``latest`` (evicted, or
        deleted by hand) the ``kept`` index, or else the versions whose commit ran (:meth:`committed_versions`):
        a learner that restarts then restores its model instead of starting a new one over it (before, it
        published the whole input again from a new model whose topic ids meant other things).
        """
        latest = self.latest_version()
        members: list[bytes] = self.r.zrange(self._key("snapshot", "kept"), 0, -1)  # type: ignore[assignment]
        kept = {int(v) for v in members if v.isdigit()}  # a member that is no version (corrupt bytes) is no candidate
        if latest is None:  # `latest` alone gone (an eviction, an operator's DEL): what was committed still counts
            return sorted(kept or set(self.committed_versions()), reverse=True)
        if not kept:
            kept = set(self.versions())
        return sorted({v for v in kept if v <= latest} | {latest}, reverse=True)

    def load_newest_readable(
        self,
        *,
        nonnegative: Collection[str] = (),
        validate: Validator | None = None,
    ) -> LoadedSnapshot | None:
        """The newest kept version that :meth:`load` accepts, with the newer ones it skipped and why.

        None when nothing is stored; :class:`NoReadableSnapshot` when versions are stored but none is readable
        (starting afresh over them would silently drop a model: that is for an operator to decide). Counts and
        logs nothing: the caller does, from ``skipped``. Redis errors propagate.
        """
        skipped: list[tuple[int, str]] = []
        try:
            candidates = self.kept_versions()
        except SnapshotCorrupt as e:  # `latest` itself is garbage: fall back to whatever was committed
            skipped.append((-1, str(e)))
            candidates = sorted(self.committed_versions(), reverse=True)
        for version in candidates:
            try:
                loaded = self.load(version, nonnegative=nonnegative, validate=validate)
            except SnapshotCorrupt as e:
                skipped.append((version, str(e)))
                continue
            if loaded is None:
                skipped.append((version, f"snapshot {version} is no longer stored"))
                continue
            return LoadedSnapshot(loaded[0], loaded[1], version, skipped)
        if not candidates and not skipped:
            return None
        raise NoReadableSnapshot(skipped)

    def versions(self) -> list[int]:
        """Versions whose meta is still stored (committed or not), oldest first."""
        found = set()
        head = self._key("snapshot", "")
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", head) + "*:meta"  # the prefix as it is: "ts[eu]" is no glob
        for key in self.r.scan_iter(match=pattern, count=100):
            k = key.decode(errors="replace") if isinstance(key, bytes) else key
            part = k[len(head) : -len(":meta")]
            if k.startswith(head) and part.isdigit():
                found.add(int(part))
        return sorted(found)

    def committed_versions(self) -> list[int]:
        """Stored versions whose commit ran, as their keys' TTLs tell, oldest first (the fallbacks when ``latest``
        is unreadable): the commit makes the newest ``keep`` permanent and gives older ones ``ttl_s``, while a
        write never committed keeps its ``pending_ttl_s`` (one left that long that it has under ``ttl_s`` to
        live is taken for committed: it expires within ``ttl_s`` anyway)."""
        found = self.versions()
        pipe = self.r.pipeline(transaction=False)
        for v in found:
            pipe.pttl(self._key("snapshot", v, "meta"))
        ttls: list[int] = pipe.execute()
        return [v for v, ms in zip(found, ttls, strict=True) if ms == -1 or 0 <= ms <= self.ttl_s * 1000]

    def summary(self) -> dict[str, Any] | None:
        raw = self.r.get(self._key("summary"))
        return json.loads(raw) if raw is not None else None

    def watch(self, timeout: float = 1.0) -> Iterator[int | None]:
        """Yield new version numbers as they are announced (None on each quiet ``timeout``)."""
        pubsub = self.r.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.channel)
        try:
            while True:
                msg = pubsub.get_message(timeout=timeout)
                yield int(msg["data"]) if msg and msg["type"] == "message" else None
        finally:
            pubsub.close()


def _parse_meta(raw: bytes | str, version: int) -> dict[str, Any]:
    """The meta document of ``version``, checked for the fields a reader relies on."""
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise SnapshotCorrupt(f"snapshot {version}: meta is not JSON ({e})") from None
    if not isinstance(meta, dict):
        raise SnapshotCorrupt(f"snapshot {version}: meta is not a JSON object")
    for name, kind in _META_FIELDS.items():
        if name not in meta:
            raise SnapshotCorrupt(f"snapshot {version}: meta lacks {name!r}")
        if not isinstance(meta[name], kind) or isinstance(meta[name], bool):
            raise SnapshotCorrupt(f"snapshot {version}: meta {name!r} is {str(meta[name])[:40]!r}")
    if meta["version"] != version:
        raise SnapshotCorrupt(f"snapshot {version}: meta says version {meta['version']}")
    return meta
