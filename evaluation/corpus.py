"""Corpora for evaluation: reading articles, splitting, one fixed vocabulary, batches, document completion.

See the package docstring for the exact definitions."""

from __future__ import annotations

import gzip
import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kernels import Batch
from service.text import Tokenizer


# ============================================================================================ data loading
def load_articles(path: str | Path, max_docs: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Articles from a JSON Lines file (gzip-compressed or not); blank lines and a leading byte-order mark are
    skipped.

    With ``max_docs``, a seeded random sample of that many, in file order (reservoir sampling: memory for
    ``max_docs`` articles only). Not the first so many: corpus files are often sorted by label or date, and their
    first lines would be one class. Raises ``ValueError`` naming the line of anything that is not a JSON object.
    """
    p = Path(path)
    with open(p, "rb") as probe:  # gzip by its magic bytes, whatever the file is called
        opener = gzip.open if probe.read(2) == b"\x1f\x8b" else open
    rows: list[dict[str, Any]] = []
    lines: list[int] = []  # each kept row's position among the articles
    rng = np.random.default_rng(seed)
    seen = 0
    with opener(p, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:  # a leading byte-order mark is not part of the text (RFC 8259 lets a parser ignore it)
                line = raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8") if lineno == 1 else raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{p}:{lineno}: not UTF-8 ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{lineno}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{p}:{lineno}: not a JSON object")
            seen += 1
            if max_docs is None or len(rows) < max_docs:
                rows.append(obj)
                lines.append(seen)
            elif (j := int(rng.integers(seen))) < max_docs:  # Algorithm R: the new one replaces a kept one
                rows[j], lines[j] = obj, seen
    return rows if max_docs is None else [rows[i] for i in np.argsort(lines, kind="stable")]


def article_text(article: dict[str, Any]) -> str:
    """Title and body of an article, as one text."""
    title = article.get("title") or ""
    text = article.get("text") or ""
    return f"{title}\n\n{text}" if title else str(text)


def primary_label(label: Any) -> str | None:
    """The label used for NMI: the first of ``;``-separated labels, ``None`` when absent or empty."""
    if label is None:
        return None
    first = str(label).split(";", 1)[0].strip()
    return first or None


def split_articles(
    articles: Sequence[dict[str, Any]], test_fraction: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A seeded random ``test_fraction`` of the articles is the test set: ``(train, test)``, in file order."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test fraction must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    n_test = max(1, round(test_fraction * len(articles)))
    is_test = np.zeros(len(articles), dtype=bool)
    is_test[rng.permutation(len(articles))[:n_test]] = True
    train = [a for a, t in zip(articles, is_test, strict=True) if not t]
    test = [a for a, t in zip(articles, is_test, strict=True) if t]
    return train, test


def build_vocabulary(token_lists: Sequence[Sequence[str]], vocab_size: int, min_df: int = 2) -> list[str]:
    """Words of document frequency ≥ ``min_df``: the ``vocab_size`` most frequent (token count, then word)."""
    df: Counter[str] = Counter()
    tf: Counter[str] = Counter()
    for toks in token_lists:
        tf.update(toks)
        df.update(set(toks))
    words = [w for w, n in df.items() if n >= min_df]
    words.sort(key=lambda w: (-tf[w], w))
    return words[:vocab_size]


def encode(token_lists: Sequence[Sequence[str]], index: dict[str, int]) -> Batch:
    """Bags of words (ids ascending within a document) as one :class:`Batch`; unknown words are dropped."""
    indptr = np.zeros(len(token_lists) + 1, dtype=np.int64)
    ids: list[int] = []
    cnts: list[float] = []
    get = index.get
    for j, toks in enumerate(token_lists):
        c = Counter(i for i in map(get, toks) if i is not None)
        for w in sorted(c):
            ids.append(w)
            cnts.append(float(c[w]))
        indptr[j + 1] = len(ids)
    return Batch(indptr, np.asarray(ids, dtype=np.int64), np.asarray(cnts, dtype=np.float64))


def iter_batches(batch: Batch, batch_size: int) -> Iterator[Batch]:
    """Consecutive slices of ``batch_size`` documents (views)."""
    for start in range(0, batch.n_docs, batch_size):
        yield batch.slice(start, min(batch.n_docs, start + batch_size))


def document_completion(test: Batch, seed: int) -> tuple[Batch, Batch, NDArray[np.int64]]:
    """Split each test document's tokens at random: ``(observed, held_out, doc_index)``.

    ``doc_index[i]`` is the row of ``test`` that row ``i`` of the halves came from (documents with fewer
    than 2 tokens are skipped). Observed = the first ⌊n/2⌋ tokens of a seeded shuffle, held out = the rest.
    """
    rng = np.random.default_rng(seed)
    first: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    second: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    kept: list[int] = []
    for d in range(test.n_docs):
        ids, cnts = test.doc(d)
        tokens = np.repeat(ids, np.rint(cnts).astype(np.int64))
        if tokens.size < 2:
            continue
        rng.shuffle(tokens)
        half = tokens.size // 2
        for part, out in ((tokens[:half], first), (tokens[half:], second)):
            u, c = np.unique(part, return_counts=True)
            out.append((u, c.astype(np.float64)))
        kept.append(d)
    return Batch.from_docs(first), Batch.from_docs(second), np.asarray(kept, dtype=np.int64)


@dataclass
class PreparedCorpus:
    """A corpus turned into word ids once, shared by every method that is evaluated on it."""

    vocab: list[str]
    train: Batch
    test: Batch
    observed: Batch
    held_out: Batch
    test_labels: list[str | None]
    tokenize_seconds: float

    @property
    def n_words(self) -> int:
        return len(self.vocab)

    def save(self, path: str | Path) -> None:
        """Store as one ``.npz`` (arrays and the vocabulary; no pickle)."""
        arrays: dict[str, Any] = {}
        for name in ("train", "test", "observed", "held_out"):
            b: Batch = getattr(self, name)
            arrays[f"{name}_indptr"] = b.indptr
            arrays[f"{name}_ids"] = b.word_ids
            arrays[f"{name}_counts"] = b.counts
        arrays["meta"] = np.asarray(
            json.dumps(
                {
                    "vocab": self.vocab,
                    "test_labels": self.test_labels,
                    "tokenize_seconds": self.tokenize_seconds,
                }
            )
        )
        np.savez(path, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> PreparedCorpus:
        z = np.load(path, allow_pickle=False)
        meta = json.loads(str(z["meta"]))
        batches = {
            name: Batch(z[f"{name}_indptr"], z[f"{name}_ids"], z[f"{name}_counts"])
            for name in ("train", "test", "observed", "held_out")
        }
        return cls(
            vocab=list(meta["vocab"]),
            test_labels=list(meta["test_labels"]),
            tokenize_seconds=float(meta["tokenize_seconds"]),
            **batches,
        )


def prepare_corpus(
    train_articles: Sequence[dict[str, Any]],
    test_articles: Sequence[dict[str, Any]],
    *,
    vocab_size: int = 10_000,
    seed: int = 0,
    shuffle: bool = True,
    min_df: int = 2,
    tokenizer: Tokenizer | None = None,
    drop_repeats: bool = True,
) -> PreparedCorpus:
    """Tokenise (each article in its ``language``, for a ``tokenizer`` with languages), build the fixed
    vocabulary, encode, and split the test documents for document completion.

    Training documents with no in-vocabulary token are dropped (a kernel has nothing to learn from them), and so
    are test articles whose tokens equal a training article's: news files repeat stories, and a model must not be
    scored on text it trained on (``drop_repeats``; off where the test part is the training part on purpose).
    """
    tok = tokenizer or Tokenizer()
    rng = np.random.default_rng(seed)
    train_articles = list(train_articles)
    if shuffle:
        train_articles = [train_articles[i] for i in rng.permutation(len(train_articles))]
    t0 = time.perf_counter()
    train_toks = [tok(article_text(a), a.get("language")) for a in train_articles]
    test_toks = [tok(article_text(a), a.get("language")) for a in test_articles]
    tokenize_seconds = time.perf_counter() - t0
    if drop_repeats:
        trained_on = {tuple(t) for t in train_toks}
        unseen = [i for i, t in enumerate(test_toks) if tuple(t) not in trained_on]
        test_articles = [test_articles[i] for i in unseen]
        test_toks = [test_toks[i] for i in unseen]
    if not test_toks:
        raise ValueError("no test documents (or every one repeats a training article)")
    vocab = build_vocabulary(train_toks, vocab_size, min_df)
    if not vocab:
        raise ValueError("no word occurs in two training documents: the vocabulary is empty")
    index = {w: i for i, w in enumerate(vocab)}
    train = encode(train_toks, index)
    lengths = np.diff(train.indptr)
    if np.any(lengths == 0):
        keep = [d for d in range(train.n_docs) if lengths[d] > 0]
        train = Batch.from_docs([train.doc(d) for d in keep])
    test = encode(test_toks, index)
    observed, held_out, _ = document_completion(test, seed)
    return PreparedCorpus(
        vocab=vocab,
        train=train,
        test=test,
        observed=observed,
        held_out=held_out,
        test_labels=[primary_label(a.get("label")) for a in test_articles],
        tokenize_seconds=tokenize_seconds,
    )
