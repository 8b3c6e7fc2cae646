"""Step-size schedules for stochastic (Robbins–Monro) updates.

The papers use ρ_t = s / (τ + t)^κ, which tends to zero: after enough articles a model stops following the
news. A stream never ends, so every schedule here has a floor ρ_min: once ρ_t reaches it the statistics become an
exponential moving average whose memory is about 1/ρ_min minibatches. ``floor=0`` gives the papers' schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StepSize"]


@dataclass(frozen=True)
class StepSize:
    """ρ_t = max(floor, scale / (tau + t)^kappa).

    Parameters
    ----------
    scale : float
        s > 0.
    tau : float
        τ ≥ 0, delays early iterations (large τ = small early steps).
    kappa : float
        κ in (0.5, 1] for the Robbins–Monro conditions; we accept (0, 1].
    floor : float
        ρ_min in [0, 1): the smallest step ever taken.

    Examples
    --------
    >>> rho = StepSize(scale=1.0, tau=1.0, kappa=0.7, floor=0.01)
    >>> round(rho(0), 3), rho(10**9)
    (1.0, 0.01)
    """

    scale: float
    tau: float
    kappa: float
    floor: float = 0.0

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"step-size scale must be > 0, got {self.scale}")
        if not self.tau >= 0:
            raise ValueError(f"step-size tau must be >= 0, got {self.tau}")
        if not 0 < self.kappa <= 1:
            raise ValueError(f"step-size kappa must be in (0, 1], got {self.kappa}")
        if not 0 <= self.floor < 1:
            raise ValueError(f"step-size floor must be in [0, 1), got {self.floor}")

    def __call__(self, t: float) -> float:
        """The step for iteration ``t`` (t = 0 is the first), capped at 1."""
        base = self.tau + t
        if base <= 0:
            return 1.0
        return min(1.0, max(self.floor, self.scale / base**self.kappa))
