"""The fault tests' judge must see what it is there to see: a lost id, an id that never went in, a duplicate, a
model version going backwards, and the longest silence. Pure: no broker, no Redis."""

from __future__ import annotations

from .procs import Record, judge, longest_gap


def rec(key: bytes, offset: int, version: int | None = 1, ts: float = 0.0, topic: str = "out") -> Record:
    return Record(topic, 0, offset, key, version, ts)


def test_everything_accounted_for() -> None:
    v = judge({b"a", b"b"}, {b"x"}, [rec(b"a", 0), rec(b"b", 1)], [rec(b"x", 0, None, topic="dlq")])
    assert not v.lost and not v.unexpected and v.duplicates == 0 and not v.versions_backwards


def test_lost_unexpected_and_duplicates_are_seen() -> None:
    v = judge({b"a", b"b"}, {b"x"}, [rec(b"a", 0), rec(b"a", 1), rec(b"z", 2)], [])
    assert v.lost == {b"b", b"x"}
    assert v.unexpected == {b"z"}
    assert v.duplicates == 1
    # A good article dead-lettered, or a bad one answered, is unexpected too.
    w = judge({b"a"}, {b"x"}, [rec(b"x", 0)], [rec(b"a", 0, None, topic="dlq")])
    assert w.unexpected == {b"a", b"x"}


def test_versions_are_checked_in_offset_order_per_partition() -> None:
    outs = [rec(b"c", 2, version=3), rec(b"a", 0, version=5), rec(b"b", 1, version=5)]
    assert judge({b"a", b"b", b"c"}, set(), outs, []).versions_backwards == [(2, 3, 5, 0.0)]
    other = [rec(b"a", 0, version=5), Record("out", 1, 0, b"b", 2, 0.0)]  # another partition: its own order
    assert not judge({b"a", b"b"}, set(), other, []).versions_backwards


def test_longest_gap_counts_the_edges_of_the_window() -> None:
    assert longest_gap([1.0, 2.0, 6.0], 0.0, 7.0) == 4.0
    assert longest_gap([], 0.0, 3.0) == 3.0
    assert longest_gap([5.0], 0.0, 5.5) == 5.0
