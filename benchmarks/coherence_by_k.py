"""NPMI coherence of every online method at several K, one pass each (issue 11's coherence target).

    nice -n 19 .venv/bin/python -m benchmarks.coherence_by_k                        # BBC, K = 10 … 100
    nice -n 19 .venv/bin/python -m benchmarks.coherence_by_k --corpora 20ng,reuters --topics 20,50,100
    nice -n 19 .venv/bin/python -m benchmarks.coherence_by_k --methods scvb0 --topics 50,100 \
        --param '{"background": 0.2, "background_warmup": 500, "eta": 0.001, "alpha": 0.01}'

``docs/benchmarks.md`` compares the methods at K = 50 (and 100 on BBC) only. One K can flatter one method: the
online VB peers leave many of their K topics empty, and how many they fill (and how coherent those are) changes
with K. This script runs the benchmark's single pass (:func:`benchmarks.peers.make_method`: the corpora of
``run_all``, minibatches of 100, the same settings) for each K and prints, per method and K,

* the held-out NPMI of the used topics exactly as ``docs/benchmarks.md`` scores it
  (:func:`evaluation.score_model`: document co-occurrence over the test documents, topics with mean θ ≥ 1 %),
* the same topics' NPMI with the training and test documents together as the reference (whether a small test
  set, where rare pairs never co-occur and count −1, explains a method's score),
* how many topics were used,
* and the held-out log-likelihood per word with the shared fold-in (every method's θ inferred from its φ with the
  same α, as ``docs/benchmarks.md``'s first column), to weigh what a setting buys in coherence against the fit.

``--param`` passes kernel parameters (JSON) to our kernels, e.g. to measure a setting for readers against the peers.

The last rows say, for our kernels, at which K their held-out NPMI is at least the best online peer's.
The online HDP chooses its own count under a truncation (``docs/benchmarks.md`` runs it at T = 150), so it is not
swept over K here.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
OURS = ("scvb0", "pf")
PEERS = ("vw-lda", "sklearn-lda", "gensim-lda")


def one_pass(corpus_name: str, K: int, method: str, seed: int, params: dict[str, Any]) -> dict[str, Any]:
    """Held-out NPMI, whole-corpus NPMI, topics used and held-out log-likelihood (shared fold-in) of ``method`` at
    ``K`` after one pass, with kernel ``params`` for our kernels (numpy and the libraries are imported here, after
    :func:`main` limited every thread pool to one thread)."""
    import numpy as np

    from benchmarks._corpus import prepare
    from benchmarks.methods import ALPHA
    from benchmarks.peers import make_method, safe_infer
    from evaluation import PreparedCorpus, fold_in, iter_batches, npmi_coherence, score_model
    from evaluation.scores import heldout_loglik_per_word, top_word_ids
    from kernels import Batch

    path, _ = prepare(corpus_name, vocab_size=10_000, seed=0, max_train={"20ng": 6000}.get(corpus_name), max_test=2000)
    corpus = PreparedCorpus.load(path)
    batches = list(iter_batches(corpus.train, 100))
    spec = {"method": method, "topics": K, "seed": seed, "batch_size": 100, "params": params if method in OURS else {}}
    model = make_method(spec, corpus, batches)
    model.prepare(batches)
    for i in range(len(batches)):
        model.update(i)
    model.finish()
    phi = model.phi()
    scores = score_model(phi, safe_infer(model), corpus)
    both = Batch.from_docs([part.doc(d) for part in (corpus.train, corpus.test) for d in range(part.n_docs)])
    tops = top_word_ids(phi)[np.asarray(scores["topic_ids"], dtype=np.int64)]
    return {
        "heldout": scores["npmi_coherence"],
        "whole": npmi_coherence(tops.tolist(), both, corpus.n_words),
        "used": scores["topics_used"],
        "ll": heldout_loglik_per_word(fold_in(phi, corpus.observed, ALPHA), phi, corpus.held_out),
    }


def table(corpus_name: str, ks: list[int], methods: list[str], seed: int, params: dict[str, Any]) -> str:
    """The markdown table of one corpus (progress lines go to stdout as each run ends)."""
    res: dict[tuple[str, int], dict[str, Any]] = {}
    for K in ks:
        for m in methods:
            r = res[m, K] = one_pass(corpus_name, K, m, seed, params)
            print(f"{corpus_name} K={K} {m}: NPMI {r['heldout']:.3f} (whole corpus {r['whole']:.3f}), {r['used']} used,"
                  f" held-out LL {r['ll']:.4f}", flush=True)  # fmt: skip
    lines = [
        f"| {corpus_name}: method | " + " | ".join(f"K = {K}" for K in ks) + " |",
        "|---|" + "---:|" * len(ks),
    ]
    for m in methods:
        cells = [f"{res[m, K]['heldout']:.3f} ({res[m, K]['whole']:.3f}) / {res[m, K]['used']}" for K in ks]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    peers = [m for m in methods if m in PEERS]
    for m in (m for m in methods if m in OURS and peers):
        ok = [res[m, K]["heldout"] >= max(res[p, K]["heldout"] for p in peers) for K in ks]
        lines.append(f"| {m} ≥ best peer | " + " | ".join("yes" if x else "no" for x in ok) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", default="bbc")
    ap.add_argument("--topics", default="10,20,30,50,75,100")
    ap.add_argument("--methods", default=",".join(OURS + PEERS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--param", type=json.loads, default={}, help="kernel parameters (JSON) for our kernels")
    args = ap.parse_args()
    for name in _THREADS:
        os.environ[name] = "1"
    ks = [int(k) for k in args.topics.split(",")]
    methods = args.methods.split(",")
    tables = [table(c, ks, methods, args.seed, args.param) for c in args.corpora.split(",")]
    print("\nheld-out NPMI (whole-corpus NPMI) / topics used, one pass, seed", args.seed, "params", args.param or "-")
    print("\n\n".join(tables))


if __name__ == "__main__":
    main()
