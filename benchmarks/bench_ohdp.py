"""Online HDP (ours) against gensim's ``HdpModel`` on the same documents, in the same run, one pass each.

    .venv/bin/python -m benchmarks.bench_ohdp                       # 20NG (all) and BBC, default settings
    .venv/bin/python -m benchmarks.bench_ohdp --corpus bbc --configs collapsed,stick --no-gensim

Prints a table per corpus: held-out log-likelihood per word (document completion: each test
document's tokens split 50/50 at random with a seed, θ inferred from the first half with the topics fixed,
the second half scored as mean log Σ_k θ_k φ_kw over all second-half tokens), topics used (E[β] ≥ 1%),
training tokens/s (the kernel's ``partial_fit`` calls, tokenising excluded) and the unigram floor. 20NG uses
its train/test files; BBC a seeded 80/20 split. gensim is a bench-only dependency (``pip install gensim``),
never a runtime one.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks._corpus import document_completion, heldout_loglik, load_corpus
from kernels import Batch
from kernels._hdp_base import OnlineHDPBase
from kernels.ohdp import OnlineHDP
from kernels.ohdp_stick import StickBreakingHDP


@dataclass
class Corpus:
    name: str
    vocab: list[str]
    train: Batch
    test_obs: Batch  # first halves
    test_held: Batch  # second halves


def load(name: str, seed: int = 0) -> Corpus:
    """``benchmarks._corpus.load_corpus`` (train documents shuffled with the seed) + document completion."""
    train, test, vocab, _ = load_corpus(name, seed=seed)
    obs, held = document_completion(test, seed)
    return Corpus(name, vocab, train, obs, held)


def heldout(theta: NDArray[np.float64], phi: NDArray[np.float64], held: Batch) -> float:
    """Mean over held-out tokens of log Σ_k θ_dk φ_kw."""
    return heldout_loglik(theta, phi, held)


def unigram(c: Corpus) -> float:
    freq = np.bincount(c.train.word_ids, weights=c.train.counts, minlength=len(c.vocab)) + 0.01
    phi = (freq / freq.sum())[None, :]
    return heldout(np.ones((c.test_held.n_docs, 1)), phi, c.test_held)


def run_ours(
    c: Corpus, cls: type[OnlineHDPBase], params: dict[str, Any], chunk: int = 1024, seed: int = 0
) -> dict[str, Any]:
    W = len(c.vocab)
    K = int(params.pop("n_topics", 150))
    params.setdefault("window", c.train.n_docs)  # D: the seed's corpus size
    m = cls(K, W, seed=seed, **params)
    t0 = time.perf_counter()
    for d0 in range(0, c.train.n_docs, chunk):
        m.partial_fit(c.train.slice(d0, min(c.train.n_docs, d0 + chunk)))
    secs = time.perf_counter() - t0
    theta = m.transform(c.test_obs)
    return {
        "loglik": heldout(theta, m.topic_word(), c.test_held),
        "topics_used": m.topics_used(),
        "tok_s": c.train.n_tokens / secs,
        "secs": secs,
        "model": m,
    }


def run_gensim(c: Corpus, seed: int = 0) -> dict[str, Any]:
    from gensim.corpora import Dictionary
    from gensim.models import HdpModel

    vocab = Dictionary([c.vocab])  # ids follow our vocabulary order
    assert all(vocab.token2id[w] == i for i, w in enumerate(c.vocab))
    corpus = [list(zip(*(a.tolist() for a in c.train.doc(d)), strict=True)) for d in range(c.train.n_docs)]
    t0 = time.perf_counter()
    hdp = HdpModel(corpus, vocab, random_state=seed)
    secs = time.perf_counter() - t0
    alpha, beta = hdp.hdp_to_lda()
    obs = c.test_obs
    test = [list(zip(*(a.tolist() for a in obs.doc(d)), strict=True)) for d in range(obs.n_docs)]
    gamma = hdp.inference(test)
    theta = gamma / gamma.sum(axis=1, keepdims=True)
    weights = alpha / alpha.sum()
    return {
        "loglik": heldout(theta, beta, c.test_held),
        "topics_used": int(np.count_nonzero(weights >= 0.01)),
        "tok_s": c.train.n_tokens / secs,
        "secs": secs,
    }


# Our two estimators: the collapsed OnlineHDP (the service's ohdp) and seed 004's stick-breaking online VB.
CONFIGS: dict[str, type[OnlineHDPBase]] = {"collapsed": OnlineHDP, "stick": StickBreakingHDP}


def _row(name: str, r: dict[str, Any]) -> None:
    print(f"{name:<28} {r['loglik']:>16.3f} {r['topics_used']:>12d} {r['tok_s']:>10.0f} {r['secs']:>8.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="20ng,bbc")
    ap.add_argument("--configs", default="collapsed,stick")
    ap.add_argument("--set", action="append", default=[], help="kernel setting NAME=VALUE (all configs)")
    ap.add_argument("--no-gensim", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    extra = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        extra[k] = v == "True" if v in ("True", "False") else float(v)
        if (
            isinstance(extra[k], float)
            and extra[k].is_integer()
            and k in ("n_topics", "batch_size", "window", "max_iter", "doc_topics")
        ):
            extra[k] = int(extra[k])
    for name in args.corpus.split(","):
        c = load(name, args.seed)
        print(
            f"\n## {name}: {c.train.n_docs} train docs, {c.train.n_tokens:.0f} tokens, W={len(c.vocab)}, "
            f"{c.test_held.n_docs} test docs; unigram floor {unigram(c):.3f}"
        )
        print(f"{'model':<28} {'held-out ll/word':>16} {'topics used':>12} {'tokens/s':>10} {'seconds':>8}")
        rows = []
        for cfg in args.configs.split(","):
            r = run_ours(c, CONFIGS[cfg], dict(extra), seed=args.seed)
            rows.append((f"ours ohdp/{cfg}", r))
            _row(f"ours ohdp/{cfg}", r)
        if not args.no_gensim:
            r = run_gensim(c, args.seed)
            _row("gensim HdpModel", r)


if __name__ == "__main__":
    main()
