"""Scores: held-out log-likelihood per word, NPMI coherence, NMI, a shared fold-in, memory.

See the package docstring for the exact definitions."""

from __future__ import annotations

import math
import resource
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kernels import Batch

from .corpus import (
    PreparedCorpus,
)

N_TOP_WORDS = 10
USED_THRESHOLD = 0.01


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
    """NPMI coherence of each list of word ids over the documents of ``reference`` (defined in the package
    docstring, :mod:`evaluation`)."""
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
    """Mean NPMI coherence of the topics (see :func:`npmi_per_topic`); NaN when no reference document holds a
    word (every pair would count −1 for want of documents, not of coherence)."""
    if not reference.n_tokens > 0:
        return float("nan")
    vals = [v for v in npmi_per_topic(top_ids, reference, n_words) if not math.isnan(v)]
    return float(np.mean(vals)) if vals else float("nan")


def nmi(labels: Sequence[str | None], theta: NDArray[np.floating], leave_out: int | None = None) -> float | None:
    """NMI between labels and ``argmax θ`` over the labelled documents; ``None`` without two labelled documents of
    different labels (with one label, NMI is 1 or 0 whatever the model does). ``leave_out``: a topic that is never
    the dominant one (the background topic, which the outputs never name: the argmax over the others)."""
    from sklearn.metrics import normalized_mutual_info_score

    rows = [i for i, lab in enumerate(labels) if lab is not None]
    if len({labels[i] for i in rows}) < 2:
        return None
    scores = np.array(np.asarray(theta)[rows], dtype=np.float64)
    if leave_out is not None and scores.shape[1] > 1:
        scores[:, leave_out] = -np.inf
    pred = np.argmax(scores, axis=1)
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
    background: int | None = None,
    n_top: int = N_TOP_WORDS,
    threshold: float = USED_THRESHOLD,
) -> dict[str, Any]:
    """Every quality score of a trained model, given its φ (K×W) and its θ inference (rows sum to 1).

    ``topic_weights`` (the model's own prevalence) decides the used topics; without it, the mean θ over the
    test documents does. ``background``: the topic the model marks as its background, which
    ``nmi_without_background`` never takes as a document's dominant topic (nor do the outputs).
    """
    phi = np.asarray(phi, dtype=np.float64)
    theta_obs = np.asarray(infer(corpus.observed), dtype=np.float64)
    ll = heldout_loglik_per_word(theta_obs, phi, corpus.held_out)
    theta_full = np.asarray(infer(corpus.test), dtype=np.float64)
    heldout_weights = theta_full.mean(axis=0) if theta_full.shape[0] else np.full(phi.shape[0], 1 / phi.shape[0])
    weights = heldout_weights if topic_weights is None else np.asarray(topic_weights, dtype=np.float64)
    used = np.flatnonzero(weights >= threshold)
    used = used[np.argsort(-weights[used], kind="stable")]
    top_ids = top_word_ids(phi, n_top)
    tops = top_ids[used]
    used_heldout = np.flatnonzero(heldout_weights >= threshold)
    nmi_all = nmi(corpus.test_labels, theta_full)
    return {
        "heldout_loglik_per_word": ll,
        "heldout_docs": corpus.held_out.n_docs,
        "heldout_tokens": corpus.held_out.n_tokens,
        "nmi": nmi_all,
        "nmi_without_background": nmi_all if background is None else nmi(corpus.test_labels, theta_full, background),
        "npmi_coherence": npmi_coherence(tops.tolist(), corpus.test, corpus.n_words),
        "topics_used": len(used),
        "topics_used_heldout": len(used_heldout),
        "npmi_coherence_heldout": npmi_coherence(top_ids[used_heldout].tolist(), corpus.test, corpus.n_words),
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
