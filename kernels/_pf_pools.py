"""Copy-on-write pools of the particle filter: count rows shared between particles, divergent lists, slots.

A particle writes a word-count row (:func:`own_row`) or a document-count row (:func:`own_drow`) only after
making it private, so resampling copies a particle by copying row pointers, not its K·W counts, and a token
step copies at most one K-long row per particle. :func:`copy_pairs` (the copy of step 4) visits only what can
differ between particles: the words on the divergent-word list, the document slots in use and the reservoir
tokens on the divergent-token list. :func:`forget_words` serves ``reset_words``. The layout is that of
:mod:`kernels._pf_state`; the design is described in ``docs/particle-filter.md``, "Storage".
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ._pf_state import (
    COPIED,
    COW_ROWS,
    D_FREE,
    FILL,
    N_DIV,
    N_FREE,
    N_RDIV,
    PEAK_ROWS,
    SLOT_TOP,
    DocRows,
    Particles,
    Reservoir,
    RowPool,
    WordRows,
)

__all__ = [
    "close_slot",
    "copy_pairs",
    "enlist",
    "evict_token",
    "forget_words",
    "open_slot",
    "own_drow",
    "own_row",
    "shared_row",
]


# ------------------------------------------------------------------------------------------ lists and rows
@njit(cache=True, nogil=True)
def enlist(items: NDArray[np.int32], mark: NDArray[np.uint8], ctr: NDArray[np.int64], n: int, x: int) -> None:
    """Put x on the list ``items[:ctr[n]]`` unless ``mark[x]`` says it is on it already."""
    if mark[x] == 0:
        mark[x] = 1
        items[ctr[n]] = x
        ctr[n] += 1


@njit(cache=True, nogil=True)
def _unlist(items: NDArray[np.int32], mark: NDArray[np.uint8], ctr: NDArray[np.int64], n: int, a: int) -> None:
    """Take entry a off the list ``items[:ctr[n]]`` (the last entry moves into its place)."""
    mark[items[a]] = 0
    last = ctr[n] - 1
    items[a] = items[last]
    ctr[n] = last


@njit(cache=True, nogil=True)
def _agree(row: NDArray[np.int32] | NDArray[np.int16]) -> bool:
    """Whether all P entries of ``row`` (one per particle) are equal."""
    p = 1
    while p < row.shape[0] and row[p] == row[0]:
        p += 1
    return p == row.shape[0]


@njit(cache=True, nogil=True)
def _private_row(pool: RowPool, ctr: NDArray[np.int64], top: int, i: int, p: int) -> int:
    """Make particle p's row of item i private (copy on write) and return it; the caller guarantees a free row
    (``ctr[top] ≥ 1``) when the row is shared or the zero row."""
    rows = pool.rows
    refcnt = pool.refcnt
    r = pool.ptr[i, p]
    if r != 0 and refcnt[r] == 1:
        return r
    ctr[top] -= 1
    new = pool.free[ctr[top]]
    K = rows.shape[1]
    if r == 0:
        for k in range(K):
            rows[new, k] = 0
    else:
        for k in range(K):
            rows[new, k] = rows[r, k]
        refcnt[r] -= 1
    refcnt[new] = 1
    pool.ptr[i, p] = new
    return new


@njit(cache=True, nogil=True)
def shared_row(pool: RowPool, ctr: NDArray[np.int64], top: int, i: int) -> int:
    """Give item i one zeroed row that every particle points to (reference count P); returns it."""
    ctr[top] -= 1
    r = pool.free[ctr[top]]
    for k in range(pool.rows.shape[1]):
        pool.rows[r, k] = 0
    P = pool.ptr.shape[1]
    pool.refcnt[r] = P
    for p in range(P):
        pool.ptr[i, p] = r
    return r


@njit(cache=True, nogil=True)
def _release(pool: RowPool, ctr: NDArray[np.int64], top: int, r: int) -> None:
    """Drop one pointer to row r ≥ 1; a row nobody points to goes back on the free stack."""
    pool.refcnt[r] -= 1
    if pool.refcnt[r] == 0:
        pool.free[ctr[top]] = r
        ctr[top] += 1


@njit(cache=True, nogil=True)
def _repoint(
    pool: RowPool, ctr: NDArray[np.int64], top: int, i: int, src: NDArray[np.int64], dst: NDArray[np.int64], n: int
) -> int:
    """Point particle ``dst[j]``'s row of item i where ``src[j]``'s points, j < n; returns the pointers
    rewritten."""
    pi = pool.ptr[i]
    copied = 0
    for j in range(n):
        rs = pi[src[j]]
        rd = pi[dst[j]]
        if rs != rd:
            if rd != 0:
                _release(pool, ctr, top, rd)
            if rs != 0:
                pool.refcnt[rs] += 1
            pi[dst[j]] = rs
            copied += 1
    return copied


# ------------------------------------------------------------------------------------------ the two pools
@njit(cache=True, nogil=True)
def own_row(words: WordRows, ctr: NDArray[np.int64], p: int, w: int) -> int:
    """Make particle p's row of word w private (copy on write) and return its pool index.

    The caller guarantees a free row (``ctr[N_FREE] ≥ 1``). A word that gets a new row goes on the
    divergent-word list.
    """
    pool = words.pool
    r = pool.ptr[w, p]
    new = _private_row(pool, ctr, N_FREE, w, p)
    if new != r:
        enlist(words.div, words.div_mark, ctr, N_DIV, w)
        if r != 0:
            ctr[COW_ROWS] += 1
        used = pool.rows.shape[0] - 1 - ctr[N_FREE]
        if used > ctr[PEAK_ROWS]:
            ctr[PEAK_ROWS] = used
    return new


@njit(cache=True, nogil=True)
def own_drow(docs: DocRows, ctr: NDArray[np.int64], s: int, p: int) -> int:
    """Make particle p's document-count row of slot s private (copy on write) and return its index. The pool
    (D·P + 1 rows) always has a free row: a shared or zero row means fewer than D·P rows are in use."""
    return _private_row(docs.pool, ctr, D_FREE, s, p)


@njit(cache=True, nogil=True)
def open_slot(docs: DocRows, ctr: NDArray[np.int64]) -> int:
    """Give the next document a slot for its n_d· (the scratch slot, last, when none is free: its tokens then
    stay out of the reservoir), every particle's counts at the zero row. The open document holds one reference
    to its slot."""
    pool = docs.pool
    scratch = pool.ptr.shape[0] - 1
    if ctr[SLOT_TOP] > 0:
        ctr[SLOT_TOP] -= 1
        s = docs.slot_free[ctr[SLOT_TOP]]
    else:
        s = scratch
    docs.slot_refs[s] = 1
    docs.slot_len[s] = 0
    for p in range(pool.ptr.shape[1]):
        r = pool.ptr[s, p]
        if r != 0:
            _release(pool, ctr, D_FREE, r)
            pool.ptr[s, p] = 0
    return s


@njit(cache=True, nogil=True)
def _drop_slot_ref(docs: DocRows, ctr: NDArray[np.int64], s: int) -> None:
    """One user (a reservoir token) of slot s is gone: free the slot when it has no user left."""
    slot_refs = docs.slot_refs
    slot_refs[s] -= 1
    if slot_refs[s] == 0 and s != slot_refs.shape[0] - 1:
        docs.slot_free[ctr[SLOT_TOP]] = s
        ctr[SLOT_TOP] += 1


@njit(cache=True, nogil=True)
def close_slot(docs: DocRows, ctr: NDArray[np.int64], s: int) -> None:
    """The document in slot s is complete: drop its reference; free the slot if no reservoir token uses it."""
    if s == docs.slot_refs.shape[0] - 1:
        docs.slot_refs[s] = 0
    else:
        _drop_slot_ref(docs, ctr, s)


@njit(cache=True, nogil=True)
def evict_token(docs: DocRows, res: Reservoir, ctr: NDArray[np.int64], j: int) -> None:
    """Reservoir token j leaves: its document slot loses a user."""
    _drop_slot_ref(docs, ctr, res.res_slot[j])


# ------------------------------------------------------------------------------------------ particles
@njit(cache=True, nogil=True)
def copy_pairs(
    src: NDArray[np.int64],
    dst: NDArray[np.int64],
    n_pairs: int,
    words: WordRows,
    docs: DocRows,
    res: Reservoir,
    parts: Particles,
) -> None:
    """Make particle ``dst[i]`` a copy of ``src[i]`` for every pair i (step 4), copying only what differs.

    Topic–word counts: only the words on the divergent-word list are visited (every other word has one row
    shared by all particles); of those, only row pointers that differ are rewritten (reference counts
    adjusted, rows nobody points to any more go back to the free stack), never the K-long rows. A word whose P
    pointers all agree afterwards leaves the list. n_k is copied; the n_d· row pointers only for document slots
    in use; the reservoir's z only for the slots on the divergent-token list (dropped from it once all
    particles agree). No source is a destination.
    """
    ctr = parts.ctr
    nk = parts.nk
    K = nk.shape[1]
    copied = 0
    a = 0
    while a < ctr[N_DIV]:
        w = words.div[a]
        copied += _repoint(words.pool, ctr, N_FREE, w, src, dst, n_pairs)
        if _agree(words.pool.ptr[w]):  # leaves the list; the entry moved into place a is visited next
            _unlist(words.div, words.div_mark, ctr, N_DIV, a)
        else:
            a += 1
    for i in range(n_pairs):
        for k in range(K):
            nk[dst[i], k] = nk[src[i], k]
    copied += K * n_pairs
    for s in range(docs.slot_refs.shape[0]):
        if docs.slot_refs[s] > 0:
            copied += _repoint(docs.pool, ctr, D_FREE, s, src, dst, n_pairs)
    a = 0
    while a < ctr[N_RDIV]:
        zj = res.res_z[res.rdiv[a]]
        for i in range(n_pairs):
            zj[dst[i]] = zj[src[i]]
        copied += n_pairs
        if _agree(zj):
            _unlist(res.rdiv, res.rdiv_mark, ctr, N_RDIV, a)
        else:
            a += 1
    ctr[COPIED] += copied


@njit(cache=True, nogil=True)
def forget_words(
    ids: NDArray[np.int64],
    mask: NDArray[np.bool_],
    words: WordRows,
    docs: DocRows,
    res: Reservoir,
    parts: Particles,
) -> None:
    """reset_words: point every particle's rows of these words at the zero row (n_k reduced accordingly, rows
    nobody uses go back to the pool) and drop the words' tokens from the reservoir (compacted)."""
    ctr = parts.ctr
    nk = parts.nk
    pool = words.pool
    P = pool.ptr.shape[1]
    K = nk.shape[1]
    for p in range(P):
        for a in range(ids.shape[0]):
            w = ids[a]
            r = pool.ptr[w, p]
            if r != 0:
                for k in range(K):
                    nk[p, k] -= pool.rows[r, k]
                _release(pool, ctr, N_FREE, r)
                pool.ptr[w, p] = 0
    res_w = res.res_w
    res_z = res.res_z
    j = 0
    while j < ctr[FILL]:
        if mask[res_w[j]]:
            evict_token(docs, res, ctr, j)
            last = ctr[FILL] - 1
            res_w[j] = res_w[last]
            res.res_slot[j] = res.res_slot[last]
            for p in range(P):
                res_z[j, p] = res_z[last, p]
            ctr[FILL] -= 1
        else:
            j += 1
    # The compaction moved tokens between slots: rebuild the divergent-token list.
    for a in range(ctr[N_RDIV]):
        res.rdiv_mark[res.rdiv[a]] = 0
    ctr[N_RDIV] = 0
    for j in range(ctr[FILL]):
        if not _agree(res_z[j]):
            enlist(res.rdiv, res.rdiv_mark, ctr, N_RDIV, j)
