"""Helpers of the particle filter's tests (``tests/test_particle_filter.py``, ``tests/test_pf_gibbs.py``): small
streams, and checks that the copy-on-write state is consistent."""

from __future__ import annotations

import numpy as np

from kernels import Batch, ParticleFilterLDA
from kernels import _pf_state as st

__all__ = [
    "batch_of",
    "check_invariants",
    "ndk_of",
    "random_stream",
    "reservoir_tokens",
    "single_token_docs",
]


def batch_of(docs: list[list[int]]) -> Batch:
    """Documents given as token lists (one count per token, repeats allowed)."""
    return Batch.from_docs([(np.asarray(d, dtype=np.int64), np.ones(len(d))) for d in docs])


def single_token_docs(first: int, n: int) -> Batch:
    return Batch(np.arange(n + 1, dtype=np.int64), np.arange(first, first + n, dtype=np.int64), np.ones(n))


def random_stream(n_docs: int, doc_len: int, W: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, W, n_docs * doc_len).astype(np.int64)
    return Batch(np.arange(0, n_docs * doc_len + 1, doc_len, dtype=np.int64), ids, np.ones(n_docs * doc_len))


def reservoir_tokens(m: ParticleFilterLDA, p: int) -> tuple[list[int], list[int], list[int]]:
    fill = int(m.particles_.ctr[st.FILL])
    return (
        m.reservoir_.res_w[:fill].tolist(),
        m.reservoir_.res_slot[:fill].tolist(),
        m.reservoir_.res_z[:fill, p].astype(int).tolist(),
    )


def ndk_of(m: ParticleFilterLDA, s: int, p: int) -> np.ndarray:
    """Particle p's document–topic counts of slot s (through its copy-on-write row pointer)."""
    return np.asarray(m.doc_rows_.drows[m.doc_rows_.dptr[s, p]])


def _check_pool(rows: np.ndarray, refcnt: np.ndarray, free: np.ndarray, ptr: np.ndarray, n_free: int) -> None:
    """Copy-on-write bookkeeping of one pool of count rows: reference counts = pointers, free stack + used rows
    = pool, no negative count, row 0 all zero."""
    C = rows.shape[0]
    used = np.bincount(ptr.ravel(), minlength=C)
    used[0] = 0
    np.testing.assert_array_equal(refcnt[1:], used[1:])
    stack = free[:n_free]
    assert len(set(stack.tolist())) == n_free and 0 not in stack
    assert np.all(used[stack] == 0)
    assert n_free + int(np.count_nonzero(used[1:])) == C - 1
    assert np.all(rows[0] == 0) and np.all(rows[ptr] >= 0)


def _check_list(items: np.ndarray, mark: np.ndarray, n: int, differ: np.ndarray) -> None:
    """A divergent list: ``items[:n]`` without duplicates, ``mark`` set exactly for them, and every entry whose
    values differ between particles (``differ``, a prefix of the marks) listed."""
    listed = items[:n]
    assert len(set(listed.tolist())) == n
    expected = np.zeros(mark.size, dtype=np.uint8)
    expected[listed] = 1
    np.testing.assert_array_equal(mark, expected)
    assert np.all(mark[: differ.size][differ] == 1)


def check_invariants(m: ParticleFilterLDA) -> None:
    """Both pools' bookkeeping (:func:`_check_pool`), n_k = Σ_w n_kw for every particle, and the divergent-word
    and divergent-token lists (:func:`_check_list`)."""
    ctr = m.particles_.ctr
    words, docs = m.words_, m.doc_rows_
    _check_pool(words.rows, words.refcnt, words.free, words.ptr, int(ctr[st.N_FREE]))
    _check_pool(docs.drows, docs.dref, docs.dfree, docs.dptr, int(ctr[st.D_FREE]))
    for p in range(m.n_particles):
        np.testing.assert_array_equal(words.rows[words.ptr[:, p]].sum(axis=0), m.particles_.nk[p])
    differ = words.ptr.min(axis=1) != words.ptr.max(axis=1)
    _check_list(m.words_.div, m.words_.div_mark, int(ctr[st.N_DIV]), differ)
    z = m.reservoir_.res_z[: int(ctr[st.FILL])]
    _check_list(m.reservoir_.rdiv, m.reservoir_.rdiv_mark, int(ctr[st.N_RDIV]), z.min(axis=1) != z.max(axis=1))
