"""The evidence topic hygiene judges on: distinct documents, not copies.

The co-occurrence merge (:mod:`kernels._cooccur`) reads how topic proportions vary across documents, and the
held-out moves (:mod:`kernels._delete`, :mod:`kernels._background_merge`) how well the topics explain documents the
model has not learned. Both assume the documents are a sample of the stream. A news stream is not always one: a wire
story syndicated a thousand times, a producer replaying its last batch, a burst of articles with no word the
vocabulary keeps (an unsegmented language) — and then the recent documents are one document many times. Measured
on the online HDP (10 topics learned on BBC News, then 1,200 articles of stop words only, or 5,000 copies of one
story): every proportion column was the same in every row, rounding made them correlate ±1, and hygiene merged
topics 0.56–0.75 apart in Hellinger distance (its threshold is 0.35) and then deleted the topics the copies did not
use, leaving 3–4 of 10; the real topics did not come back. So hygiene counts each document once: documents with no
token are left out, and of documents whose word counts are nearly the same (cosine similarity ≥
:data:`DUPLICATE_COSINE`) the first is kept.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy import sparse

from ._batch import Batch

__all__ = ["DUPLICATE_COSINE", "distinct_documents", "distinct_rows"]

#: Cosine similarity of two documents' word counts at or above which they are copies of one document (one word
#: changed in a 200-word story: 0.99; two different articles on one subject: 0.2–0.6).
DUPLICATE_COSINE = 0.9


def distinct_rows(docs: Batch, similar: float = DUPLICATE_COSINE) -> NDArray[np.int64]:
    """Indices of the documents of ``docs`` that have tokens and are not copies of an earlier one (cosine similarity
    of their counts < ``similar`` with every document kept before them), in order."""
    if docs.n_docs == 0:
        return np.zeros(0, dtype=np.int64)
    n_words = int(docs.word_ids.max(initial=0)) + 1
    x = sparse.csr_matrix((docs.counts, docs.word_ids, docs.indptr), shape=(docs.n_docs, n_words))
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x = sparse.diags(np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)) @ x
    cosine = (x @ x.T).toarray()
    kept: list[int] = []
    for d in np.flatnonzero(norms > 0):
        if not kept or cosine[d, kept].max() < similar:
            kept.append(int(d))
    return np.asarray(kept, dtype=np.int64)


def distinct_documents(docs: Batch, similar: float = DUPLICATE_COSINE) -> Batch:
    """``docs`` without the documents that have no token and without copies (:func:`distinct_rows`)."""
    keep = distinct_rows(docs, similar)
    return docs if keep.size == docs.n_docs else docs.take(keep)
