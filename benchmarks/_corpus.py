"""Corpora for the benchmarks and data tests: one place that names the files, splits and subsets them.

:data:`CORPORA` names each real corpus's files, its test split and whether its training stream is shuffled.
Two preparations, both from :mod:`evaluation`'s reader, tokenizer and encoder:

* :func:`prepare` / :func:`load`: ``topicstream eval``'s (:func:`evaluation.prepare_corpus`: the ``vocab_size``
  most frequent words of document frequency ≥ 2, a seeded random test split, optional seeded random or first-N
  subsets), cached as ``benchmarks/results/cache/<settings>.npz``. :func:`load` also gives the planted corpora
  (``generator``: the demo generator's stream; ``lda``: :func:`lda_corpus`) with their planted topics. Used by
  ``run_all``, ``ohdp_speed``, ``hdp_truncation`` and ``hygiene_planted``.
* :func:`load_corpus`: the kernels' tuning corpora (every word of document frequency ≥ ``min_df``,
  alphabetical; one seeded permutation split), the recipe of ``tune_scvb0``, ``bench_scvb0`` and ``bench_ohdp``
  whose numbers ``docs/scvb0.md`` and ``docs/ohdp.md`` quote.

Tokenizer: :class:`service.text.Tokenizer` (NFKC, lower-case, runs of letters, scikit-learn's English stop words,
3–30 letters).

Held-out evaluation is document completion (``docs/scvb0.md``): each test document's tokens are split 50/50
at random (seeded); θ is inferred from the first half with the topics fixed and the second half is scored as
the mean of log Σ_k θ_k φ_kw over its tokens.

The corpora live in ``../shared/data`` (never copied into the repository).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from evaluation import article_text, load_articles, prepare_corpus, split_articles
from evaluation import document_completion as _split_halves
from evaluation import heldout_loglik_per_word as heldout_loglik
from evaluation.corpus import PreparedCorpus, encode
from kernels import Batch
from service.text import Tokenizer

__all__ = [
    "CORPORA",
    "document_completion",
    "heldout_loglik",
    "lda_corpus",
    "load",
    "load_corpus",
    "prepare",
    "shared_data_dir",
    "tokenize",
]


class Source(NamedTuple):
    """A real corpus: its training file, its test file (or None: a seeded random ``fraction`` of the training
    file is the test part), and whether the training stream is shuffled (seeded)."""

    train: str
    test: str | None
    fraction: float
    shuffle: bool


CORPORA: dict[str, Source] = {
    "bbc": Source("bbc.jsonl.gz", None, 0.2, True),
    # sorted by newsgroup: a one-pass stream in file order would be 20 unrelated corpora, hence the shuffle
    "20ng": Source("20ng_all_train.jsonl.gz", "20ng_all_test.jsonl.gz", 0.0, True),
    # a dated stream: trained in publication order, a random 10 % held out
    "reuters": Source("news_stream_reuters21578.jsonl.gz", None, 0.1, False),
}
#: Training documents of the planted corpora when the caller gives none.
PLANTED_TRAIN = {"generator": 5000, "lda": 4000}
CACHE = Path(__file__).resolve().parent / "results" / "cache"
#: Bumped when :func:`evaluation.prepare_corpus` changes what a cached corpus holds (2: test articles that repeat
#: a training article are left out; 3: the tokenizer normalises non-ASCII text, NFKC), so that an older cache is not
#: read as the new recipe.
RECIPE = 3

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


# ------------------------------------------------------------------------------------ topicstream eval's recipe
def articles(
    name: str, *, seed: int = 0, max_train: int | None = None, max_test: int | None = None, first: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, int]:
    """The train and test articles of a :data:`CORPORA` corpus and how many each part had before the caps:
    ``(train, test, n_train_available, n_test_available)``.

    ``max_train`` / ``max_test`` keep a seeded random subset (in file order; one generator seeded with ``seed``
    draws the training subset, then the test subset), or with ``first`` the first so many.
    """
    train_file, test_file, fraction, _ = CORPORA[name]
    data = shared_data_dir()
    rows = load_articles(data / train_file)
    if test_file is None:
        train, test = split_articles(rows, fraction, seed)
    else:
        train, test = rows, load_articles(data / test_file)
    available = len(train), len(test)
    rng = np.random.default_rng(seed)
    for part, cap in ((train, max_train), (test, max_test)):
        if cap is not None and len(part) > cap:
            keep = range(cap) if first else np.sort(rng.choice(len(part), cap, replace=False))
            part[:] = [part[i] for i in keep]
    return train, test, *available


def prepare(
    name: str,
    *,
    vocab_size: int = 10_000,
    seed: int = 0,
    max_train: int | None = None,
    max_test: int | None = None,
    first: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """A :data:`CORPORA` corpus as :func:`evaluation.prepare_corpus` makes it from :func:`articles`, tokenised once
    and cached by its settings: the ``.npz`` path (:meth:`PreparedCorpus.load`) and a description."""
    train_file, test_file, fraction, shuffle = CORPORA[name]
    caps = f"tr{max_train or 'all'}-te{max_test or 'all'}" + ("-first" if first else "")
    path = CACHE / f"{name}-v{vocab_size}-s{seed}-{caps}-r{RECIPE}.npz"
    desc_path = path.with_suffix(".json")
    if path.exists() and desc_path.exists():
        return path, json.loads(desc_path.read_text())
    train, test, n_train_all, n_test_all = articles(
        name, seed=seed, max_train=max_train, max_test=max_test, first=first
    )
    corpus = prepare_corpus(train, test, vocab_size=vocab_size, seed=seed, shuffle=shuffle)
    path.parent.mkdir(parents=True, exist_ok=True)
    corpus.save(path)
    desc = {
        "corpus": name,
        "files": [train_file] + ([test_file] if test_file else []),
        "train_docs": corpus.train.n_docs,
        "train_docs_available": n_train_all,
        "train_tokens": int(corpus.train.n_tokens),
        "test_docs": corpus.test.n_docs,
        "test_docs_available": n_test_all,
        "test_repeats_dropped": len(test) - corpus.test.n_docs,
        "heldout_docs": corpus.held_out.n_docs,
        "heldout_tokens": int(corpus.held_out.n_tokens),
        "vocab_size": corpus.n_words,
        "order": "shuffled (seeded)" if shuffle else "file order (publication date)",
        "split": f"random {fraction:.0%} of the file" if test_file is None else "the official test file",
        "tokenize_seconds": corpus.tokenize_seconds,
    }
    desc_path.write_text(json.dumps(desc, indent=1))
    return path, desc


def load(
    name: str, *, seed: int = 0, max_train: int | None = None, **settings: Any
) -> tuple[PreparedCorpus, NDArray[np.float64] | None]:
    """Any benchmark corpus and, for a planted one, its planted word distributions (rows over its vocabulary).

    A :data:`CORPORA` name: :func:`prepare`'s corpus (``settings``: its other settings, with its defaults), no
    planted topics. ``generator``: the demo generator's articles (seed 0, a fixed corpus like a file: ``seed`` and
    ``settings`` do not change it) in stream order, ``max_train`` of them for training (default
    :data:`PLANTED_TRAIN`) and the next 2,000 for test, vocabulary 5,000; its 16 planted topics are the 15 desks
    and the background words. ``lda``: :func:`lda_corpus` drawn with ``seed``.
    """
    if name == "generator":
        return generator_corpus(max_train or PLANTED_TRAIN[name])
    if name == "lda":
        return lda_corpus(max_train or PLANTED_TRAIN[name], seed=seed)
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}")
    path, _ = prepare(name, seed=seed, max_train=max_train, **settings)
    return PreparedCorpus.load(path), None


def generator_corpus(n_train: int) -> tuple[PreparedCorpus, NDArray[np.float64]]:
    """The demo generator's articles and its 16 planted word distributions over the corpus vocabulary."""
    from service.dev.generator import generate_articles, planted_distributions

    arts = list(generate_articles(n_train + 2000, seed=0))
    c = prepare_corpus(arts[:n_train], arts[n_train:], vocab_size=5000, seed=0, shuffle=False)
    return c, planted_distributions(c.vocab, background=True)


def lda_corpus(
    n_train: int, n_test: int = 1000, K: int = 20, W: int = 2000, seed: int = 0
) -> tuple[PreparedCorpus, NDArray[np.float64]]:
    """Documents drawn from LDA with known φ (:func:`tests.synthetic.lda_documents`): φ_k ~ Dirichlet(0.05) over
    W words, θ_d ~ Dirichlet(0.1), lengths 20 + Poisson(80); the test documents split for document completion."""
    from tests.synthetic import lda_documents

    rng = np.random.default_rng(1000 + seed)
    phi = rng.dirichlet(np.full(W, 0.05), size=K)
    train = Batch.from_docs(lda_documents(rng, phi, n_train, 0.1, 20, extra=80))
    test = Batch.from_docs(lda_documents(rng, phi, n_test, 0.1, 20, extra=80))
    observed, held_out, _ = _split_halves(test, seed)
    corpus = PreparedCorpus(
        vocab=[f"w{i}" for i in range(W)],
        train=train,
        test=test,
        observed=observed,
        held_out=held_out,
        test_labels=[None] * n_test,
        tokenize_seconds=0.0,
    )
    return corpus, phi


# ------------------------------------------------------------------------------------ the kernels' tuning recipe
def load_corpus(
    path: str | Path,
    test_path: str | Path | None = None,
    *,
    test_fraction: float | None = None,
    min_df: int = 2,
    shuffle: bool | None = None,
    seed: int = 0,
    max_docs: int | None = None,
) -> tuple[Batch, Batch, list[str], tuple[list[str | None], list[str | None]]]:
    """Load a JSONL.gz corpus (``title`` + ``text``) as (train Batch, test Batch, vocabulary, labels).

    ``path`` is a file or a :data:`CORPORA` name (its files, test fraction and shuffle are then the defaults).
    With ``test_path`` the two files are train and test; otherwise a seeded random ``test_fraction`` (default
    0.2) of ``path`` is the test part. ``shuffle`` (default on) permutes the training documents (seeded): the 20
    Newsgroups files are sorted by group, which would make a one-pass stream a sequence of 20 unrelated corpora.
    ``labels`` is ``(train_labels, test_labels)`` in the returned order. The vocabulary is every training word
    of document frequency ≥ ``min_df``, alphabetical; test words outside it are dropped.
    """
    if isinstance(path, str) and path in CORPORA:
        src = CORPORA[path]
        path, test_path = shared_data_dir() / src.train, test_path or (src.test and shared_data_dir() / src.test)
        test_fraction = src.fraction if test_fraction is None else test_fraction
        shuffle = src.shuffle if shuffle is None else shuffle
    rng = np.random.default_rng(seed)
    rows = load_articles(path, max_docs)
    if test_path is None:
        perm = rng.permutation(len(rows))
        n_test = round((0.2 if test_fraction is None else test_fraction) * len(rows))
        test_rows = [rows[i] for i in perm[:n_test]]
        train_rows = [rows[i] for i in perm[n_test:]]
    else:
        train_rows = rows
        test_rows = load_articles(test_path, max_docs)
    if shuffle is None or shuffle:
        train_rows = [train_rows[i] for i in rng.permutation(len(train_rows))]
    train_toks = [tokenize(article_text(r)) for r in train_rows]
    test_toks = [tokenize(article_text(r)) for r in test_rows]
    df = Counter(w for toks in train_toks for w in set(toks))
    vocab = sorted(w for w, n in df.items() if n >= min_df)
    index = {w: i for i, w in enumerate(vocab)}
    labels = ([r.get("label") for r in train_rows], [r.get("label") for r in test_rows])
    return encode(train_toks, index), encode(test_toks, index), vocab, labels


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
