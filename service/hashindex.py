"""An open-addressing hash index over 64-bit keys, in numba (outside the GIL), for the vocabulary's look-ups.

:class:`service.text.Vocabulary` hashes a batch's words in polars and finds each hash here in O(1): one or two
cache misses a row, where a binary search over 65,536 sorted hashes takes sixteen. The index stores positions
into the caller's key array; duplicate keys are allowed (the first inserted is found), and the caller checks
every hit against the real word, so the index itself never needs to be exact.

>>> import numpy as np
>>> keys = np.array([7, 2**63 + 5, 7], dtype=np.uint64)
>>> table = build_index(keys)
>>> find_all(table, keys, np.array([2**63 + 5, 7, 8], dtype=np.uint64)).tolist()
[1, 0, -1]
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["build_index", "find_all"]


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
