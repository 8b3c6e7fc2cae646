"""Copy-on-write pools of the particle filter: count rows shared between particles, document slots.

A particle writes a word-count row (:func:`own_row`) or a document-count row (:func:`own_drow`) only after making
it private, so resampling copies a particle by copying row pointers, not its K·W counts, and a token step copies at
most two K-long rows per particle (its word's and its document's). :func:`copy_pairs` (the copy of step 4) visits
only what can differ between particles: the words on the divergent-word list, the document slots in use and the
reservoir tokens on the divergent-token list. :func:`forget_words` serves ``reset_words``. The layout is that of
:mod:`kernels._pf_state`; the design is described in ``docs/particle-filter.md``, "Storage".
"""

from __future__ import annotations

from typing import Any, NamedTuple

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
    Reservoir,
    State,
    WordRows,
)

__all__ = ["close_slot", "copy_pairs", "forget_words", "mark_divergent_token", "open_slot", "own_drow", "own_row"]


class Pool(NamedTuple):
    """One pool of count rows shared copy on write, as :class:`kernels._pf_state.WordRows` and
    :class:`kernels._pf_state.DocRows` each hold one: the rows (row 0 the zero row), their reference counts
    ``ref``, the free stack ``free[:ctr[top]]``, and the pointers ``ptr[i, p]`` of entry i (a word, a document
    slot) and particle p into the rows."""

    rows: NDArray[np.int32]
    ref: NDArray[np.int64]
    free: NDArray[np.int64]
    ptr: NDArray[np.int32]
    top: int


@njit(cache=True, nogil=True, inline="always")
def _word_pool(words: WordRows) -> Pool:
    return Pool(words.rows, words.refcnt, words.free, words.ptr, N_FREE)


@njit(cache=True, nogil=True, inline="always")
def _doc_pool(docs: DocRows) -> Pool:
    return Pool(docs.drows, docs.dref, docs.dfree, docs.dptr, D_FREE)


@njit(cache=True, nogil=True)
def _fill_private(rows: NDArray[np.int32], new: int, r: int) -> None:
    """Row ``new`` (just taken from a free stack) := a private copy of row ``r``'s counts (zeros for the zero
    row 0)."""
    K = rows.shape[1]
    if r == 0:
        for k in range(K):
            rows[new, k] = 0
    else:
        for k in range(K):
            rows[new, k] = rows[r, k]


@njit(cache=True, nogil=True)
def _unref(pool: Pool, ctr: NDArray[np.int64], r: int) -> None:
    """Drop one reference to pool row ``r``; a row nobody uses any more goes back on the pool's free stack."""
    refcnt, free, top = pool.ref, pool.free, pool.top
    refcnt[r] -= 1
    if refcnt[r] == 0:
        free[ctr[top]] = r
        ctr[top] += 1


# Inlined by numba: called once per divergent word and document slot in every resampling, as a call it made the
# filter about 20% slower (benchmark of partial_fit on synthetic data).
@njit(cache=True, nogil=True, inline="always")
def _copy_pointers(pool: Pool, ctr: NDArray[np.int64], e: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> int:
    """``ptrs[dst[i]] := ptrs[src[i]]`` for every pair i, ``ptrs`` = entry e's pointers (one per particle),
    reference counts kept (the zero row 0 is not counted) and unused rows freed (:func:`_unref`). Returns the
    pointers rewritten."""
    ptrs = pool.ptr[e]
    copied = 0
    for i in range(src.shape[0]):
        rs = ptrs[src[i]]
        rd = ptrs[dst[i]]
        if rs != rd:
            if rd != 0:
                _unref(pool, ctr, rd)
            if rs != 0:
                pool.ref[rs] += 1
            ptrs[dst[i]] = rs
            copied += 1
    return copied


@njit(cache=True, nogil=True)
def _all_agree(x: NDArray[np.integer[Any]]) -> bool:
    """Whether every particle's entry of ``x`` (one per particle) is the same."""
    p = 1
    while p < x.shape[0] and x[p] == x[0]:
        p += 1
    return p == x.shape[0]


# The divergent lists (words, reservoir tokens): ``lst[:ctr[top]]`` holds the entries whose ``mark`` is 1.
@njit(cache=True, nogil=True, inline="always")
def _list_add(lst: NDArray[np.int32], mark: NDArray[np.uint8], ctr: NDArray[np.int64], top: int, x: int) -> None:
    """Put ``x`` on the list (if it is not on it already)."""
    if mark[x] == 0:
        mark[x] = 1
        lst[ctr[top]] = x
        ctr[top] += 1


@njit(cache=True, nogil=True, inline="always")
def _list_drop(lst: NDArray[np.int32], mark: NDArray[np.uint8], ctr: NDArray[np.int64], top: int, a: int) -> None:
    """Take entry ``a`` off the list: the last entry moves into its place (so a walk visits it next)."""
    mark[lst[a]] = 0
    last = ctr[top] - 1
    lst[a] = lst[last]
    ctr[top] = last


@njit(cache=True, nogil=True)
def mark_divergent_token(res: Reservoir, ctr: NDArray[np.int64], j: int) -> None:
    """Put reservoir slot ``j`` on the divergent-token list (if it is not on it already)."""
    _list_add(res.rdiv, res.rdiv_mark, ctr, N_RDIV, j)


# Inlined: both callers run once per token and particle in the filter and the rejuvenation.
@njit(cache=True, nogil=True, inline="always")
def _copy_on_write(pool: Pool, ctr: NDArray[np.int64], i: int, p: int, r: int) -> int:
    """Copy on write in one pool: particle p's row ``r = ptr[i, p]``, shared or the zero row 0, becomes a private
    copy taken from the free stack ``free[:ctr[top]]`` (the caller guarantees one); returns its index."""
    rows, ref, free, ptr, top = pool
    ctr[top] -= 1
    new = free[ctr[top]]
    _fill_private(rows, new, r)
    if r != 0:
        ref[r] -= 1  # shared: never the last reference
    ref[new] = 1
    ptr[i, p] = new
    return new


@njit(cache=True, nogil=True)
def own_row(words: WordRows, ctr: NDArray[np.int64], p: int, w: int) -> int:
    """Make particle p's row of word w private (copy on write) and return its pool index.

    The caller guarantees a free row (``ctr[N_FREE] ≥ 1``) when the row is shared or the zero row. A word that
    gets a new row goes on the divergent-word list.
    """
    r = words.ptr[w, p]
    if r != 0 and words.refcnt[r] == 1:
        return r
    _list_add(words.div, words.div_mark, ctr, N_DIV, w)
    if r != 0:
        ctr[COW_ROWS] += 1
    new = _copy_on_write(_word_pool(words), ctr, w, p, r)
    used = words.rows.shape[0] - 1 - ctr[N_FREE]
    if used > ctr[PEAK_ROWS]:
        ctr[PEAK_ROWS] = used
    return new


@njit(cache=True, nogil=True)
def own_drow(docs: DocRows, ctr: NDArray[np.int64], s: int, p: int) -> int:
    """Make particle p's document-count row of slot s private (copy on write) and return its index. The pool
    (D·P + 1 rows) always has a free row: a shared or zero row means fewer than D·P rows are in use."""
    r = docs.dptr[s, p]
    if r != 0 and docs.dref[r] == 1:
        return r
    return _copy_on_write(_doc_pool(docs), ctr, s, p, r)


@njit(cache=True, nogil=True)
def _release_slot(docs: DocRows, ctr: NDArray[np.int64], s: int) -> None:
    """Point every particle's document counts of slot s at the zero row (rows nobody uses go back)."""
    dptr = docs.dptr
    pool = _doc_pool(docs)
    P = dptr.shape[1]
    for p in range(P):
        r = dptr[s, p]
        if r != 0:
            _unref(pool, ctr, r)
            dptr[s, p] = 0


@njit(cache=True, nogil=True)
def open_slot(docs: DocRows, ctr: NDArray[np.int64]) -> int:
    """Give the next document a slot for its n_d· (the scratch slot, last, when none is free: its tokens then
    stay out of the reservoir). The open document holds one reference to its slot."""
    scratch = docs.dptr.shape[0] - 1
    if ctr[SLOT_TOP] > 0:
        ctr[SLOT_TOP] -= 1
        s = docs.slot_free[ctr[SLOT_TOP]]
    else:
        s = scratch
    docs.slot_refs[s] = 1
    docs.slot_len[s] = 0
    _release_slot(docs, ctr, s)
    return s


@njit(cache=True, nogil=True)
def close_slot(docs: DocRows, ctr: NDArray[np.int64], s: int) -> None:
    """The document in slot s is complete: drop its reference; free the slot if no reservoir token uses it."""
    slot_refs = docs.slot_refs
    scratch = slot_refs.shape[0] - 1
    slot_refs[s] -= 1
    if s == scratch:
        slot_refs[s] = 0
    elif slot_refs[s] == 0:
        docs.slot_free[ctr[SLOT_TOP]] = s
        ctr[SLOT_TOP] += 1


@njit(cache=True, nogil=True)
def copy_pairs(src: NDArray[np.int64], dst: NDArray[np.int64], n_pairs: int, state: State) -> None:
    """Make particle ``dst[i]`` a copy of ``src[i]`` for every pair i (step 4), copying only what differs.

    Topic–word counts: only the words on the divergent-word list are visited (every other word has one row
    shared by all particles); of those, only row pointers that differ are rewritten (reference counts
    adjusted, rows nobody points to any more go back to the free stack), never the K-long rows. A word whose P
    pointers all agree afterwards leaves the list. n_k is copied; the n_d· row pointers only for document slots
    in use; the reservoir's z only for the slots on the divergent-token list (dropped from it once all
    particles agree). No source is a destination.
    """
    words, docs, res, parts = state
    ctr = parts.ctr
    nk = parts.nk
    div = words.div
    K = nk.shape[1]
    wpool = _word_pool(words)
    dpool = _doc_pool(docs)
    pairs_src = src[:n_pairs]
    pairs_dst = dst[:n_pairs]
    copied = 0
    a = 0
    while a < ctr[N_DIV]:
        w = div[a]
        pw = words.ptr[w]
        copied += _copy_pointers(wpool, ctr, w, pairs_src, pairs_dst)
        if _all_agree(pw):  # leaves the list (the last entry takes its place and is visited next)
            _list_drop(div, words.div_mark, ctr, N_DIV, a)
        else:
            a += 1
    for i in range(n_pairs):
        for k in range(K):
            nk[dst[i], k] = nk[src[i], k]
    copied += K * n_pairs
    dptr = docs.dptr
    for s in range(dptr.shape[0]):
        if docs.slot_refs[s] > 0:
            copied += _copy_pointers(dpool, ctr, s, pairs_src, pairs_dst)
    rdiv = res.rdiv
    a = 0
    while a < ctr[N_RDIV]:
        j = rdiv[a]
        zj = res.res_z[j]
        for i in range(n_pairs):
            zj[dst[i]] = zj[src[i]]
        copied += n_pairs
        if _all_agree(zj):
            _list_drop(rdiv, res.rdiv_mark, ctr, N_RDIV, a)
        else:
            a += 1
    ctr[COPIED] += copied


@njit(cache=True, nogil=True)
def forget_words(ids: NDArray[np.int64], mask: NDArray[np.bool_], state: State) -> None:
    """reset_words: point every particle's rows of these words at the zero row (n_k reduced accordingly, rows
    nobody uses go back to the pool) and drop the words' tokens from the reservoir (compacted)."""
    words, docs, res, parts = state
    ctr = parts.ctr
    nk = parts.nk
    rows = words.rows
    ptr = words.ptr
    wpool = _word_pool(words)
    P = ptr.shape[1]
    K = nk.shape[1]
    slot_refs = docs.slot_refs
    scratch = slot_refs.shape[0] - 1
    for p in range(P):
        for a in range(ids.shape[0]):
            w = ids[a]
            r = ptr[w, p]
            if r != 0:
                for k in range(K):
                    nk[p, k] -= rows[r, k]
                _unref(wpool, ctr, r)
                ptr[w, p] = 0
    res_w = res.res_w
    res_slot = res.res_slot
    res_z = res.res_z
    j = 0
    while j < ctr[FILL]:
        if mask[res_w[j]]:
            s = res_slot[j]
            slot_refs[s] -= 1
            if slot_refs[s] == 0 and s != scratch:
                docs.slot_free[ctr[SLOT_TOP]] = s
                ctr[SLOT_TOP] += 1
            last = ctr[FILL] - 1
            res_w[j] = res_w[last]
            res_slot[j] = res_slot[last]
            for p in range(P):
                res_z[j, p] = res_z[last, p]
            ctr[FILL] -= 1
        else:
            j += 1
    # The compaction moved tokens between slots: rebuild the divergent-token list.
    rdiv = res.rdiv
    rdiv_mark = res.rdiv_mark
    for a in range(ctr[N_RDIV]):
        rdiv_mark[rdiv[a]] = 0
    ctr[N_RDIV] = 0
    for j in range(ctr[FILL]):
        if not _all_agree(res_z[j]):
            mark_divergent_token(res, ctr, j)
