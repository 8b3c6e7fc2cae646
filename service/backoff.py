"""Exponential backoff with a cap and jitter, for spacing out attempts at something that is down.

The learner snapshots on a schedule; while Redis is unreachable each attempt costs a connect timeout and a full
pack of the state, so attempts are spaced out: the n-th consecutive failure waits ``min(cap, base·factor^(n-1))``
seconds, less a random fraction up to ``jitter`` of it (so that many processes do not retry in step). One success
resets it. Pure: the caller passes the clock, so tests need no sleeping.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """``failed(now)`` after each failure, ``succeeded()`` after a success, ``ready(now)`` before an attempt."""

    base_s: float = 1.0
    cap_s: float = 60.0
    factor: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    failures: int = field(default=0, init=False)
    next_at: float = field(default=float("-inf"), init=False)

    def __post_init__(self) -> None:
        if not (0 < self.base_s <= self.cap_s):
            raise ValueError(f"need 0 < base_s <= cap_s, got base_s={self.base_s}, cap_s={self.cap_s}")
        if self.factor < 1:
            raise ValueError(f"factor must be >= 1, got {self.factor}")
        if not (0 <= self.jitter < 1):
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failures (0 → no wait), jitter included."""
        if failures <= 0:
            return 0.0
        # Cap the exponent too: factor ** failures overflows a float after ~1000 failures.
        full = self.cap_s if failures > 64 else min(self.cap_s, self.base_s * self.factor ** (failures - 1))
        return full * (1.0 - self.jitter * self.rng.random())

    def failed(self, now: float) -> float:
        """Record a failure at time ``now``; returns the wait before the next attempt."""
        self.failures += 1
        wait = self.delay(self.failures)
        self.next_at = now + wait
        return wait

    def succeeded(self) -> None:
        """Record a success: the next failure starts from ``base_s`` again."""
        self.failures = 0
        self.next_at = float("-inf")

    def ready(self, now: float) -> bool:
        """Whether an attempt is due at time ``now``."""
        return now >= self.next_at

    def remaining(self, now: float) -> float:
        """Seconds until the next attempt is due (0 when it is due now)."""
        return max(0.0, self.next_at - now)
