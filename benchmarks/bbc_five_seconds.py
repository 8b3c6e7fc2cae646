"""Seed 000's small-scale experiment on BBC News: K = 20, five seconds of training, print the topics.

The seed ran SCVB0 and stochastic VB for five seconds on 1,740 NIPS papers and showed the topics. Here:
all 2,225 BBC articles, the shared tokenizer and vocabulary, minibatches of 100 documents cycling over the
shuffled articles until five seconds of training (update calls only, one core) have passed, for
topicstream's SCVB0 and for gensim's ``LdaModel`` (online VB, the SVB of the seed). Topics are listed most
prevalent first (mean θ over the corpus). Time is CPU time of the update calls (``time.process_time``; the
same as wall-clock time on an idle core, not inflated by other jobs on a shared machine). Writes
``benchmarks/results/bbc_five_seconds.json`` (shown in ``docs/benchmarks.md``).

``python -m benchmarks.bbc_five_seconds [--seconds 5] [--topics 20] [--methods scvb0,gensim-lda]``
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported: one core, as in the other benchmarks

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks._corpus import shared_data_dir  # noqa: E402
from benchmarks.methods import GensimLda, KernelMethod, Method  # noqa: E402
from benchmarks.run_all import RESULTS  # noqa: E402
from evaluation import iter_batches, load_articles, npmi_per_topic, prepare_corpus, top_word_ids  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--topics", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--vocab-size", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default="scvb0,gensim-lda")
    args = p.parse_args(argv)

    path = shared_data_dir() / "bbc.jsonl.gz"
    if not path.exists():
        print(f"{path} not found (set TOPICSTREAM_SHARED_DATA)", file=sys.stderr)
        return 2
    articles = load_articles(path)
    corpus = prepare_corpus(articles, articles, vocab_size=args.vocab_size, seed=args.seed, drop_repeats=False)
    batches = list(iter_batches(corpus.train, args.batch_size))
    K, W = args.topics, corpus.n_words
    runs = []
    for name in args.methods.split(","):
        method: Method
        if name == "gensim-lda":
            method = GensimLda(K, W, args.seed, corpus.train.n_docs, args.batch_size)
        else:
            method = KernelMethod(name, K, W, args.seed, {}, batches[0])
        method.prepare(batches)
        spent, i, docs = 0.0, 0, 0
        while spent < args.seconds:
            t = time.process_time()
            method.update(i % len(batches))
            spent += time.process_time() - t
            docs += batches[i % len(batches)].n_docs
            i += 1
        phi = method.phi()
        prevalence = method.infer(corpus.test).mean(axis=0)
        order = np.argsort(-prevalence, kind="stable")
        tops = top_word_ids(phi, 10)[order]
        npmi = npmi_per_topic(tops.tolist(), corpus.test, W)
        words = [[corpus.vocab[w] for w in row] for row in tops.tolist()]
        runs.append(
            {
                "method": name,
                "train_seconds": spent,
                "updates": i,
                "docs_seen": docs,
                "passes": docs / corpus.train.n_docs,
                "npmi_coherence": float(np.mean(npmi)),
                "prevalence": prevalence[order].tolist(),
                "top_words": words,
            }
        )
        print(f"\n{name}: {docs:,} documents ({docs / corpus.train.n_docs:.1f} passes) in {spent:.2f} s")
        for k, ws in enumerate(words, 1):
            print(f"  {k:2d}. {' '.join(ws)}")
    out = {
        "command": "python -m benchmarks.bbc_five_seconds" + (" " + " ".join(argv) if argv else ""),
        "docs": corpus.train.n_docs,
        "tokens": int(corpus.train.n_tokens),
        "vocab_size": W,
        "topics": K,
        "batch_size": args.batch_size,
        "seconds": args.seconds,
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bbc_five_seconds.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or None))
