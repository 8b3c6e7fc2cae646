"""Versioned, checksummed snapshots of the learner's state in Redis.

Layout (``P`` = ``TOPICSTREAM_REDIS_PREFIX``):

``P:snapshot:version``        counter, the last version number handed out
``P:snapshot:<v>:data``       the payload (see :func:`pack`), immutable once written
``P:snapshot:<v>:meta``       JSON: version, sha256, size, created_at, algorithm, topics, offsets, ...
``P:snapshot:latest``         the newest complete version
``P:summary``                 JSON: the newest topics with labels, prevalence and drift (for ``topicstream topics``)
channel ``P:snapshots``       a message with the version number each time ``latest`` moves

A version's data and meta are written first and ``latest`` moves only afterwards (one MULTI/EXEC), so a reader
never sees a half-written snapshot; the checksum catches anything else. Versions older than the newest
``keep`` are given a TTL rather than deleted, so a replica that is reading one right now can finish.

Payloads are nested dicts of JSON values and numpy arrays (a kernel's ``state_dict``, the vocabulary's, the
offsets). :func:`pack` stores a JSON document followed by the arrays' raw bytes (no pickle).
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis

__all__ = ["SnapshotCorrupt", "SnapshotInfo", "SnapshotStore", "pack", "unpack"]

_MAGIC = b"TSNAP2"


class SnapshotCorrupt(RuntimeError):
    """A snapshot's bytes do not match its checksum or cannot be decoded."""


def pack(payload: dict[str, Any]) -> memoryview:
    """Serialise nested dicts/lists of JSON values and numpy arrays, without pickle.

    Layout: magic, the length of a JSON document, the document (arrays replaced by ``{"__ndarray__": [dtype,
    shape, offset]}``), then the raw C-order bytes of every array. The buffer is allocated once at its final
    size and each array is copied into it once: snapshots can be hundreds of MB, and this is where the learner's
    memory peaks.
    """
    arrays: list[np.ndarray] = []
    offset = 0

    def strip(x: Any) -> Any:
        nonlocal offset
        if isinstance(x, np.ndarray):
            a = x if x.flags.c_contiguous else np.ascontiguousarray(x)  # (ascontiguousarray makes 0-d arrays 1-d)
            if a.dtype.hasobject:
                raise TypeError("object arrays cannot be snapshotted")
            arrays.append(a)
            ref = {"__ndarray__": [a.dtype.str, list(a.shape), offset]}
            offset += a.nbytes
            return ref
        if isinstance(x, dict):
            return {str(k): strip(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [strip(v) for v in x]
        if isinstance(x, np.generic):
            return x.item()
        return x

    doc = json.dumps(strip(payload), separators=(",", ":")).encode()
    head = _MAGIC + struct.pack("<Q", len(doc)) + doc
    buf = bytearray(len(head) + offset)
    out = np.frombuffer(buf, dtype=np.uint8)  # a writable view of buf
    out[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    pos = len(head)
    for a in arrays:
        out[pos : pos + a.nbytes] = a.reshape(-1).view(np.uint8)
        pos += a.nbytes
    return memoryview(buf)


def unpack(data: bytes | memoryview) -> dict[str, Any]:
    """Inverse of :func:`pack`. Arrays are read-only views into ``data`` (kernels copy what they keep)."""
    data = memoryview(data)
    if bytes(data[: len(_MAGIC)]) != _MAGIC:
        raise SnapshotCorrupt("not a topicstream snapshot (bad magic)")
    (n,) = struct.unpack_from("<Q", data, len(_MAGIC))
    start = len(_MAGIC) + 8
    doc = json.loads(bytes(data[start : start + n]))
    body = data[start + n :]

    def fill(x: Any) -> Any:
        if isinstance(x, dict):
            if set(x) == {"__ndarray__"}:
                dtype, shape, off = x["__ndarray__"]
                dt = np.dtype(dtype)
                count = int(np.prod(shape, dtype=np.int64))
                if off + count * dt.itemsize > len(body):
                    raise SnapshotCorrupt("array data is truncated")
                return np.frombuffer(body, dtype=dt, count=count, offset=off).reshape(shape)
            return {k: fill(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fill(v) for v in x]
        return x

    result: dict[str, Any] = fill(doc)
    return result


@dataclass(frozen=True)
class SnapshotInfo:
    version: int
    size_bytes: int
    sha256: str
    created_at: float
    meta: dict[str, Any]


class SnapshotStore:
    """Read and write snapshots under one key prefix."""

    def __init__(self, client: redis.Redis, prefix: str = "topicstream", keep: int = 3, ttl_s: int = 86400):
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.r = client
        self.prefix = prefix
        self.keep = keep
        self.ttl_s = ttl_s

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SnapshotStore:
        return cls(redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10), **kwargs)

    def _key(self, *parts: object) -> str:
        return ":".join([self.prefix, *map(str, parts)])

    @property
    def channel(self) -> str:
        return self._key("snapshots")

    def save(self, payload: dict[str, Any], meta: dict[str, Any] | None = None) -> SnapshotInfo:
        """Write ``payload`` as a new version and make it the latest; returns what was written."""
        data = pack(payload)
        version = int(self.r.incr(self._key("snapshot", "version")))
        info = SnapshotInfo(version, len(data), hashlib.sha256(data).hexdigest(), time.time(), dict(meta or {}))
        meta_doc = {
            **info.meta,
            "version": version,
            "size_bytes": info.size_bytes,
            "sha256": info.sha256,
            "created_at": info.created_at,
        }
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self._key("snapshot", version, "data"), data)
        pipe.set(self._key("snapshot", version, "meta"), json.dumps(meta_doc))
        pipe.execute()
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self._key("snapshot", "latest"), version)
        old = version - self.keep
        if old >= 1:
            pipe.expire(self._key("snapshot", old, "data"), self.ttl_s)
            pipe.expire(self._key("snapshot", old, "meta"), self.ttl_s)
        pipe.publish(self.channel, str(version))
        pipe.execute()
        return info

    def latest_version(self) -> int | None:
        v = self.r.get(self._key("snapshot", "latest"))
        return int(v) if v is not None else None

    def meta(self, version: int) -> dict[str, Any] | None:
        raw = self.r.get(self._key("snapshot", version, "meta"))
        return json.loads(raw) if raw is not None else None

    def load(self, version: int | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(meta, payload)`` of ``version`` (default: the latest), or None when there is none.

        Raises :class:`SnapshotCorrupt` when the data does not match its checksum.
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
        meta = json.loads(raw_meta)
        if hashlib.sha256(data).hexdigest() != meta["sha256"] or len(data) != meta["size_bytes"]:
            raise SnapshotCorrupt(f"snapshot {version} does not match its checksum")
        try:
            payload = unpack(data)
        except (ValueError, KeyError, json.JSONDecodeError) as e:
            raise SnapshotCorrupt(f"snapshot {version} cannot be decoded: {e}") from e
        return meta, payload

    def versions(self) -> list[int]:
        """Versions whose data is still stored, oldest first."""
        found = []
        for key in self.r.scan_iter(match=self._key("snapshot", "*", "meta"), count=100):
            k = key.decode() if isinstance(key, bytes) else key
            found.append(int(k.split(":")[-2]))
        return sorted(found)

    def put_summary(self, summary: dict[str, Any]) -> None:
        self.r.set(self._key("summary"), json.dumps(summary))

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
