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

from ._base import state_array

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
    "Prior",
    "Reservoir",
    "State",
    "WordRows",
    "allocate",
    "allocated_bytes",
    "arrays",
    "restore",
    "restore_array",
]

# Indices into the int64 counter array ``Particles.ctr``.
N_FREE = 0  # free word-count rows (top of the ``WordRows.free`` stack)
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
D_FREE = 11  # free document-count rows (top of the ``DocRows.dfree`` stack)
N_RDIV = 12  # reservoir slots on the divergent-token list ``Reservoir.rdiv[:ctr[N_RDIV]]``
N_CTR = 13

# Indices into the float64 array ``Particles.fst``.
LOG_EVIDENCE = 0  # Σ_i log Σ_p ω^(p) Σ_k q_k^(p): the filter's estimate of log P(w_1..w_i)
LAST_ESS = 1
N_FST = 2


class WordRows(NamedTuple):
    """Topic–word counts n_kw^(p) of every particle: K-long count rows shared copy on write.

    ``ptr[w, p]`` is the row holding particle p's counts of word w (word-major: a token reads P neighbours);
    row 0 of ``rows`` is the all-zero row of every unseen word and is never written; ``refcnt[r]`` counts the
    particles pointing at row r ≥ 1; ``free[:ctr[N_FREE]]`` is a stack of free rows. ``div[:ctr[N_DIV]]``
    lists the words whose pointers may differ between particles (``div_mark[w]`` = 1 while listed).
    """

    rows: NDArray[np.int32]  # (C, K)
    refcnt: NDArray[np.int64]  # (C,)
    free: NDArray[np.int64]  # (C,)
    ptr: NDArray[np.int32]  # (W, P)
    div: NDArray[np.int32]  # (W,)
    div_mark: NDArray[np.uint8]  # (W,)


class DocRows(NamedTuple):
    """Document–topic counts n_d·^(p) of the documents that still matter, per document slot.

    ``dptr[s, p]`` is the row of ``drows`` holding particle p's counts of the document in slot s (0 = the zero
    row), shared copy on write with reference counts ``dref`` and the free stack ``dfree[:ctr[D_FREE]]``. The
    pool has D·P + 1 rows, so it never runs out. ``slot_len[s]`` is the document's tokens so far,
    ``slot_refs[s]`` the reservoir tokens (plus an open document) using the slot, ``slot_free[:ctr[SLOT_TOP]]``
    the free slots; slot D − 1 is the scratch slot of documents that find none free.
    """

    drows: NDArray[np.int32]  # (D·P + 1, K)
    dref: NDArray[np.int64]  # (D·P + 1,)
    dfree: NDArray[np.int64]  # (D·P + 1,)
    dptr: NDArray[np.int32]  # (D, P)
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


class State(NamedTuple):
    """The four bundles together: what the filter's steps read and write (numba unpacks the nested bundles)."""

    words: WordRows
    docs: DocRows
    res: Reservoir
    parts: Particles


class Prior(NamedTuple):
    """LDA's symmetric Dirichlet priors α (document–topic) and β (topic–word), and Wβ for W words."""

    alpha: float
    beta: float
    wbeta: float


class Config(NamedTuple):
    """The settings the filter step reads: priors α, β; resample when ESS < ess_threshold·P; r tokens per
    rejuvenation sequence."""

    alpha: float
    beta: float
    ess_threshold: float
    n_rejuv: int


Bundle = TypeVar("Bundle", WordRows, DocRows, Reservoir, Particles)


def allocate(
    P: int, W: int, K: int, C: int, R: int, D: int, prng: NDArray[np.uint64]
) -> tuple[WordRows, DocRows, Reservoir, Particles]:
    """Empty state for P particles, W words, K topics, C word-count rows, R reservoir slots, D document slots
    (the scratch slot included)."""
    free = np.zeros(C, dtype=np.int64)
    free[: C - 1] = np.arange(C - 1, 0, -1)  # rows 1..C-1; row 0 is the shared zero row
    words = WordRows(
        rows=np.zeros((C, K), dtype=np.int32),
        refcnt=np.zeros(C, dtype=np.int64),
        free=free,
        ptr=np.zeros((W, P), dtype=np.int32),
        div=np.zeros(W, dtype=np.int32),
        div_mark=np.zeros(W, dtype=np.uint8),
    )
    dfree = np.zeros(D * P + 1, dtype=np.int64)
    dfree[: D * P] = np.arange(D * P, 0, -1)  # rows 1..D·P; row 0 is the shared zero row
    slot_free = np.zeros(D, dtype=np.int64)
    slot_free[: D - 1] = np.arange(D - 2, -1, -1)  # slot D-1 is the scratch slot
    docs = DocRows(
        drows=np.zeros((D * P + 1, K), dtype=np.int32),
        dref=np.zeros(D * P + 1, dtype=np.int64),
        dfree=dfree,
        dptr=np.zeros((D, P), dtype=np.int32),
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


def allocated_bytes(P: int, W: int, K: int, C: int, R: int, D: int) -> int:
    """Bytes of the arrays :func:`allocate` makes for these sizes, from their shapes (without allocating)."""
    pool = 4 * C * K + 8 * C + 8 * C + 4 * W * P + 4 * W + W  # rows, refcnt, free, ptr, div, div_mark
    docs = 4 * (D * P + 1) * K + 16 * (D * P + 1) + 4 * D * P + 24 * D  # drows, dref + dfree, dptr, slot_*
    reservoir = 4 * R + 4 * R + 2 * R * P + 4 * R + R  # res_w, res_slot, res_z, rdiv, rdiv_mark
    particles = 8 * P * K + 8 * P + 8 * (N_CTR + N_FST) + 8 * 4  # nk, weights, ctr, fst, prng
    return pool + docs + reservoir + particles


def arrays(*bundles: WordRows | DocRows | Reservoir | Particles) -> Iterator[tuple[str, NDArray[Any]]]:
    """(name, array) of every field of the bundles."""
    for b in bundles:
        yield from zip(b._fields, b, strict=True)


def restore_array(name: str, current: NDArray[Any], state: Mapping[str, Any]) -> NDArray[Any]:
    """A copy of ``state[name]`` with the shape and dtype of ``current`` (``ValueError`` if the shape differs)."""
    return state_array(state, name, current.shape, current.dtype)


def restore(template: Bundle, state: Mapping[str, Any]) -> Bundle:
    """A bundle like ``template`` holding copies of ``state[name]`` for its fields (same shapes and dtypes)."""
    return type(template)(*(restore_array(name, getattr(template, name), state) for name in template._fields))
