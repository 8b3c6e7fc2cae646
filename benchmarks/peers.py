"""One benchmark run of one method, in its own process: ``python -m benchmarks.peers SPEC.json OUT.json``.

Every method — our kernels and the peer libraries — is wrapped in the same small interface so that the timing
loop, the checkpoints and the scoring are shared:

* ``prepare(batches)``: convert the training minibatches to the library's own input format (not timed: our
  kernels get ready-made :class:`~kernels.Batch` objects too);
* ``update(i)``: one online update with minibatch ``i`` (timed), or ``iterate(n)`` for the batch reference;
* ``phi()``: the topics as a K×W matrix over the shared vocabulary, rows summing to 1;
* ``infer(docs)``: θ for documents with the topics fixed. Each library's *own* inference where it has one
  (our ``transform``, gensim ``inference``, scikit-learn ``transform``, tomotopy ``infer``); Vowpal Wabbit
  predicts nothing with minibatches > 1 and its prediction updates the model, so it uses the shared fixed-φ
  folding-in :func:`evaluation.fold_in`. The shared fold-in is also reported for every method
  (``heldout_loglik_foldin``), so the φ's can be compared with one θ estimator.

The runner pins every thread pool to one thread (set in the environment by ``run_all``) and measures the time
of the updates only, as CPU seconds of the process (``time.process_time``): on an idle core that is the wall
time, and on a machine shared with other jobs (ours was) it does not count the time the process waited for a
core; the wall time is recorded too (``train_wall_seconds``). Checkpoints (held-out log-likelihood on a
subset of the test documents, for the curves) are taken with the clock stopped.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evaluation import (
    PreparedCorpus,
    fold_in,
    heldout_loglik_per_word,
    iter_batches,
    peak_rss_mb,
    score_model,
)
from kernels import Batch
from kernels.registry import kernel_class

from .methods import (
    ALPHA,
    FLOOR,
    REFERENCE,
    GensimHdp,
    GensimLda,
    KernelMethod,
    Method,
    SklearnLda,
    TomotopyGibbs,
    Unigram,
    VowpalWabbitLda,
)


# ============================================================================================ the runner
def safe_infer(method: Method) -> Callable[[Batch], NDArray[np.float64]]:
    """θ for every row; empty documents get the uniform mixture without asking the library."""

    def infer(docs: Batch) -> NDArray[np.float64]:
        lengths = np.diff(docs.indptr)
        theta = np.full((docs.n_docs, method.K), 1.0 / method.K)
        keep = np.flatnonzero(lengths > 0)
        if keep.size == docs.n_docs:
            return method.infer(docs)
        if keep.size:
            sub = Batch.from_docs([docs.doc(int(d)) for d in keep])
            theta[keep] = method.infer(sub)
        return theta

    return infer


def make_method(spec: dict[str, Any], corpus: PreparedCorpus, batches: list[Batch]) -> Method:
    name, K, W, seed = spec["method"], int(spec["topics"]), corpus.n_words, int(spec["seed"])
    n_train, B = corpus.train.n_docs, int(spec["batch_size"])
    if name == "gensim-lda":
        return GensimLda(K, W, seed, n_train, B)
    if name == "gensim-hdp":
        return GensimHdp(K, W, seed, n_train, B)
    if name == "sklearn-lda":
        return SklearnLda(K, W, seed, n_train, B)
    if name == "vw-lda":
        return VowpalWabbitLda(K, W, seed, n_train, B)
    if name == REFERENCE:
        return TomotopyGibbs(K, W, seed, corpus.vocab)
    if name == FLOOR:
        return Unigram(W)
    params = dict(spec.get("params") or {})
    size_param = kernel_class(name).corpus_size_param
    if size_param is not None:  # D = the corpus size, as the seed sets it and as gensim's HdpModel gets it (m_D)
        params.setdefault(size_param, n_train)
    return KernelMethod(name, K, W, seed, params, batches[0])


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and score one method as ``spec`` says; returns the result record (see ``run_all``)."""
    corpus = PreparedCorpus.load(spec["corpus_path"])
    rss_data = peak_rss_mb()
    batches = list(iter_batches(corpus.train, int(spec["batch_size"])))
    method = make_method(spec, corpus, batches)
    t0 = time.perf_counter()
    method.prepare(batches)
    prepare_seconds = time.perf_counter() - t0
    infer = safe_infer(method)

    n_curve = min(int(spec.get("curve_docs", 500)), corpus.observed.n_docs)
    curve_obs, curve_held = corpus.observed.slice(0, n_curve), corpus.held_out.slice(0, n_curve)
    curve: list[dict[str, float]] = []
    train_seconds = 0.0  # CPU seconds of this process inside the updates (see the module docstring)
    wall_seconds = 0.0
    docs_seen = 0
    tokens_seen = 0.0
    updates = 0

    def checkpoint() -> None:
        ll = heldout_loglik_per_word(infer(curve_obs), method.phi(), curve_held)
        curve.append({"seconds": train_seconds, "docs": docs_seen, "updates": updates, "loglik": ll})

    mode = spec["mode"]
    n_points = int(spec.get("checkpoints", 12))
    if not method.online:
        iterations = int(spec["iterations"])
        step = max(1, iterations // n_points)
        done = 0
        while done < iterations:
            n = min(step, iterations - done)
            t, w = time.process_time(), time.perf_counter()
            method.iterate(n)
            train_seconds += time.process_time() - t
            wall_seconds += time.perf_counter() - w
            done += n
            updates = done
            docs_seen = done * corpus.train.n_docs
            tokens_seen = done * corpus.train.n_tokens
            checkpoint()
    else:
        budget = float(spec.get("seconds") or 0.0)
        n_batches = len(batches)
        total_updates = n_batches if mode == "single" else None
        # checkpoints: geometric in updates (single pass) or in time (equal time), so early progress shows
        if mode == "single":
            marks = set(np.unique(np.geomspace(1, n_batches, n_points).round().astype(int)).tolist())
        next_time = budget / 2 ** (n_points - 1) if mode != "single" else 0.0
        i = 0
        while True:
            b = batches[i % n_batches]
            t, w = time.process_time(), time.perf_counter()
            method.update(i % n_batches)
            if total_updates is not None and i + 1 == total_updates:
                method.finish()  # as topicstream eval ends its pass
            train_seconds += time.process_time() - t
            wall_seconds += time.perf_counter() - w
            i += 1
            updates = i
            docs_seen += b.n_docs
            tokens_seen += b.n_tokens
            if mode == "single":
                if i in marks:
                    checkpoint()
                if total_updates is not None and i >= total_updates:
                    break
            else:
                if train_seconds >= next_time or train_seconds >= budget:
                    checkpoint()
                    next_time = min(budget, next_time * 2)
                if train_seconds >= budget:
                    break

    t = time.perf_counter()
    phi = method.phi()
    scores = score_model(phi, infer, corpus, topic_weights=None)
    ll_fold = heldout_loglik_per_word(fold_in(phi, corpus.observed, ALPHA), phi, corpus.held_out)
    score_seconds = time.perf_counter() - t
    return {
        "corpus": spec["corpus"],
        "method": spec["method"],
        "mode": mode,
        "topics": spec["topics"],
        "model_topics": method.K,
        "batch_size": spec["batch_size"],
        "seed": spec["seed"],
        "train_docs": corpus.train.n_docs,
        "docs_seen": docs_seen,
        "tokens_seen": tokens_seen,
        "passes": docs_seen / corpus.train.n_docs,
        "updates": updates,
        "train_seconds": train_seconds,
        "train_wall_seconds": wall_seconds,
        "tokens_per_second": tokens_seen / train_seconds if train_seconds > 0 else None,
        "prepare_seconds": prepare_seconds,
        "score_seconds": score_seconds,
        "heldout_loglik_per_word": scores["heldout_loglik_per_word"],
        "heldout_loglik_foldin": ll_fold,
        "nmi": scores["nmi"],
        "npmi_coherence": scores["npmi_coherence"],
        "topics_used": scores["topics_used"],
        "top_words": scores["top_words"][:20],
        "peak_rss_mb": peak_rss_mb(),
        "rss_after_data_mb": rss_data,
        "curve": curve,
        "theta_inference": "shared fold-in" if isinstance(method, VowpalWabbitLda) else "own",
        **method.info(),
    }


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    result = run(spec)
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
