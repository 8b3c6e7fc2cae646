"""Corpora for the kernel benchmarks and data tests, with the service's tokenizer and the project's scorer.

Tokenizer: :class:`service.text.Tokenizer` (lower-case, runs of letters, scikit-learn's English stop words,
3–30 letters); the vocabulary is the words with document frequency ≥ ``min_df`` in the training part.

Held-out evaluation is document completion (``docs/scvb0.md``): each test document's tokens are split 50/50
at random (seeded); θ is inferred from the first half with the topics fixed and the second half is scored as
the mean of log Σ_k θ_k φ_kw over its tokens.

The corpora live in ``../shared/data`` (never copied into the repository).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from evaluation import document_completion as _split_halves
from evaluation import heldout_loglik_per_word as heldout_loglik
from kernels import Batch
from service.text import Tokenizer

__all__ = ["document_completion", "heldout_loglik", "load_corpus", "shared_data_dir", "tokenize"]

_TOKENIZER = Tokenizer()


def shared_data_dir() -> Path:
    """``$TOPICSTREAM_SHARED_DATA`` or ``../shared/data`` next to the repository root."""
    env = os.environ.get("TOPICSTREAM_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def tokenize(text: str) -> list[str]:
    """The service's tokenization of ``text``."""
    return _TOKENIZER(text)


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

    The project's one scorer (:func:`evaluation.document_completion`), without the row index.
    """
    observed, held_out, _ = _split_halves(batch, seed)
    return observed, held_out


def evaluate(model: Any, test: Batch, seed: int = 0) -> float:
    """Document-completion held-out log-likelihood per word of a fitted kernel on ``test``."""
    observed, heldout = document_completion(test, seed)
    theta = model.transform(observed)
    return heldout_loglik(theta, model.topic_word(), heldout)
