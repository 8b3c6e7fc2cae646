"""``topicstream eval``: train a kernel on a corpus in one pass and score it on held-out documents.

Everything here is measured the same way for our kernels and for the peer libraries in ``benchmarks/``, which
import the data preparation and the scorers from this module.

Data
    ``load_articles`` reads JSON Lines, gzip-compressed or not (``id``, ``title``, ``text``, ``label``...).
    The text of an article is its title, a blank line, and its body, tokenised by the service's
    :class:`~service.text.Tokenizer` (so every method sees the same tokens). Training documents are
    shuffled (seeded) unless ``shuffle=False``: the 20 Newsgroups and BBC files are sorted by label, which
    would turn one pass into a sequence of unrelated corpora.

Vocabulary (fixed, so that every method sees the same word ids)
    The words of the *training* documents with document frequency ≥ 2, the ``vocab_size`` most frequent by
    token count (ties by the word itself), numbered in that order. Test words outside it are dropped.

Held-out log-likelihood per word (document completion, as in the architecture notes)
    Each test document's in-vocabulary tokens are shuffled (NumPy PCG64 seeded with ``seed``, documents in
    file order) and split: the first ⌊n/2⌋ tokens are *observed*, the other ⌈n/2⌉ are *held out*. Documents
    with fewer than 2 tokens are skipped. θ_d is inferred from the observed half with the topics fixed
    (``model.transform``); the score is the mean over held-out tokens of ``log Σ_k θ_dk φ_kw`` (nats/word).

NMI
    scikit-learn's ``normalized_mutual_info_score`` (arithmetic mean normalisation) between the label and
    the dominant topic ``argmax θ`` inferred from the *whole* test document. Documents without a label are
    skipped; for multi-label corpora (Reuters: ``"grain;wheat"``) the first label is used. ``None`` when no
    test document has a label.

NPMI coherence
    For each topic, its 10 most probable words; for every pair, NPMI = log(p_ij / (p_i p_j)) / −log p_ij with
    p = document frequencies over the *test* documents (a word "occurs" in a document when its count is > 0).
    No additive smoothing: a pair that never co-occurs gets the limit value −1, a pair that occurs in every
    document gets 1. A topic's coherence is the mean over its 45 pairs, the model's the mean over its used
    topics, so the value always lies in [−1, 1].

Topics used
    ``topics_used``: topics whose prevalence in the model (``model.topic_weights()``) is ≥ 1 %;
    ``top_words`` lists their 10 top words, most prevalent first. ``topics_used_heldout`` counts topics whose
    mean θ over the test documents is ≥ 1 % — the definition the benchmarks use for every library.

Speed and memory
    ``train_seconds`` is the wall time spent inside ``partial_fit`` only (tokenising is
    ``tokenize_seconds``); ``tokens_per_second`` = training tokens / ``train_seconds``; ``peak_rss_mb`` is the
    process's peak resident set size (``VmHWM`` on Linux, else ``getrusage``), data loading included.
"""

from __future__ import annotations

import gzip
import json
import math
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from numpy.typing import NDArray

from kernels import Batch
from kernels.registry import ALGORITHM_NAMES, kernel_class
from service.text import Tokenizer

__all__ = [
    "PreparedCorpus",
    "article_text",
    "build_vocabulary",
    "document_completion",
    "encode",
    "eval_command",
    "evaluate",
    "fold_in",
    "heldout_loglik_per_word",
    "iter_batches",
    "load_articles",
    "nmi",
    "npmi_coherence",
    "npmi_per_topic",
    "peak_rss_mb",
    "prepare_corpus",
    "primary_label",
    "score_model",
    "split_articles",
    "top_word_ids",
]

N_TOP_WORDS = 10
USED_THRESHOLD = 0.01


# ============================================================================================ data loading
def load_articles(path: str | Path, max_docs: int | None = None) -> list[dict[str, Any]]:
    """Articles from a JSON Lines file (``.gz`` is decompressed); blank lines are skipped.

    Raises ``ValueError`` naming the line of anything that is not a JSON object.
    """
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    rows: list[dict[str, Any]] = []
    with opener(p, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError(f"{p}:{lineno}: not a JSON object")
            rows.append(obj)
            if max_docs is not None and len(rows) >= max_docs:
                break
    return rows


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
) -> PreparedCorpus:
    """Tokenise, build the fixed vocabulary, encode, and split the test documents for document completion.

    Training documents with no in-vocabulary token are dropped (a kernel has nothing to learn from them).
    """
    tok = tokenizer or Tokenizer()
    rng = np.random.default_rng(seed)
    train_articles = list(train_articles)
    if shuffle:
        train_articles = [train_articles[i] for i in rng.permutation(len(train_articles))]
    t0 = time.perf_counter()
    train_toks = [tok(article_text(a)) for a in train_articles]
    test_toks = [tok(article_text(a)) for a in test_articles]
    tokenize_seconds = time.perf_counter() - t0
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


# ============================================================================================ scorers
def heldout_loglik_per_word(
    theta: NDArray[np.floating], phi: NDArray[np.floating], held_out: Batch, chunk: int = 256
) -> float:
    """Mean over the held-out tokens of ``log Σ_k θ_dk φ_kw`` (nats per word); row d of θ is document d.

    A probability of exactly 0 (a library whose φ has zeros) is floored at 1e-300 instead of giving −inf.
    """
    theta = np.asarray(theta, dtype=np.float64)
    phi = np.asarray(phi, dtype=np.float64)
    if theta.shape[0] != held_out.n_docs:
        raise ValueError(f"theta has {theta.shape[0]} rows for {held_out.n_docs} held-out documents")
    total = 0.0
    n = 0.0
    for d0 in range(0, held_out.n_docs, chunk):
        part = held_out.slice(d0, min(held_out.n_docs, d0 + chunk))
        doc_of = np.repeat(np.arange(part.n_docs), np.diff(part.indptr))
        p = np.einsum("ik,ki->i", theta[d0 + doc_of], phi[:, part.word_ids])
        total += float(np.dot(part.counts, np.log(np.maximum(p, 1e-300))))
        n += float(part.counts.sum())
    return total / n if n else float("nan")


def _doc_word_presence(reference: Batch, n_words: int) -> Any:
    from scipy.sparse import csc_matrix

    data = np.ones(reference.word_ids.shape[0], dtype=np.float64)
    return csc_matrix(
        (data, reference.word_ids, reference.indptr), shape=(n_words, reference.n_docs)
    ).T.tocsc()  # documents × words, 1 where the word occurs


def npmi_per_topic(top_ids: Sequence[Sequence[int]], reference: Batch, n_words: int) -> list[float]:
    """NPMI coherence of each list of word ids over the documents of ``reference`` (see module docstring)."""
    n_docs = reference.n_docs
    if n_docs == 0:
        return [float("nan")] * len(top_ids)
    X = _doc_word_presence(reference, n_words)
    out: list[float] = []
    for ids in top_ids:
        ids = list(ids)
        if len(ids) < 2:
            out.append(float("nan"))
            continue
        sub = X[:, ids]
        co = np.asarray((sub.T @ sub).todense(), dtype=np.float64) / n_docs
        p = np.diag(co).copy()
        vals = []
        for i in range(len(ids)):
            for j in range(i + 1, len(ids)):
                vals.append(_npmi(p[i], p[j], co[i, j]))
        out.append(float(np.mean(vals)))
    return out


def _npmi(p_i: float, p_j: float, p_ij: float) -> float:
    if p_ij <= 0.0:
        return -1.0
    if p_ij >= 1.0:
        return 1.0
    value = math.log(p_ij / (p_i * p_j)) / -math.log(p_ij)
    return min(1.0, max(-1.0, value))


def npmi_coherence(top_ids: Sequence[Sequence[int]], reference: Batch, n_words: int) -> float:
    """Mean NPMI coherence of the topics (see :func:`npmi_per_topic`)."""
    vals = [v for v in npmi_per_topic(top_ids, reference, n_words) if not math.isnan(v)]
    return float(np.mean(vals)) if vals else float("nan")


def nmi(labels: Sequence[str | None], theta: NDArray[np.floating]) -> float | None:
    """NMI between labels and ``argmax θ`` over the labelled documents; ``None`` without labels."""
    from sklearn.metrics import normalized_mutual_info_score

    rows = [i for i, lab in enumerate(labels) if lab is not None]
    if not rows:
        return None
    pred = np.argmax(np.asarray(theta)[rows], axis=1)
    return float(normalized_mutual_info_score([labels[i] for i in rows], pred))


def top_word_ids(phi: NDArray[np.floating], n: int = N_TOP_WORDS) -> NDArray[np.int64]:
    """The ``n`` most probable word ids of each topic, most probable first, shape ``(K, n)``."""
    phi = np.asarray(phi)
    n = min(n, phi.shape[1])
    part = np.argpartition(-phi, n - 1, axis=1)[:, :n]
    order = np.argsort(-np.take_along_axis(phi, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


def fold_in(phi: NDArray[np.floating], docs: Batch, alpha: float = 0.1, iterations: int = 50) -> NDArray[np.float64]:
    """Shared fixed-φ θ inference for libraries without their own (and as a cross-check for those with).

    EM for the MAP mixture under a Dirichlet(α + 1) prior: responsibilities r_wk ∝ θ_k φ_kw, then
    θ_k ∝ α + Σ_w n_w r_wk; ``iterations`` rounds from a uniform start. An empty document gets the uniform θ.
    """
    phi = np.asarray(phi, dtype=np.float64)
    K = phi.shape[0]
    theta = np.full((docs.n_docs, K), 1.0 / K)
    for d0 in range(0, docs.n_docs, 256):
        part = docs.slice(d0, min(docs.n_docs, d0 + 256))
        lengths = np.diff(part.indptr)
        doc_of = np.repeat(np.arange(part.n_docs), lengths)
        if doc_of.size == 0:
            continue
        pw = phi[:, part.word_ids].T  # nnz × K
        th = np.full((part.n_docs, K), 1.0 / K)
        for _ in range(iterations):
            r = th[doc_of] * pw
            r *= (part.counts / np.maximum(r.sum(axis=1), 1e-300))[:, None]
            nk = np.zeros((part.n_docs, K))
            _segment_sum(r, part.indptr, nk)
            th = nk + alpha
            th /= th.sum(axis=1, keepdims=True)
        empty = lengths == 0
        th[empty] = 1.0 / K
        theta[d0 : d0 + part.n_docs] = th
    return theta


def _segment_sum(r: NDArray[np.float64], indptr: NDArray[np.int64], out: NDArray[np.float64]) -> None:
    nonempty = np.flatnonzero(np.diff(indptr) > 0)
    out[nonempty] = np.add.reduceat(r, indptr[nonempty], axis=0)


def score_model(
    phi: NDArray[np.floating],
    infer: Callable[[Batch], NDArray[np.floating]],
    corpus: PreparedCorpus,
    *,
    topic_weights: NDArray[np.floating] | None = None,
    n_top: int = N_TOP_WORDS,
    threshold: float = USED_THRESHOLD,
) -> dict[str, Any]:
    """Every quality score of a trained model, given its φ (K×W) and its θ inference (rows sum to 1).

    ``topic_weights`` (the model's own prevalence) decides the used topics; without it, the mean θ over the
    test documents does.
    """
    phi = np.asarray(phi, dtype=np.float64)
    theta_obs = np.asarray(infer(corpus.observed), dtype=np.float64)
    ll = heldout_loglik_per_word(theta_obs, phi, corpus.held_out)
    theta_full = np.asarray(infer(corpus.test), dtype=np.float64)
    heldout_weights = theta_full.mean(axis=0) if theta_full.shape[0] else np.full(phi.shape[0], 1 / phi.shape[0])
    weights = heldout_weights if topic_weights is None else np.asarray(topic_weights, dtype=np.float64)
    used = np.flatnonzero(weights >= threshold)
    used = used[np.argsort(-weights[used], kind="stable")]
    tops = top_word_ids(phi, n_top)[used]
    return {
        "heldout_loglik_per_word": ll,
        "heldout_docs": corpus.held_out.n_docs,
        "heldout_tokens": corpus.held_out.n_tokens,
        "nmi": nmi(corpus.test_labels, theta_full),
        "npmi_coherence": npmi_coherence(tops.tolist(), corpus.test, corpus.n_words),
        "topics_used": len(used),
        "topics_used_heldout": int(np.count_nonzero(heldout_weights >= threshold)),
        "topic_ids": used.tolist(),
        "top_words": [[corpus.vocab[i] for i in row] for row in tops.tolist()],
    }


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MiB.

    Linux: ``VmHWM`` of ``/proc/self/status`` (the high-water mark of this program image; ``getrusage``'s
    ``ru_maxrss`` would also count the parent's memory when this process was started by fork + exec).
    Elsewhere: ``getrusage``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


# ============================================================================================ evaluation
def evaluate(
    train_articles: Sequence[dict[str, Any]],
    test_articles: Sequence[dict[str, Any]],
    *,
    algorithm: str = "scvb0",
    topics: int = 100,
    batch_size: int = 100,
    seed: int = 0,
    vocab_size: int = 10_000,
    params: dict[str, Any] | None = None,
    shuffle: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Train ``algorithm`` on ``train_articles`` in a single pass and score it on ``test_articles``.

    ``on_batch(docs_done, docs_total)`` is called after every training batch (a progress bar). Returns the
    ``topicstream eval`` JSON object (see the module docstring for how each value is measured).
    """
    if algorithm not in ALGORITHM_NAMES:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHM_NAMES)}")
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    if not test_articles:
        raise ValueError("no test documents")
    corpus = prepare_corpus(train_articles, test_articles, vocab_size=vocab_size, seed=seed, shuffle=shuffle)
    params = dict(params or {})
    kernel_cls: Any = kernel_class(algorithm)
    model = kernel_cls(n_topics=topics, n_words=corpus.n_words, seed=seed, **params)
    train_seconds = 0.0
    done = 0
    for batch in iter_batches(corpus.train, batch_size):
        t0 = time.perf_counter()
        model.partial_fit(batch)
        train_seconds += time.perf_counter() - t0
        done += batch.n_docs
        if on_batch is not None:
            on_batch(done, corpus.train.n_docs)
    scores = score_model(model.topic_word(), model.transform, corpus, topic_weights=model.topic_weights())
    train_tokens = corpus.train.n_tokens
    return {
        "algorithm": algorithm,
        "topics": topics,
        "train_docs": corpus.train.n_docs,
        "train_tokens": int(train_tokens),
        "train_seconds": train_seconds,
        "tokens_per_second": train_tokens / train_seconds if train_seconds > 0 else None,
        "heldout_loglik_per_word": scores["heldout_loglik_per_word"],
        "nmi": scores["nmi"],
        "npmi_coherence": scores["npmi_coherence"],
        "topics_used": scores["topics_used"],
        "peak_rss_mb": peak_rss_mb(),
        "top_words": scores["top_words"],
        # extensions
        "topic_ids": scores["topic_ids"],
        "topics_used_heldout": scores["topics_used_heldout"],
        "test_docs": corpus.test.n_docs,
        "heldout_docs": scores["heldout_docs"],
        "heldout_tokens": int(scores["heldout_tokens"]),
        "vocab_size": corpus.n_words,
        "batch_size": batch_size,
        "seed": seed,
        "tokenize_seconds": corpus.tokenize_seconds,
        "params": model.get_params(),
    }


# ============================================================================================ command line
def _parse_params(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--param")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key.strip()] = value
    return out


def _print_report(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"topicstream eval — {result['algorithm']}, K={result['topics']}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")

    def fmt(v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, float):
            return f"{v:,.4f}" if abs(v) < 1000 else f"{v:,.0f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    for key in (
        "train_docs",
        "train_tokens",
        "train_seconds",
        "tokens_per_second",
        "tokenize_seconds",
        "test_docs",
        "heldout_tokens",
        "heldout_loglik_per_word",
        "nmi",
        "npmi_coherence",
        "topics_used",
        "vocab_size",
        "peak_rss_mb",
    ):
        table.add_row(key, fmt(result.get(key)))
    console.print(table)
    topics = Table(title="Topics (most prevalent first)")
    topics.add_column("topic", justify="right")
    topics.add_column("top words")
    for k, words in zip(result["topic_ids"], result["top_words"], strict=True):
        topics.add_row(str(k), " ".join(words))
    console.print(topics)


def eval_command(
    algorithm: Annotated[str, typer.Option(help="Kernel to evaluate: scvb0 | ohdp | pf")] = "scvb0",
    train: Annotated[
        Path | None, typer.Option(help="Training articles, JSONL or JSONL.gz", exists=True, dir_okay=False)
    ] = None,
    test: Annotated[
        Path | None,
        typer.Option(help="Test articles; without it a --test-fraction of --train is held out", dir_okay=False),
    ] = None,
    test_fraction: Annotated[float, typer.Option(help="Share of --train held out when --test is absent")] = 0.2,
    topics: Annotated[int, typer.Option(help="Number of topics K (the truncation for ohdp)", min=1)] = 100,
    batch_size: Annotated[int, typer.Option(help="Documents per partial_fit call", min=1)] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the kernel, the shuffle and the splits", min=0)] = 0,
    vocab_size: Annotated[int, typer.Option(help="Words kept (most frequent with doc. freq. >= 2)", min=1)] = 10_000,
    max_docs: Annotated[int | None, typer.Option(help="Read at most this many articles from each file", min=1)] = None,
    param: Annotated[
        list[str] | None, typer.Option(help="Kernel hyperparameter key=value (JSON value), repeatable")
    ] = None,
    shuffle: Annotated[bool, typer.Option(help="Shuffle the training articles (seeded) before the pass")] = True,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout")] = False,
) -> None:
    """Train a kernel in one pass over --train and score it on held-out articles (see docs/benchmarks.md)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if train is None:
        raise typer.BadParameter("--train is required", param_hint="--train")
    if test is not None and not test.exists():
        raise typer.BadParameter(f"{test} does not exist", param_hint="--test")
    if algorithm not in ALGORITHM_NAMES:
        raise typer.BadParameter(f"choose one of {sorted(ALGORITHM_NAMES)}", param_hint="--algorithm")
    params = _parse_params(param or [])
    from service.compat import param_problems

    base = {"n_topics": "--topics", "n_words": "--vocab-size", "seed": "--seed"}
    problems = param_problems(algorithm, topics, vocab_size, params, seed=seed, source="--param", base=base)
    if problems:  # one line per problem, before any article is read
        typer.echo("invalid settings:\n  " + "\n  ".join(problems), err=True)
        raise typer.Exit(2)
    articles = load_articles(train, max_docs)
    if test is None:
        try:
            train_articles, test_articles = split_articles(articles, test_fraction, seed)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--test-fraction") from e
    else:
        train_articles, test_articles = articles, load_articles(test, max_docs)

    err = Console(stderr=True)
    with Progress(
        TextColumn("training {task.fields[algorithm]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("train", total=len(train_articles), algorithm=algorithm)

        def on_batch(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            result = evaluate(
                train_articles,
                test_articles,
                algorithm=algorithm,
                topics=topics,
                batch_size=batch_size,
                seed=seed,
                vocab_size=vocab_size,
                params=params,
                shuffle=shuffle,
                on_batch=on_batch,
            )
        except (TypeError, ValueError) as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2) from e
    if json_output:
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    else:
        _print_report(result)
