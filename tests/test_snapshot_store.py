"""The snapshot payload format (``service.snapshot_format``): round trips, and damage of every kind.

Whatever bytes a reader finds, :func:`unpack` returns a payload or raises :class:`SnapshotCorrupt`, never
anything else (a ``struct.error`` or ``JSONDecodeError`` would crash a learner on every restart). The Redis side
is in tests/integration/test_snapshot_faults.py.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from typing import Any

import numpy as np
import pytest

from kernels import ALGORITHMS
from service.snapshot_format import STATISTICS, SnapshotCorrupt, check_payload, pack, unpack
from service.text import Vocabulary


def sample_payload() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "kernel": {
            "algorithm": "x",
            "params": {"n_topics": 3, "alpha": 0.1},
            "state": {"phi": rng.random((5, 3)), "nz": rng.random(3), "scale": 0.5, "rank": np.arange(3)},
        },
        "vocabulary": {"slots": ["a", "b", None], "counts": np.array([1.0, 2.0, 0.0], dtype=np.float32)},
        "offsets": [["t", 0, 12], ["t", 1, 7]],
        "empty": np.zeros((0, 4)),
        "scalar": np.array(3.5),
        "strided": rng.random((4, 6))[:, ::2],
    }


def build(doc: Any, body: bytes = b"") -> bytes:
    """A blob in pack's layout around an arbitrary header document (to forge damaged headers)."""
    raw = json.dumps(doc).encode()
    return b"TSNAP2" + struct.pack("<Q", len(raw)) + raw + body


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def test_round_trip_keeps_every_value_and_dtype() -> None:
    payload = sample_payload()
    back = unpack(pack(payload))
    assert_same(payload, back)
    check_payload(back, STATISTICS)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_real_kernel_and_vocabulary_states_pass_the_checks(algorithm: str) -> None:
    """The finite / non-negative checks must never refuse a healthy snapshot of a trained model."""
    cls = ALGORITHMS[algorithm]
    model = cls(n_topics=4, n_words=30, seed=0, **cls._unit_test_params())
    rng = np.random.default_rng(1)
    for _ in range(3):
        docs = []
        for _ in range(8):
            ids = np.unique(rng.integers(0, 30, 10))
            docs.append((ids, rng.integers(1, 4, len(ids)).astype(np.float64)))
        model.partial_fit(docs)
    vocab = Vocabulary(30, admit_count=1)
    vocab.encode([Counter({"markets": 2, "rates": 3}), Counter({"rates": 1, "cut": 1})])
    payload = {"kernel": model.state_dict(), "vocabulary": vocab.state_dict(), "offsets": [], "articles_learned": 24}
    back = unpack(pack(payload))
    check_payload(back, STATISTICS)
    type(model).from_state(back["kernel"])  # and it is still a loadable state


@pytest.mark.parametrize("length", [0, 5, 10, 13, 14, 40])
def test_short_blobs_are_corrupt_not_struct_errors(length: int) -> None:
    data = bytes(pack(sample_payload()))
    with pytest.raises(SnapshotCorrupt):
        unpack(data[:length])


def test_every_truncation_is_detected() -> None:
    data = bytes(pack(sample_payload()))
    for n in range(len(data)):
        with pytest.raises(SnapshotCorrupt):
            unpack(data[:n])
    with pytest.raises(SnapshotCorrupt, match="body has"):
        unpack(data + b"\0")  # trailing bytes: not what pack wrote


def test_random_damage_raises_only_snapshot_corrupt() -> None:
    """Overwrite random bytes, or whole ranges with random bytes, 3,000 times (fixed seed)."""
    data = bytes(pack(sample_payload()))
    rng = np.random.default_rng(42)
    outcomes = {"decoded": 0, "corrupt": 0}
    for i in range(3000):
        blob = bytearray(data)
        if i % 3 == 0:
            for pos in rng.integers(0, len(blob), int(rng.integers(1, 6))):
                blob[pos] = int(rng.integers(256))
        else:
            start = int(rng.integers(0, len(blob)))
            stop = min(len(blob), start + int(rng.integers(1, 64)))
            blob[start:stop] = rng.bytes(stop - start)
        try:
            unpack(bytes(blob))
            outcomes["decoded"] += 1  # damage inside an array's bytes: for the checksum and check_payload
        except SnapshotCorrupt:
            outcomes["corrupt"] += 1
    assert outcomes["corrupt"] > 0 and outcomes["decoded"] > 0, outcomes


@pytest.mark.parametrize(
    ("doc", "body", "reason"),
    [
        ({"a": {"__ndarray__": ["<f8", [2], 0]}}, b"\0" * 8, "needs bytes"),  # too short a body
        ({"a": {"__ndarray__": ["<f8", [1], 8]}}, b"\0" * 16, "offset 8, expected 0"),  # a gap
        (
            {"a": {"__ndarray__": ["<f8", [1], 0]}, "b": {"__ndarray__": ["<f8", [1], 0]}},
            b"\0" * 16,
            "offset 0, expected 8",
        ),  # overlapping arrays
        ({"a": {"__ndarray__": ["|O", [1], 0]}}, b"\0" * 8, "cannot come from"),  # pointers: never
        ({"a": {"__ndarray__": ["nonsense", [1], 0]}}, b"\0" * 8, "cannot come from"),
        ({"a": {"__ndarray__": [",8", [1], 0]}}, b"\0" * 8, "cannot come from"),  # numpy: a SyntaxError
        ({"a": {"__ndarray__": ["<M8", [1], 0]}}, b"\0" * 8, "cannot come from"),
        ({"a": {"__ndarray__": ["<f3", [1], 0]}}, b"\0" * 8, "unknown dtype"),
        ({"a": {"__ndarray__": ["<f8", [-1], 0]}}, b"", "malformed shape"),
        ({"a": {"__ndarray__": ["<f8", [2**40, 2**40], 0]}}, b"", "needs bytes"),  # no int64 overflow
        ({"a": {"__ndarray__": ["<f8", [1] * 100, 0]}}, b"\0" * 8, "malformed shape"),  # numpy: a ValueError
        ({"a": {"__ndarray__": ["<f8", [0, 2**70], 0]}}, b"", "malformed shape"),  # numpy: a ValueError
        ({"a": {"__ndarray__": ["<f8", [2**62, 4, 0], 0]}}, b"", "reshape"),
        ({"a": {"__ndarray__": ["<f8", [1]]}}, b"\0" * 8, "malformed reference"),
        ({"a": {"__ndarray__": ["<f8", [1], "0"]}}, b"\0" * 8, "offset"),
        ([1, 2], b"", "not a JSON object"),
    ],
)
def test_forged_headers_are_refused(doc: Any, body: bytes, reason: str) -> None:
    with pytest.raises(SnapshotCorrupt, match=reason):
        unpack(build(doc, body))


def test_headers_that_are_not_json_or_nest_too_deeply() -> None:
    with pytest.raises(SnapshotCorrupt, match="not JSON"):
        unpack(b"TSNAP2" + struct.pack("<Q", 5) + b"{oops")
    with pytest.raises(SnapshotCorrupt, match="not JSON"):
        unpack(b"TSNAP2" + struct.pack("<Q", 2) + b"\xff\xfe")
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(SnapshotCorrupt):
        unpack(b"TSNAP2" + struct.pack("<Q", len(deep)) + deep)
    with pytest.raises(SnapshotCorrupt, match="announces"):
        unpack(b"TSNAP2" + struct.pack("<Q", 2**63) + b"{}")


def test_check_payload_finds_nan_inf_and_negative_statistics() -> None:
    ok = sample_payload()
    check_payload(ok, STATISTICS)

    nan = sample_payload()
    nan["kernel"]["state"]["phi"][2, 1] = np.nan
    with pytest.raises(ValueError, match=r"kernel\.state\.phi holds NaN"):
        check_payload(nan)

    inf = sample_payload()
    inf["kernel"]["state"]["scale"] = float("inf")
    with pytest.raises(ValueError, match=r"kernel\.state\.scale is inf"):
        check_payload(inf)

    negative = sample_payload()
    negative["vocabulary"]["counts"][1] = -1.0
    check_payload(negative)  # not named: a negative number may be legitimate
    with pytest.raises(ValueError, match=r"vocabulary\.counts holds negative"):
        check_payload(negative, STATISTICS)


def test_check_payload_scans_large_arrays_in_chunks() -> None:
    big = np.ones(3 * (1 << 20) + 5)
    check_payload({"phi": big}, ["phi"])
    big[-1] = -0.5  # in the last, partial chunk
    with pytest.raises(ValueError, match="negative"):
        check_payload({"phi": big}, ["phi"])


def test_long_string_lists_are_stored_as_arrays_and_come_back_the_same() -> None:
    """A vocabulary's words (with None for free slots, any script, lone surrogates, empty strings) travel as a
    length array and one UTF-8 array, not as a JSON list; short lists stay JSON."""
    words: list[str | None] = [f"w{i}" for i in range(600)]
    words[3], words[10], words[11], words[12] = None, "ünïcödé 北京", "", "\ud800lone"
    with_nul = [*words[:300], "a\0b"]  # NUL inside a string: the per-string encoding
    payload = {"slots": words, "nul": with_nul, "short": ["a", None], "mixed": [*words[:300], 1]}
    blob = pack(payload)
    header = bytes(blob[14 : 14 + struct.unpack_from("<Q", blob, 6)[0]]).decode()
    assert "w599" not in header and '"short":["a",null]' in header and "__strings__" in header
    assert_same(payload, unpack(blob))


def test_only_lists_of_exactly_str_or_none_become_string_arrays() -> None:
    """A str subclass (an enum's value, say) is not a plain string: such a list stays JSON, as does a list with
    one; a list of only None is the string arrays with every length −1."""

    class Word(str):
        pass

    payload = {"sub": [Word("w")] * 300, "one": [*(f"w{i}" for i in range(299)), Word("x")], "none": [None] * 300}
    blob = pack(payload)
    header = bytes(blob[14 : 14 + struct.unpack_from("<Q", blob, 6)[0]]).decode()
    assert header.count("__strings__") == 1 and '"sub":["w","w"' in header and '"w298","x"]' in header
    assert_same(payload, unpack(blob))


@pytest.mark.parametrize(
    "lengths, data, reason",
    [
        (np.array([2, 2], dtype=np.int64), b"abc", "do not add up"),
        (np.array([-2, 3], dtype=np.int64), b"abc", "do not add up"),
        (np.array([2, 1], dtype=np.int64), b"\xff\xfe\x00", "not UTF-8"),
        (np.array([1.0, 2.0]), b"abc", "not a length array"),
        (np.array([2**63 - 1, 2**63 - 1, 4], dtype=np.int64), b"ab", "do not add up"),  # int64 sum wraps to 2
    ],
)
def test_damaged_string_arrays_are_refused(lengths: np.ndarray, data: bytes, reason: str) -> None:
    body = lengths.tobytes() + data
    doc = {
        "slots": {
            "__strings__": [
                {"__ndarray__": [lengths.dtype.str, [2], 0]},
                {"__ndarray__": ["|u1", [len(data)], 16]},
            ]
        }
    }
    with pytest.raises(SnapshotCorrupt, match=reason):
        unpack(build(doc, body))


def test_a_vocabulary_of_an_earlier_version_is_still_read() -> None:
    """Snapshots written before the candidates became two arrays held them as a {word: count} object."""
    v = Vocabulary(4, admit_count=3)
    v.encode([Counter({"oil": 5, "gas": 1, "opec": 2}), Counter({"oil": 1, "opec": 1}), Counter({"oil": 2})])
    state = v.state_dict()
    old = {
        **state,
        "candidates": dict(zip(state["candidates"]["words"], state["candidates"]["counts"].tolist(), strict=True)),
    }
    assert old["candidates"] == {"gas": 1.0, "opec": 2.0}  # "oil" has a slot
    for s in (state, old):
        restored = Vocabulary.from_state(unpack(pack(s)))
        assert restored.slot_words() == v.slot_words() and restored._candidates == v._candidates
