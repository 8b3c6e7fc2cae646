"""The particle filter's random numbers (``kernels/_pf_rng.py``), checked on their own.

``tests/naive/pf.py`` draws from the kernel's generator so that its draws can be compared with the kernel's one
for one; so the generator itself needs checks that do not rest on it: xoshiro256** against a plain-Python
transcription of Blackman & Vigna's reference C code (64-bit arithmetic by masking), and the samplers' draws
against their distributions (chi-square).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from kernels._pf_rng import rng_below, rng_next, rng_uniform, sample_cat, sample_cumulative

_MASK = (1 << 64) - 1


def _xoshiro256ss(state: list[int], n: int) -> list[int]:
    """Outputs of xoshiro256** as the reference C code computes them (prng.di.unimi.it/xoshiro256starstar.c)."""

    def rotl(x: int, k: int) -> int:
        return ((x << k) | (x >> (64 - k))) & _MASK

    s = list(state)
    out = []
    for _ in range(n):
        out.append(rotl((s[1] * 5) & _MASK, 7) * 9 & _MASK)
        t = (s[1] << 17) & _MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
    return out


def test_outputs_are_xoshiro256_starstar() -> None:
    for seed in ([1, 2, 3, 4], [0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xDEADBEEFCAFEF00D]):
        s = np.array(seed, dtype=np.uint64)
        got = [int(rng_next(s)) for _ in range(1000)]
        assert got == _xoshiro256ss(seed, 1000)
    assert _xoshiro256ss([1, 2, 3, 4], 1) == [11520]  # rotl(2·5, 7)·9, by hand


def _state(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 2**63, size=4, dtype=np.uint64)


def test_uniforms_are_uniform_in_the_unit_interval() -> None:
    s = _state(1)
    u = np.array([rng_uniform(s) for _ in range(200_000)])
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_integers_below_n_are_uniform(n: int) -> None:
    s = _state(n)
    draws = np.array([rng_below(s, n) for _ in range(50 * n + 10_000)])
    assert draws.min() >= 0 and draws.max() < n
    if n > 1:
        assert stats.chisquare(np.bincount(draws, minlength=n)).pvalue > 1e-3


def test_both_samplers_draw_each_topic_with_its_probability() -> None:
    q = np.array([0.0, 5.0, 1.0, 0.0, 2.5, 0.5, 1.0])  # unnormalised, zero masses included
    total, runs = float(q.sum()), 100_000
    s1, s2 = _state(2), _state(2)
    cat = np.bincount([sample_cat(q, q.size, total, s1) for _ in range(runs)], minlength=q.size)
    cum = np.bincount([sample_cumulative(np.cumsum(q), q.size, s2) for _ in range(runs)], minlength=q.size)
    assert cat[q == 0].sum() == 0 and cum[q == 0].sum() == 0
    expected = runs * q[q > 0] / total
    assert stats.chisquare(cat[q > 0], expected).pvalue > 1e-3
    assert np.array_equal(cat, cum)  # the same u picks the same topic (bisection = linear scan)
    # The test can fail: draws from a wrong distribution are told apart.
    wrong = runs * np.roll(q[q > 0], 1) / total
    assert stats.chisquare(cat[q > 0], wrong).pvalue < 1e-3
