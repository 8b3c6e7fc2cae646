"""Backoff between attempts at something that is down (``service.backoff``): pure, with an explicit clock."""

from __future__ import annotations

import random

import pytest

from service.backoff import Backoff


def test_waits_grow_exponentially_up_to_the_cap_without_jitter() -> None:
    b = Backoff(base_s=0.5, cap_s=8.0, factor=2.0, jitter=0.0)
    waits = [b.failed(now=0.0) for _ in range(8)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]


def test_jitter_shortens_each_wait_by_at_most_its_fraction() -> None:
    b = Backoff(base_s=1.0, cap_s=30.0, jitter=0.25, rng=random.Random(3))
    for n in range(1, 12):
        full = min(30.0, 2.0 ** (n - 1))
        wait = b.failed(now=0.0)
        assert 0.75 * full <= wait <= full
    spread = {round(Backoff(jitter=0.25, rng=random.Random(s)).failed(0.0), 6) for s in range(20)}
    assert len(spread) > 10  # processes restarted together do not retry in step


def test_ready_follows_the_clock_and_success_resets() -> None:
    b = Backoff(base_s=2.0, cap_s=60.0, jitter=0.0)
    assert b.ready(100.0)
    assert b.failed(100.0) == 2.0
    assert not b.ready(101.9) and b.remaining(101.0) == pytest.approx(1.0)
    assert b.ready(102.0)
    assert b.failed(102.0) == 4.0 and b.failures == 2
    b.succeeded()
    assert b.ready(102.0) and b.failures == 0 and b.remaining(102.0) == 0.0
    assert b.failed(103.0) == 2.0  # from the base again


def test_thousands_of_failures_stay_at_the_cap() -> None:
    b = Backoff(base_s=1.0, cap_s=60.0, factor=10.0, jitter=0.0)
    for _ in range(5000):
        wait = b.failed(0.0)
    assert wait == 60.0


@pytest.mark.parametrize(
    "kwargs", [{"base_s": 0.0}, {"base_s": 5.0, "cap_s": 1.0}, {"factor": 0.5}, {"jitter": 1.0}, {"jitter": -0.1}]
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)  # type: ignore[arg-type]
