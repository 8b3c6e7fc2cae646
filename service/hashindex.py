"""Open-addressing hash tables over 64-bit keys, in numba (outside the GIL), for the text path.

:class:`service.text.Tokenizer` hashes a batch's words in polars and counts them per document here
(:func:`count_runs`); :class:`service.text.Vocabulary` finds each word's hash in an index of its own words'
hashes (:func:`build_index`, :func:`find_all`) in O(1): one or two cache misses a row, where a binary search over
65,536 sorted hashes takes sixteen. The tables compare hashes only; the callers check the words behind every
match (a vectorised string comparison), so two words with equal hashes are never confused.

>>> import numpy as np
>>> keys = np.array([7, 2**63 + 5, 7], dtype=np.uint64)
>>> table = build_index(keys)
>>> find_all(table, keys, np.array([2**63 + 5, 7, 8], dtype=np.uint64)).tolist()
[1, 0, -1]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kernels._numba_cache import ensure_numba_cache

__all__ = ["build_index", "count_runs", "find_all"]

ensure_numba_cache(Path(__file__).parent)  # before numba looks for a cache for the functions below


@njit(cache=True, nogil=True)
def _build(keys: NDArray[np.uint64], table: NDArray[np.int64]) -> None:
    mask = np.uint64(table.size - 1)
    for i in range(keys.size):
        j = keys[i] & mask
        while table[j] >= 0:
            j = (j + np.uint64(1)) & mask
        table[j] = i


@njit(cache=True, nogil=True)
def _find(table: NDArray[np.int64], keys: NDArray[np.uint64], queries: NDArray[np.uint64]) -> NDArray[np.int64]:
    mask = np.uint64(table.size - 1)
    out = np.full(queries.size, -1, dtype=np.int64)
    for q in range(queries.size):
        key = queries[q]
        j = key & mask
        while table[j] >= 0:
            if keys[table[j]] == key:
                out[q] = table[j]
                break
            j = (j + np.uint64(1)) & mask
    return out


def build_index(keys: NDArray[np.uint64]) -> NDArray[np.int64]:
    """A table (a power of two, at least twice the keys: short probe runs) of positions into ``keys``."""
    size = 1 << max(4, int(2 * keys.size).bit_length())
    table = np.full(size, -1, dtype=np.int64)
    _build(np.ascontiguousarray(keys, dtype=np.uint64), table)
    return table


def find_all(table: NDArray[np.int64], keys: NDArray[np.uint64], queries: NDArray[np.uint64]) -> NDArray[np.int64]:
    """For each query, the position in ``keys`` of an equal key, or −1."""
    return _find(table, np.ascontiguousarray(keys, dtype=np.uint64), np.ascontiguousarray(queries, dtype=np.uint64))


@njit(cache=True, nogil=True)
def count_runs(
    doc: NDArray[np.int64], keys: NDArray[np.uint64]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Count equal keys within each document: ``(group, first, counts)``.

    ``doc`` is non-decreasing (the rows of one document are contiguous). Groups are numbered in order of their
    first row, document by document (the order of a stable group-by on (doc, key)): row ``i`` belongs to group
    ``group[i]``, whose first row is ``first[g]`` and which has ``counts[g]`` rows.
    """
    n = doc.size
    longest, run = 0, 0
    for i in range(n):
        run = run + 1 if i > 0 and doc[i] == doc[i - 1] else 1
        longest = max(longest, run)
    size = 16
    while size < 2 * longest:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.full(size, -1, dtype=np.int64)  # group of each bucket, −1 empty
    used = np.empty(max(longest, 1), dtype=np.int64)  # buckets filled by the current document
    n_used = 0
    group = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    counts = np.zeros(n, dtype=np.float64)
    n_groups = 0
    for i in range(n):
        if i > 0 and doc[i] != doc[i - 1]:
            for u in range(n_used):
                table[used[u]] = -1
            n_used = 0
        key = keys[i]
        j = key & mask
        while True:
            g = table[j]
            if g < 0:
                table[j] = n_groups
                used[n_used] = j
                n_used += 1
                first[n_groups] = i
                counts[n_groups] = 1.0
                group[i] = n_groups
                n_groups += 1
                break
            if keys[first[g]] == key:
                counts[g] += 1.0
                group[i] = g
                break
            j = (j + np.uint64(1)) & mask
    return group, first[:n_groups], counts[:n_groups]
