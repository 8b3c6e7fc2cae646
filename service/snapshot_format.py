"""The snapshot payload format: nested dicts of JSON values and numpy arrays, without pickle.

:func:`pack` writes a magic string, the length of a JSON document, the document (each array replaced by
``{"__ndarray__": [dtype, shape, offset]}``, each long list of strings — a vocabulary — by
``{"__strings__": [lengths, utf8]}``, two such arrays), then the raw C-order bytes of every array, back to back.
:func:`unpack` reads it back and trusts nothing: any byte sequence that is not exactly what :func:`pack` wrote
raises :class:`SnapshotCorrupt` and nothing else. :func:`check_payload` checks what a checksum cannot (finite
floats, non-negative statistics). Pure: no Redis here (see :mod:`service.snapshot`). ``docs/architecture.md``
("Snapshots") describes the layout and what a payload holds.

>>> import numpy as np
>>> payload = unpack(pack({"kernel": {"phi": np.eye(2)}, "offsets": [["articles", 0, 42]]}))
>>> payload["offsets"], payload["kernel"]["phi"].tolist()
([['articles', 0, 42]], [[1.0, 0.0], [0.0, 1.0]])
>>> unpack(b"TSNAP1 and then anything")
Traceback (most recent call last):
service.snapshot_format.SnapshotCorrupt: not a topicstream snapshot (bad magic or shorter than its header: 24 bytes)
"""

from __future__ import annotations

import json
import math
import operator
import re
import struct
from collections.abc import Callable, Collection
from itertools import repeat
from typing import Any

import numpy as np

__all__ = ["STATISTICS", "SnapshotCorrupt", "check_payload", "pack", "unpack"]

_MAGIC = b"TSNAP3"  # TSNAP2 (the same without "__strings__") is still read
_READS = (b"TSNAP2", _MAGIC)
_HEAD = len(_MAGIC) + 8  # magic, then the JSON document's length as a little-endian u64
#: Lists of at least this many strings (or None) are stored as a length array and one UTF-8 array: a JSON list of
#: 65,536 words costs the writer thread tens of ms of GIL in one piece, stalling the batch loop beside it.
_STRINGS_MIN = 256
_STRING_KINDS = frozenset({str, type(None)})
_DTYPE = re.compile(r"[<>|=][biufcSUV][1-9][0-9]{0,5}")  # byte order, kind, item size
_CHUNK = 1 << 20  # elements per step of the finite / non-negative scans (bounded temporary memory)
_MAX_DIMS = 32  # numpy allows 64; a snapshot holds vectors and matrices


# Keys under which the kernels' and the vocabulary's state hold counts (never negative): what a reader passes
# to :func:`check_payload` as ``nonnegative``. SCVB0: phi (N^Φ), nz; online HDP: topic_stat, topic_total,
# word_tokens; particle filter: rows, nk, refcnt, weights; vocabulary: counts. tests/test_snapshot_store.py checks every
# registered kernel's trained state against it.
STATISTICS = ("phi", "nz", "topic_stat", "topic_total", "word_tokens", "rows", "nk", "refcnt", "weights", "counts")


class SnapshotCorrupt(RuntimeError):
    """A stored snapshot cannot be trusted: its bytes or meta are damaged, or its contents fail a check."""


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
        if isinstance(x, list) and len(x) >= _STRINGS_MIN:
            # The element types in one C-level pass (not a generator over 65,536 words): exactly str, or str and
            # None, is a vocabulary; anything else (str subclasses included) stays a JSON list.
            kinds = set(map(type, x))
            if kinds <= _STRING_KINDS:
                return {"__strings__": [strip(a) for a in _strings_to_arrays(x, type(None) in kinds)]}
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
    # np.empty, not bytearray: no zero-filling of hundreds of MB with the GIL held (numpy's copies below
    # release it), while the batch loop runs beside the snapshot writer.
    out = np.empty(len(head) + offset, dtype=np.uint8)
    out[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    pos = len(head)
    for a in arrays:
        out[pos : pos + a.nbytes] = a.reshape(-1).view(np.uint8)
        pos += a.nbytes
    return out.data  # a memoryview of the buffer


def unpack(data: bytes | memoryview) -> dict[str, Any]:
    """Inverse of :func:`pack`. Arrays are read-only views into ``data`` (kernels copy what they keep).

    Raises :class:`SnapshotCorrupt` (never anything else) when ``data`` is not exactly what :func:`pack` wrote:
    wrong magic, too short, a header that is not JSON, an array reference that is malformed, of an unsafe dtype,
    or whose bytes are not where :func:`pack` would have put them (truncated, overlapping, trailing bytes).
    """
    data = memoryview(data).cast("B")
    if len(data) < _HEAD or bytes(data[: len(_MAGIC)]) not in _READS:
        raise SnapshotCorrupt(f"not a topicstream snapshot (bad magic or shorter than its header: {len(data)} bytes)")
    (n,) = struct.unpack_from("<Q", data, len(_MAGIC))
    if n > len(data) - _HEAD:
        raise SnapshotCorrupt(f"the header announces {n} bytes of JSON but only {len(data) - _HEAD} bytes follow")
    try:
        doc = json.loads(bytes(data[_HEAD : _HEAD + n]))
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SnapshotCorrupt(f"the header is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SnapshotCorrupt("the header is not a JSON object")
    body = data[_HEAD + n :]
    expected = 0  # pack lays the arrays out back to back, in document order

    def array(ref: Any, path: str) -> np.ndarray:
        nonlocal expected
        if not (isinstance(ref, list) and len(ref) == 3 and isinstance(ref[0], str)):
            raise SnapshotCorrupt(f"array {path}: malformed reference {str(ref)[:80]}")
        dtype, shape, off = ref
        # Only what ``dtype.str`` of a plain array looks like: numpy's own parser accepts (and chokes on) much
        # more, and an object dtype would read pointers from the buffer.
        if not _DTYPE.fullmatch(dtype):
            raise SnapshotCorrupt(f"array {path}: dtype {dtype[:40]!r} cannot come from a snapshot")
        try:
            dt = np.dtype(dtype)
        except TypeError:  # well-formed but meaningless, e.g. "<f3"
            raise SnapshotCorrupt(f"array {path}: unknown dtype {dtype!r}") from None
        if not (
            isinstance(shape, list)
            and len(shape) <= _MAX_DIMS
            and all(type(d) is int and 0 <= d < 2**63 for d in shape)
        ):  # numpy refuses more dimensions, or larger ones, with a ValueError: corrupt, not a crash
            raise SnapshotCorrupt(f"array {path}: malformed shape {str(shape)[:80]}")
        if type(off) is not int or off != expected:
            raise SnapshotCorrupt(f"array {path}: offset {str(off)[:40]}, expected {expected}")
        nbytes = math.prod(shape) * dt.itemsize
        if off + nbytes > len(body):
            raise SnapshotCorrupt(f"array {path}: needs bytes {off}..{off + nbytes} of a {len(body)}-byte body")
        expected = off + nbytes
        try:
            return np.frombuffer(body, dtype=dt, count=nbytes // dt.itemsize, offset=off).reshape(shape)
        except ValueError as e:  # e.g. dimensions whose product overflows although one of them is 0
            raise SnapshotCorrupt(f"array {path}: shape {str(shape)[:80]}: {e}") from None

    def fill(x: Any, path: str) -> Any:
        if isinstance(x, dict):
            if set(x) == {"__ndarray__"}:
                return array(x["__ndarray__"], path)
            if set(x) == {"__strings__"}:
                parts = x["__strings__"]
                if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(a, dict) for a in parts)):
                    raise SnapshotCorrupt(f"strings {path}: malformed reference {str(parts)[:80]}")
                return _arrays_to_strings(fill(parts[0], path), fill(parts[1], path), path)
            return {k: fill(v, f"{path}.{k}" if path else k) for k, v in x.items()}
        if isinstance(x, list):
            return [fill(v, f"{path}[{i}]") for i, v in enumerate(x)]
        return x

    try:
        result: dict[str, Any] = fill(doc, "")
    except RecursionError:
        raise SnapshotCorrupt("the header is nested too deeply") from None
    if expected != len(body):
        raise SnapshotCorrupt(f"the arrays account for {expected} bytes but the body has {len(body)}")
    return result


def _strings_to_arrays(strings: list[str | None], has_none: bool) -> tuple[np.ndarray, np.ndarray]:
    """Byte lengths (−1 for None) and the concatenated UTF-8 bytes of ``strings`` (``has_none``: whether any
    is None, which the caller already knows from its type scan).

    Joined with NUL and encoded in one C call, then split by numpy: UTF-8 has a zero byte only where the text
    has NUL, so the zero bytes are the separators exactly when there are ``len(strings) - 1`` of them (a few ms
    for 65,536 words). Strings that hold NUL themselves take the per-string way."""
    texts: list[str] = strings  # type: ignore[assignment]
    nones: list[int] = []
    if has_none:  # find them in C (map), and copy the list in C: only the free slots are touched in Python
        nones = np.flatnonzero(np.fromiter(map(operator.is_, strings, repeat(None)), bool, len(strings))).tolist()
        texts = list(texts)
        for i in nones:
            texts[i] = ""
    raw = np.frombuffer("\0".join(texts).encode("utf-8", "surrogatepass"), dtype=np.uint8)
    zero = raw == 0
    seps = np.flatnonzero(zero)
    if seps.size == len(texts) - 1:
        lengths = np.diff(np.concatenate(([-1], seps, [raw.size]))) - 1
        blob = raw[~zero]
    else:
        encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    lengths[nones] = -1
    return lengths, blob


def _arrays_to_strings(lengths: Any, blob: Any, path: str) -> list[str | None]:
    """Inverse of :func:`_strings_to_arrays`; SnapshotCorrupt when the two arrays do not fit together."""
    if not (
        isinstance(lengths, np.ndarray)
        and isinstance(blob, np.ndarray)
        and lengths.dtype == np.int64
        and blob.dtype == np.uint8
        and lengths.ndim == blob.ndim == 1
    ):
        raise SnapshotCorrupt(f"strings {path}: not a length array and a byte array")
    sizes = np.maximum(lengths, 0)
    # Summed as Python integers: int64 lengths near 2^63 would wrap around and add up to a short blob.
    if (lengths < -1).any() or sum(sizes.tolist()) != blob.size:
        raise SnapshotCorrupt(f"strings {path}: lengths do not add up to the {blob.size} bytes stored")
    raw = blob.tobytes()
    ends = np.cumsum(sizes).tolist()
    try:
        return [
            None if n < 0 else raw[e - n : e].decode("utf-8", "surrogatepass")
            for n, e in zip(lengths.tolist(), ends, strict=True)
        ]
    except UnicodeDecodeError as e:
        raise SnapshotCorrupt(f"strings {path}: not UTF-8 ({e})") from None


def _all_chunked(a: np.ndarray, test: Callable[[np.ndarray], np.ndarray]) -> bool:
    flat = a.reshape(-1)
    return all(bool(test(flat[i : i + _CHUNK]).all()) for i in range(0, flat.size, _CHUNK))


def check_payload(payload: dict[str, Any], nonnegative: Collection[str] = ()) -> None:
    """Check what a checksum cannot: every float (array or scalar) in ``payload`` is finite, and every numeric
    array stored under a dict key named in ``nonnegative`` (at any depth) is >= 0. Raises ValueError."""

    def walk(x: Any, path: str, stat: bool) -> None:
        if isinstance(x, np.ndarray):
            if x.dtype.kind in "fc" and not _all_chunked(x, np.isfinite):
                raise ValueError(f"array {path} holds NaN or infinite values")
            if stat and x.dtype.kind in "iuf" and not _all_chunked(x, lambda c: c >= 0):
                raise ValueError(f"array {path} holds negative values (it is a statistic)")
        elif isinstance(x, float):
            if not math.isfinite(x):
                raise ValueError(f"value {path} is {x}")
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k), k in nonnegative)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]", stat)

    walk(payload, "", False)
