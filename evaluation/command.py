"""``topicstream eval``: train a kernel in one pass over a corpus and print the scores (the contract's JSON)."""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from kernels import Batch
from kernels.registry import ALGORITHM_NAMES, kernel_class

from .corpus import (
    iter_batches,
    load_articles,
    prepare_corpus,
    split_articles,
)
from .scores import (
    peak_rss_mb,
    score_model,
)

#: Every key of the ``topicstream eval --json`` object, in order, and what it holds (docs/architecture.md's table
#: is made from this, and ``tests/test_eval.py`` checks it against what ``evaluate`` returns). The first twelve are
#: the contract other tools rely on; the rest extend it. How each is measured: :mod:`evaluation`.
OUTPUT_FIELDS: dict[str, str] = {
    "algorithm": "the kernel: `scvb0`, `ohdp` or `pf`",
    "topics": "K, the topic slots (the online HDP's truncation)",
    "train_docs": "training documents (after `--max-docs` and the test part)",
    "train_tokens": "their in-vocabulary tokens",
    "train_seconds": "wall time inside `partial_fit` (and the closing `flush`) only, one pass",
    "tokens_per_second": "`train_tokens` / `train_seconds` (null for no time)",
    "heldout_loglik_per_word": "document completion on the test part, nats per held-out token (null without a "
    "test document of two in-vocabulary tokens)",
    "nmi": "NMI of the dominant topic against the articles' `label` (null without two different labels)",
    "npmi_coherence": "mean NPMI of the used topics' 10 top words, over the test documents (null without any)",
    "topics_used": "topics with at least 1 % of the model's own prevalence (`topic_weights`)",
    "peak_rss_mb": "the process's peak resident memory, MiB",
    "top_words": "the used topics' 10 top words each, most prevalent topic first",
    "topic_ids": "those topics' slots, in the same order",
    "topics_used_heldout": "topics with at least 1 % of the mean θ over the test documents (the benchmarks' count)",
    "npmi_coherence_heldout": "mean NPMI over those topics (the benchmarks' NPMI: docs/benchmarks.md)",
    "background_topic": "the topic the model marks as its background (`background_topic()`), null without one",
    "nmi_without_background": "NMI of the dominant topic as the outputs name it (`topicstream-topic`): the "
    "background topic left out; `nmi` when there is none",
    "test_docs": "test documents",
    "heldout_docs": "test documents scored (at least 2 in-vocabulary tokens)",
    "heldout_tokens": "the held-out tokens scored",
    "vocab_size": "W: the training words with document frequency ≥ 2, at most `--vocab-size`",
    "batch_size": "documents per `partial_fit`",
    "seed": "the seed of the split, the shuffle and the kernel",
    "tokenize_seconds": "time to read and tokenise both parts",
    "params": "the kernel's settings (`get_params()`), defaults included",
}


# ============================================================================================ evaluation
def compile_before_timing(
    kernel_cls: Any, params: dict[str, Any], n_topics: int, n_words: int, seed: int, first: Batch
) -> None:
    """Compile (or load from numba's cache) every path of a kernel before a clock starts: its own ``warm_up``
    (the particle filter's Gibbs runs included, which a first batch alone may not reach), then a throw-away model
    with the measured settings on the first batch. ``topicstream eval`` and the benchmarks both call this."""
    kernel_cls.warm_up(**params)
    warm = kernel_cls(n_topics=n_topics, n_words=n_words, seed=seed, **params)
    warm.partial_fit(first)
    warm.transform(first.slice(0, min(4, first.n_docs)))


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
    ``topicstream eval`` JSON object (the package docstring, :mod:`evaluation`, says how each value is measured).
    """
    if algorithm not in ALGORITHM_NAMES:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHM_NAMES)}")
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    corpus = prepare_corpus(train_articles, test_articles, vocab_size=vocab_size, seed=seed, shuffle=shuffle)
    params = dict(params or {})
    kernel_cls: Any = kernel_class(algorithm)
    if kernel_cls.corpus_size_param is not None:  # the corpus size D, as the benchmarks tell it
        params.setdefault(kernel_cls.corpus_size_param, corpus.train.n_docs)
    batches = iter_batches(corpus.train, batch_size)
    first = next(batches, None)
    if first is not None:  # compile (or load from numba's cache) before the clock starts, as the benchmarks do
        compile_before_timing(kernel_cls, params, topics, corpus.n_words, seed, first)
        batches = itertools.chain([first], batches)
    model = kernel_cls(n_topics=topics, n_words=corpus.n_words, seed=seed, **params)
    train_seconds = 0.0
    done = 0
    for batch in batches:
        t0 = time.perf_counter()
        model.partial_fit(batch)
        train_seconds += time.perf_counter() - t0
        done += batch.n_docs
        if on_batch is not None:
            on_batch(done, corpus.train.n_docs)
    t0 = time.perf_counter()
    model.flush()  # a corpus shorter than what a kernel holds back (the particle filter's initial sample)
    train_seconds += time.perf_counter() - t0
    background = model.background_topic()
    scores = score_model(
        model.topic_word(), model.transform, corpus, topic_weights=model.topic_weights(), background=background
    )
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
        "npmi_coherence_heldout": scores["npmi_coherence_heldout"],
        "background_topic": background,
        "nmi_without_background": scores["nmi_without_background"],
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
def _json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float as None (JSON null): a score that has no value (no test document
    with two in-vocabulary tokens, no topic used) must not make the one JSON object unreadable to a strict parser."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _load(path: Path, max_docs: int | None, seed: int, hint: str) -> list[dict[str, Any]]:
    """The articles of ``path`` (at most ``max_docs``, a seeded sample), or a usage error naming the file and line
    that could not be read."""
    try:
        return load_articles(path, max_docs, seed)
    except (ValueError, OSError, EOFError) as e:  # a bad line, not gzip, truncated, a directory
        raise typer.BadParameter(str(e), param_hint=hint) from None


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
        "nmi_without_background",
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
        topics.add_row(f"{k} (background)" if k == result["background_topic"] else str(k), " ".join(words))
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
    test_fraction: Annotated[
        float, typer.Option(help="Share of --train held out when --test is absent (ignored with --test)")
    ] = 0.2,
    topics: Annotated[int, typer.Option(help="Number of topics K (the truncation for ohdp)", min=1)] = 100,
    batch_size: Annotated[int, typer.Option(help="Documents per partial_fit call", min=1)] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the kernel, the shuffle and the splits", min=0)] = 0,
    vocab_size: Annotated[int, typer.Option(help="Words kept (most frequent with doc. freq. >= 2)", min=1)] = 10_000,
    max_docs: Annotated[int | None, typer.Option(help="A seeded sample of N articles per file", min=1)] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            help="Kernel hyperparameter key=value (JSON value), repeatable; the online HDP's window (its corpus "
            "size D) is the training documents unless given, as in the benchmarks"
        ),
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
    articles = _load(train, max_docs, seed, "--train")
    if not articles:
        raise typer.BadParameter(f"{train} holds no article (no line but blank ones)", param_hint="--train")
    if test is None:
        try:
            train_articles, test_articles = split_articles(articles, test_fraction, seed)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--test-fraction") from e
    else:
        train_articles, test_articles = articles, _load(test, max_docs, seed, "--test")
        if not test_articles:
            raise typer.BadParameter(f"{test} holds no article (no line but blank ones)", param_hint="--test")

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
        sys.stdout.write(json.dumps(_json_safe(result), allow_nan=False) + "\n")
        sys.stdout.flush()
    else:
        _print_report(result)
