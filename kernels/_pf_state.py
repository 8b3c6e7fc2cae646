"""The particle filter's learned state as four typed bundles, and the settings its numba code reads.

Each bundle is a :class:`typing.NamedTuple` of numpy arrays; numba compiles a function for the bundle's type, so
the filter's functions take a few bundles by name instead of ~25 loose arrays by position (two bundles passed in
the wrong order fail to compile). The arrays are shared, not copied: the numba functions update them in place.
The storage design (copy-on-write count rows, divergent lists, document slots, the reservoir) is described in
``docs/particle-filter.md``, "Storage"; the names below are those of the model's ``state_dict``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "COLLAPSES",
    "COPIED",
    "COW_ROWS",
    "D_FREE",
    "FILL",
    "LAST_ESS",
    "LOG_EVIDENCE",
    "N_DIV",
    "N_FREE",
    "N_RDIV",
    "PEAK_ROWS",
    "REJUVENATIONS",
    "RESAMPLES",
    "SLOT_TOP",
    "TOKENS",
    "Config",
    "DocRows",
    "Particles",
    "Reservoir",
    "RowPool",
    "WordRows",
    "allocate",
    "arrays",
    "restore",
    "restore_array",
]

# Indices into the int64 counter array ``Particles.ctr``.
N_FREE = 0  # free word-count rows (top of the free stack of ``WordRows.pool``)
TOKENS = 1  # tokens seen by the filter, init sample included (the i of Algorithm R)
FILL = 2  # reservoir slots in use
RESAMPLES = 3  # ESS-triggered resamplings (step 4)
REJUVENATIONS = 4  # rejuvenation sequences run (step 5)
COLLAPSES = 5  # pool-full fallbacks (all particles set to one drawn by weight)
SLOT_TOP = 6  # free document slots (top of the ``DocRows.slot_free`` stack)
COPIED = 7  # integers written when copying particles in resampling (pointers + counts)
COW_ROWS = 8  # K-long rows copied on write
PEAK_ROWS = 9  # largest number of word-count rows in use
N_DIV = 10  # words on the divergent-word list ``WordRows.div[:ctr[N_DIV]]``
D_FREE = 11  # free document-count rows (top of the free stack of ``DocRows.pool``)
N_RDIV = 12  # reservoir slots on the divergent-token list ``Reservoir.rdiv[:ctr[N_RDIV]]``
N_CTR = 13

# Indices into the float64 array ``Particles.fst``.
LOG_EVIDENCE = 0  # Σ_i log Σ_p ω^(p) Σ_k q_k^(p): the filter's estimate of log P(w_1..w_i)
LAST_ESS = 1
N_FST = 2


class RowPool(NamedTuple):
    """K-long count rows shared copy on write between the particles.

    ``ptr[i, p]`` is the row holding particle p's counts of item i (a word, or a document slot); row 0 of
    ``rows`` is the all-zero row of every item without counts and is never written; ``refcnt[r]`` counts the
    pointers at row r ≥ 1; ``free[:ctr[top]]`` is the stack of free rows, ``top`` being ``N_FREE`` for the
    word pool and ``D_FREE`` for the document pool.
    """

    rows: NDArray[np.int32]  # (C, K)
    refcnt: NDArray[np.int64]  # (C,)
    free: NDArray[np.int64]  # (C,)
    ptr: NDArray[np.int32]  # (items, P)


class WordRows(NamedTuple):
    """Topic–word counts n_kw^(p) of every particle: a pool of C rows over the W words (word-major pointers: a
    token reads its P neighbours). ``div[:ctr[N_DIV]]`` lists the words whose pointers may differ between
    particles (``div_mark[w]`` = 1 while listed)."""

    pool: RowPool
    div: NDArray[np.int32]  # (W,)
    div_mark: NDArray[np.uint8]  # (W,)


class DocRows(NamedTuple):
    """Document–topic counts n_d·^(p) of the documents that still matter: a pool of D·P + 1 rows (so it never
    runs out) over D document slots. ``slot_len[s]`` is the document's tokens so far, ``slot_refs[s]`` the
    reservoir tokens (plus an open document) using the slot, ``slot_free[:ctr[SLOT_TOP]]`` the free slots;
    slot D − 1 is the scratch slot of documents that find none free."""

    pool: RowPool
    slot_len: NDArray[np.int64]  # (D,)
    slot_refs: NDArray[np.int64]  # (D,)
    slot_free: NDArray[np.int64]  # (D,)


class Reservoir(NamedTuple):
    """The rejuvenation reservoir (Vitter's Algorithm R): ``ctr[FILL]`` tokens in use.

    Token j is word ``res_w[j]`` of the document in slot ``res_slot[j]`` with topic ``res_z[j, p]`` in particle p.
    ``rdiv[:ctr[N_RDIV]]`` lists the tokens whose z may differ between particles (``rdiv_mark``).
    """

    res_w: NDArray[np.int32]  # (R,)
    res_slot: NDArray[np.int32]  # (R,)
    res_z: NDArray[np.int16]  # (R, P)
    rdiv: NDArray[np.int32]  # (R,)
    rdiv_mark: NDArray[np.uint8]  # (R,)


class Particles(NamedTuple):
    """Per-particle weights ω and topic totals n_k, the counters, and the random generator."""

    nk: NDArray[np.int64]  # (P, K)
    weights: NDArray[np.float64]  # (P,)
    ctr: NDArray[np.int64]  # (N_CTR,), indexed by the constants above
    fst: NDArray[np.float64]  # (N_FST,)
    prng: NDArray[np.uint64]  # (4,) xoshiro256** state (kernels._pf_rng)


class Config(NamedTuple):
    """The settings the filter step reads: priors α, β; resample when ESS < ess_threshold·P; r tokens per
    rejuvenation sequence."""

    alpha: float
    beta: float
    ess_threshold: float
    n_rejuv: int


Bundle = TypeVar("Bundle", WordRows, DocRows, Reservoir, Particles)

# State names of the pools' arrays (those of the snapshots written before the pools were bundles).
_POOL_NAMES = {
    WordRows: {"rows": "rows", "refcnt": "refcnt", "free": "free", "ptr": "ptr"},
    DocRows: {"rows": "drows", "refcnt": "dref", "free": "dfree", "ptr": "dptr"},
}


def _new_pool(n_rows: int, K: int, n_items: int, P: int) -> RowPool:
    free = np.zeros(n_rows, dtype=np.int64)
    free[: n_rows - 1] = np.arange(n_rows - 1, 0, -1)  # rows 1..n_rows-1; row 0 is the shared zero row
    return RowPool(
        rows=np.zeros((n_rows, K), dtype=np.int32),
        refcnt=np.zeros(n_rows, dtype=np.int64),
        free=free,
        ptr=np.zeros((n_items, P), dtype=np.int32),
    )


def allocate(
    P: int, W: int, K: int, C: int, R: int, D: int, prng: NDArray[np.uint64]
) -> tuple[WordRows, DocRows, Reservoir, Particles]:
    """Empty state for P particles, W words, K topics, C word-count rows, R reservoir slots, D document slots
    (the scratch slot included)."""
    words = WordRows(pool=_new_pool(C, K, W, P), div=np.zeros(W, dtype=np.int32), div_mark=np.zeros(W, dtype=np.uint8))
    slot_free = np.zeros(D, dtype=np.int64)
    slot_free[: D - 1] = np.arange(D - 2, -1, -1)  # slot D-1 is the scratch slot
    docs = DocRows(
        pool=_new_pool(D * P + 1, K, D, P),
        slot_len=np.zeros(D, dtype=np.int64),
        slot_refs=np.zeros(D, dtype=np.int64),
        slot_free=slot_free,
    )
    res = Reservoir(
        res_w=np.zeros(R, dtype=np.int32),
        res_slot=np.zeros(R, dtype=np.int32),
        res_z=np.zeros((R, P), dtype=np.int16),
        rdiv=np.zeros(R, dtype=np.int32),
        rdiv_mark=np.zeros(R, dtype=np.uint8),
    )
    ctr = np.zeros(N_CTR, dtype=np.int64)
    ctr[N_FREE] = C - 1
    ctr[SLOT_TOP] = D - 1
    ctr[D_FREE] = D * P
    fst = np.zeros(N_FST, dtype=np.float64)
    fst[LAST_ESS] = float(P)
    parts = Particles(nk=np.zeros((P, K), dtype=np.int64), weights=np.full(P, 1.0 / P), ctr=ctr, fst=fst, prng=prng)
    return words, docs, res, parts


def arrays(*bundles: WordRows | DocRows | Reservoir | Particles) -> Iterator[tuple[str, NDArray[Any]]]:
    """(state name, array) of every array of the bundles."""
    for b in bundles:
        for name in b._fields:
            value = getattr(b, name)
            if isinstance(value, RowPool):
                names = _POOL_NAMES[type(b)]
                yield from ((names[f], getattr(value, f)) for f in value._fields)
            else:
                yield name, value


def restore_array(name: str, current: NDArray[Any], state: Mapping[str, Any]) -> NDArray[Any]:
    """A copy of ``state[name]`` with the shape and dtype of ``current`` (``ValueError`` if the shape differs)."""
    new = np.asarray(state[name])
    if new.shape != current.shape:
        raise ValueError(f"state array {name!r} has shape {new.shape}, expected {current.shape}")
    return np.array(new, dtype=current.dtype, copy=True)


def restore(template: Bundle, state: Mapping[str, Any]) -> Bundle:
    """A bundle like ``template`` holding copies of the state's arrays (same shapes and dtypes)."""
    fields = []
    for name in template._fields:
        value = getattr(template, name)
        if isinstance(value, RowPool):
            names = _POOL_NAMES[type(template)]
            value = RowPool(*(restore_array(names[f], getattr(value, f), state) for f in value._fields))
        else:
            value = restore_array(name, value, state)
        fields.append(value)
    return type(template)(*fields)
