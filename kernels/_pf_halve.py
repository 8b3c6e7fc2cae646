"""Halving the particle filter's topic–word counts before an int32 count can wrap.

The counts n_kw^(p) are int32 (``WordRows.rows``: half the memory of int64 in the filter's largest array). A
stream that runs long enough at full speed would take the top word of its largest topic past 2^31 − 1 (about ten
days at the benchmark's speed), and a wrapped count is negative: the proposal's masses and the particle weights
would stop meaning anything. :func:`halve_counts` halves every count instead, rounding down, so the filter keeps
its topics (φ̂_kw = (n_kw + β)/(n_k + Wβ) of the words a topic holds more than once hardly moves; a word it holds
once leaves it, unless a reservoir token holds it) and from then on weighs new tokens twice as much as old ones: a
forgetting step, as the power prior of a model that has seen 2^30 tokens of one word in one topic can afford. The
filter also halves whenever its counts hold more than its ``window`` of tokens: that is how it forgets, so that a
topic starting late in a long stream is learned (``docs/particle-filter.md``). Rounding up kept every count of 1
for good, so the counts never held fewer tokens than their distinct (word, topic) cells, which a long stream only
adds to: halving down to a window below that left every count at 1 and erased the topics (a review: Reuters with a
window of 50,000, held-out −8.43 nats/word against −6.76 without forgetting; rounding down, −7.29).

Two things must stay true for the filter's later steps (``docs/particle-filter.md``, "Storage"):

* rejuvenation removes a reservoir token from the count of its word and topic, so every count stays at least the
  number of reservoir tokens it holds (in each particle pointing at the row): that is the floor each halved
  count is raised to;
* n_k^(p) = Σ_w n_kw^(p), recomputed from the halved rows for every particle.

The document–topic counts of the reservoir's documents are left as they are: they are bounded by an article's
length and belong to the documents, not to the stream.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._pf_state import FILL, State

__all__ = ["COUNT_LIMIT", "halve_counts"]

#: Counts are halved before a batch that could take one past this (2^30: half the int32 range, so a batch of up
#: to 2^30 tokens still fits after the check).
COUNT_LIMIT = 2**30


@njit(cache=True, nogil=True)
def halve_counts(state: State) -> None:
    """n_kw := ⌊n_kw / 2⌋ in every count row in use, raised to the reservoir tokens each row holds in any
    particle pointing at it; then n_k^(p) = Σ_w n_kw^(p) (see the module docstring)."""
    words, _, res, parts = state
    rows, ptr, refcnt = words.rows, words.ptr, words.refcnt
    nk = parts.nk
    W, P = ptr.shape
    K = rows.shape[1]
    for r in range(1, rows.shape[0]):  # row 0 is the shared zero row
        if refcnt[r] > 0:
            for k in range(K):
                rows[r, k] = rows[r, k] // 2
    fill = parts.ctr[FILL]
    keys = np.empty(fill, dtype=np.int64)
    for p in range(P):  # the reservoir's floor, particle by particle: its tokens per (row, topic)
        for j in range(fill):
            keys[j] = np.int64(ptr[res.res_w[j], p]) * K + res.res_z[j, p]
        keys.sort()
        j = 0
        while j < fill:
            run = j
            while run < fill and keys[run] == keys[j]:
                run += 1
            r, k = keys[j] // K, keys[j] % K
            if r != 0 and rows[r, k] < run - j:
                rows[r, k] = run - j
            j = run
    for p in range(P):
        for k in range(K):
            nk[p, k] = 0
        for w in range(W):
            r = ptr[w, p]
            if r != 0:
                for k in range(K):
                    nk[p, k] += rows[r, k]
