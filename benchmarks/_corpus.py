"""Corpora for benchmarks and data tests: a deliberately simple local tokenizer and held-out evaluation.

Tokenizer: lower-case, words are runs of ``[a-z]+``, drop scikit-learn's ``ENGLISH_STOP_WORDS`` and words of
fewer than 3 letters; the vocabulary is the words with document frequency ≥ ``min_df`` in the training part.
(To be replaced by the service's tokenizer later.)

Held-out evaluation is document completion (``docs/scvb0.md``): each test document's tokens are split 50/50
at random (seeded); θ is inferred from the first half with the topics fixed and the second half is scored as
the mean of log Σ_k θ_k φ_kw over its tokens.

The corpora live in ``../shared/data`` (never copied into the repository).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from kernels import Batch

__all__ = ["document_completion", "heldout_loglik", "load_corpus", "shared_data_dir", "tokenize"]

_WORD = re.compile(r"[a-z]+")
_STOP = frozenset(ENGLISH_STOP_WORDS)


def shared_data_dir() -> Path:
    """``$TOPICSTREAM_SHARED_DATA`` or ``../shared/data`` next to the repository root."""
    env = os.environ.get("TOPICSTREAM_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def tokenize(text: str) -> list[str]:
    """Lower-case ``[a-z]+`` words of at least 3 letters that are not English stop words."""
    return [w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP]


def _read(path: str | Path, max_docs: int | None) -> list[dict[str, Any]]:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if max_docs is not None and len(rows) >= max_docs:
                break
    return rows


def _to_batch(token_lists: list[list[str]], index: dict[str, int]) -> Batch:
    indptr = [0]
    ids: list[int] = []
    cnts: list[float] = []
    for toks in token_lists:
        c = Counter(index[t] for t in toks if t in index)
        for w in sorted(c):
            ids.append(w)
            cnts.append(float(c[w]))
        indptr.append(len(ids))
    return Batch(np.asarray(indptr, dtype=np.int64), np.asarray(ids, dtype=np.int64), np.asarray(cnts))


def load_corpus(
    path: str | Path,
    test_path: str | Path | None = None,
    *,
    test_fraction: float = 0.2,
    min_df: int = 2,
    shuffle: bool = True,
    seed: int = 0,
    max_docs: int | None = None,
) -> tuple[Batch, Batch, list[str], tuple[list[str | None], list[str | None]]]:
    """Load a JSONL.gz corpus (``title`` + ``text``) as (train Batch, test Batch, vocabulary, labels).

    With ``test_path`` the two files are train and test; otherwise a seeded random ``test_fraction`` of
    ``path`` is the test part. ``shuffle`` permutes the training documents (seeded): the 20 Newsgroups files
    are sorted by group, which would make a one-pass stream a sequence of 20 unrelated corpora. ``labels`` is
    ``(train_labels, test_labels)`` in the returned order. Test words outside the vocabulary are dropped.
    """
    rng = np.random.default_rng(seed)
    rows = _read(path, max_docs)
    if test_path is None:
        perm = rng.permutation(len(rows))
        n_test = round(test_fraction * len(rows))
        test_rows = [rows[i] for i in perm[:n_test]]
        train_rows = [rows[i] for i in perm[n_test:]]
    else:
        train_rows = rows
        test_rows = _read(test_path, max_docs)
    if shuffle:
        train_rows = [train_rows[i] for i in rng.permutation(len(train_rows))]
    train_toks = [tokenize(f"{r.get('title') or ''}\n{r.get('text') or ''}") for r in train_rows]
    test_toks = [tokenize(f"{r.get('title') or ''}\n{r.get('text') or ''}") for r in test_rows]
    df = Counter(w for toks in train_toks for w in set(toks))
    vocab = sorted(w for w, n in df.items() if n >= min_df)
    index = {w: i for i, w in enumerate(vocab)}
    labels = ([r.get("label") for r in train_rows], [r.get("label") for r in test_rows])
    return _to_batch(train_toks, index), _to_batch(test_toks, index), vocab, labels


def document_completion(batch: Batch, seed: int = 0) -> tuple[Batch, Batch]:
    """Split each document's tokens 50/50 at random: (observed half, held-out half).

    Counts are rounded to whole tokens; documents with fewer than 2 tokens are dropped from both halves.
    """
    rng = np.random.default_rng(seed)
    first: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    second: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    for d in range(batch.n_docs):
        ids, cnts = batch.doc(d)
        tokens = np.repeat(ids, np.rint(cnts).astype(np.int64))
        if tokens.size < 2:
            continue
        rng.shuffle(tokens)
        half = tokens.size // 2
        for part, out in ((tokens[:half], first), (tokens[half:], second)):
            u, c = np.unique(part, return_counts=True)
            out.append((u, c.astype(np.float64)))
    return Batch.from_docs(first), Batch.from_docs(second)


def heldout_loglik(theta: NDArray[np.float64], phi: NDArray[np.float64], heldout: Batch, chunk: int = 512) -> float:
    """Mean over held-out tokens of log Σ_k θ_dk φ_kw (nats per word)."""
    total = 0.0
    n = 0.0
    for d0 in range(0, heldout.n_docs, chunk):
        part = heldout.slice(d0, min(heldout.n_docs, d0 + chunk))
        doc_of = np.repeat(np.arange(part.n_docs), np.diff(part.indptr))
        p = np.einsum("ik,ki->i", theta[d0 + doc_of], phi[:, part.word_ids])
        total += float(np.dot(part.counts, np.log(p)))
        n += float(part.counts.sum())
    return total / n if n else float("nan")


def evaluate(model: Any, test: Batch, seed: int = 0) -> float:
    """Document-completion held-out log-likelihood per word of a fitted kernel on ``test``."""
    observed, heldout = document_completion(test, seed)
    theta = model.transform(observed)
    return heldout_loglik(theta, model.topic_word(), heldout)
