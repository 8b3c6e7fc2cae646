"""Documents as the kernels see them: bags of word ids in compressed sparse row form.

Every kernel consumes a :class:`Batch`. Callers may pass a sequence of ``(word_ids, counts)`` pairs instead;
:func:`as_batch` converts and validates once, so the numba kernels can trust their input.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["CSR", "Batch", "Docs", "RecentDocs", "as_batch", "integer_ids", "recent_batch"]


class CSR(NamedTuple):
    """Documents as the numba kernels take them: one typed bundle instead of three loose arrays.

    Document ``d`` holds the entries ``indptr[d]:indptr[d+1]`` of ``ids`` (global word ids, or a minibatch's
    local word slots) and ``counts`` (float64 expected counts, or the particle filter's int64 token counts).
    numba compiles a function for the bundle's field types, so ``ids`` and ``counts`` cannot be swapped.
    """

    indptr: NDArray[np.int64]
    ids: NDArray[np.int64]
    counts: NDArray[Any]


@dataclass(frozen=True)
class Batch:
    """A minibatch of documents in CSR form.

    Document ``d`` holds the distinct words ``word_ids[indptr[d]:indptr[d+1]]`` with the matching ``counts``
    (its maker sees to that; :func:`as_batch` adds up the counts of a word that ``(word_ids, counts)`` pairs
    list twice).

    Attributes
    ----------
    indptr : int64 array, shape (n_docs + 1,)
    word_ids : int64 array, shape (nnz,)
    counts : float64 array, shape (nnz,)
        Positive and finite (counts may be fractional, e.g. tf-idf-like weights; the kernels treat them as
        token counts).
    """

    indptr: NDArray[np.int64]
    word_ids: NDArray[np.int64]
    counts: NDArray[np.float64]

    @property
    def csr(self) -> CSR:
        """The same arrays (no copy) as the numba kernels' :class:`CSR` bundle."""
        return CSR(self.indptr, self.word_ids, self.counts)

    @property
    def n_docs(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def n_tokens(self) -> float:
        return float(self.counts.sum())

    def doc_tokens(self) -> NDArray[np.float64]:
        """Tokens (sum of counts) of each document, shape ``(n_docs,)``; 0 for an empty document."""
        doc_of = np.repeat(np.arange(self.n_docs), np.diff(self.indptr))
        return np.bincount(doc_of, weights=self.counts, minlength=self.n_docs).astype(np.float64)

    def doc(self, d: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The ``(word_ids, counts)`` of document ``d``."""
        lo, hi = self.indptr[d], self.indptr[d + 1]
        return self.word_ids[lo:hi], self.counts[lo:hi]

    def __len__(self) -> int:
        return self.n_docs

    def slice(self, start: int, stop: int) -> Batch:
        """Documents ``start:stop`` as a new batch (views, no copy of the word arrays)."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        return Batch(self.indptr[start : stop + 1] - lo, self.word_ids[lo:hi], self.counts[lo:hi])

    def take(self, rows: ArrayLike) -> Batch:
        """The documents ``rows`` (indices, in the order given) as a new batch. A boolean mask is refused: read as
        indices it would take documents 0 and 1 (use ``np.flatnonzero``)."""
        given = np.asarray(rows)
        if given.dtype == np.bool_:
            raise TypeError("Batch.take wants document indices, not a boolean mask (use np.flatnonzero)")
        rows = given.astype(np.int64, copy=False)
        lo, hi = self.indptr[rows], self.indptr[rows + 1]
        indptr = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=indptr[1:])
        entries = np.repeat(lo - indptr[:-1], hi - lo) + np.arange(indptr[-1])
        return Batch(indptr, self.word_ids[entries], self.counts[entries])

    def without_words(self, word_ids: ArrayLike) -> Batch:
        """The same documents without the entries of ``word_ids`` (a document may be left without words)."""
        keep = ~np.isin(self.word_ids, np.asarray(word_ids))
        kept = np.concatenate(([0], np.cumsum(keep)))
        return Batch(kept[self.indptr].astype(np.int64), self.word_ids[keep], self.counts[keep])

    @classmethod
    def from_docs(cls, docs: Sequence[tuple[ArrayLike, ArrayLike]]) -> Batch:
        """Build a batch from ``(word_ids, counts)`` pairs (not validated beyond their shape: use
        :func:`as_batch`). ``ValueError`` for a document whose ids or counts are not 1-d."""
        ids_of = [np.atleast_1d(np.asarray(ids)) for ids, _ in docs]
        counts_of = [np.atleast_1d(np.asarray(c, dtype=np.float64)) for _, c in docs]
        for d, (ids, c) in enumerate(zip(ids_of, counts_of, strict=True)):
            if ids.ndim != 1 or c.ndim != 1:
                raise ValueError(f"document {d}: word ids {ids.shape} and counts {c.shape} must be 1-d")
        indptr = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum([len(ids) for ids in ids_of], out=indptr[1:])
        if len(docs):
            word_ids, counts = np.concatenate(ids_of), np.concatenate(counts_of)
        else:
            word_ids, counts = np.zeros(0, dtype=np.int64), np.zeros(0)
        return cls(indptr, integer_ids(word_ids), np.ascontiguousarray(counts))


def integer_ids(ids: NDArray[Any]) -> NDArray[np.int64]:
    """``ids`` as int64, or ``ValueError`` naming the first id that is not an integer (2.7, "3", NaN) or does not
    fit (an unsigned id ≥ 2^63): a cast would silently learn another word."""
    if ids.dtype.kind == "O":  # Python ints (or anything else) in an object array: read them as numpy would
        ids = np.array(ids.tolist()) if ids.size else np.zeros(0, dtype=np.int64)
    kind = ids.dtype.kind
    if kind == "u" and ids.size and int(ids.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"word id {int(ids.max())} is too large")
    if kind not in "iub":
        bad = np.flatnonzero(~np.isfinite(ids) | (ids != np.rint(ids))) if kind == "f" else np.arange(ids.size)
        if bad.size:
            raise ValueError(f"word ids must be integers, got {ids.tolist()[bad[0]]!r}")
    return np.ascontiguousarray(ids, dtype=np.int64)


Docs = Batch | Sequence[tuple[ArrayLike, ArrayLike]]


def as_batch(docs: Docs, n_words: int) -> Batch:
    """Convert ``docs`` to a validated :class:`Batch` whose word ids lie in ``[0, n_words)``. A word that a
    ``(word_ids, counts)`` pair lists more than once has its counts added up: a document may be given as its
    tokens, ``(token_ids, np.ones(len(token_ids)))``.

    Raises
    ------
    ValueError
        With a message naming the first problem: mismatched lengths, word ids out of range, counts that are
        not positive and finite, or a malformed ``indptr``.
    """
    pairs = not isinstance(docs, Batch)
    batch = docs if isinstance(docs, Batch) else Batch.from_docs(list(docs))
    indptr = np.ascontiguousarray(batch.indptr, dtype=np.int64)
    word_ids = integer_ids(np.asarray(batch.word_ids))
    counts = np.ascontiguousarray(batch.counts, dtype=np.float64)
    if indptr.ndim != 1 or indptr.shape[0] < 1 or indptr[0] != 0:
        raise ValueError("indptr must be a 1-d array starting at 0")
    if np.any(np.diff(indptr) < 0):
        raise ValueError("indptr must be non-decreasing")
    if word_ids.shape != counts.shape or word_ids.ndim != 1:
        raise ValueError(f"word_ids {word_ids.shape} and counts {counts.shape} must be 1-d and of equal length")
    if indptr[-1] != word_ids.shape[0]:
        raise ValueError(f"indptr ends at {indptr[-1]} but there are {word_ids.shape[0]} entries")
    if word_ids.size:
        lo, hi = int(word_ids.min()), int(word_ids.max())
        if lo < 0 or hi >= n_words:
            bad = lo if lo < 0 else hi
            raise ValueError(f"word id {bad} is outside the vocabulary [0, {n_words})")
        if not np.all(np.isfinite(counts)) or np.any(counts <= 0):
            raise ValueError("counts must be positive and finite")
    if pairs:
        return _merge_repeats(Batch(indptr, word_ids, counts), n_words)
    return Batch(indptr, word_ids, counts)


def _merge_repeats(batch: Batch, n_words: int) -> Batch:
    """``batch`` with the counts of a word listed more than once in a document added up (a token list given as
    ``(ids, ones)``), so that every kernel sees the distinct words a :class:`Batch` promises; SCVB0's mixtures
    differed by up to 0.13 between the two spellings of one document. Only for pairs: a :class:`Batch` is built
    by its maker with distinct words (the service's tokenizer counts them)."""
    doc_of = np.repeat(np.arange(batch.n_docs, dtype=np.int64), np.diff(batch.indptr))
    keys = doc_of * n_words + batch.word_ids
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if unique.size == keys.size:
        return batch
    order = np.argsort(first, kind="stable")  # each word where it first appears, documents in order
    counts = np.bincount(inverse, weights=batch.counts, minlength=unique.size)[order]
    kept = unique[order]
    indptr = np.zeros(batch.n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(kept // n_words, minlength=batch.n_docs), out=indptr[1:])
    return Batch(indptr, np.ascontiguousarray(kept % n_words), np.ascontiguousarray(counts))


def join_batches(batches: Sequence[Batch]) -> Batch:
    """The documents of ``batches``, in order, as one batch.

    >>> one = join_batches([Batch.from_docs([([0], [1.0])]), Batch.from_docs([([1, 2], [2.0, 1.0])])])
    >>> one.indptr.tolist(), one.word_ids.tolist()
    ([0, 1, 3], [0, 1, 2])
    """
    if not batches:
        return Batch.from_docs([])
    starts = np.cumsum([0] + [int(b.indptr[-1]) for b in batches[:-1]])
    indptr = np.concatenate(
        [np.zeros(1, dtype=np.int64)] + [b.indptr[1:] + s for b, s in zip(batches, starts, strict=True)]
    )
    return Batch(
        indptr.astype(np.int64),
        np.concatenate([b.word_ids for b in batches]).astype(np.int64),
        np.concatenate([b.counts for b in batches]).astype(np.float64),
    )


def recent_batch(batches: Sequence[Batch], max_docs: int = 256) -> Batch | None:
    """The last ``max_docs`` documents of ``batches`` (oldest batch first) as one batch; ``None`` if there are
    none. A learner keeps its last few ``partial_fit`` batches (a bounded deque) and passes this to topic hygiene
    (:meth:`kernels.hygiene.TopicHygiene.apply`)."""
    if max_docs < 1:
        raise ValueError(f"max_docs must be a positive integer, got {max_docs}")
    docs: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    for b in reversed(batches):
        for d in range(b.n_docs - 1, -1, -1):
            if len(docs) == max_docs:
                break
            docs.append(b.doc(d))
    return Batch.from_docs(docs[::-1]) if docs else None


class RecentDocs:
    """The latest ``max_docs`` documents of a stream of batches, for topic hygiene (:meth:`TopicHygiene.apply`).

    Whole batches are kept, the oldest dropped once the newer ones hold ``max_docs`` documents, so the memory is
    bounded by the documents, however small or large the batches.

    >>> recent = RecentDocs(3)
    >>> for n in (2, 2, 2):
    ...     recent.append(Batch.from_docs([([0], [1.0])] * n))
    >>> recent.batch().n_docs
    3
    """

    def __init__(self, max_docs: int) -> None:
        if isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1:
            raise ValueError(f"max_docs must be a positive integer, got {max_docs!r}")
        self.max_docs = max_docs
        self._batches: deque[Batch] = deque()
        self._docs = 0

    def append(self, batch: Batch) -> None:
        self._batches.append(batch)
        self._docs += batch.n_docs
        while self._docs - self._batches[0].n_docs >= self.max_docs:
            self._docs -= self._batches.popleft().n_docs

    def batch(self) -> Batch | None:
        """The latest ``max_docs`` documents as one batch, oldest first; ``None`` before any."""
        return recent_batch(list(self._batches), self.max_docs)
