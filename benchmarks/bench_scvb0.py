"""SCVB0 single-thread speed on 20 Newsgroups (all groups) at K=100, and gensim's LdaModel on the same docs.

Prints: tokenizer speed (the Python helper in ``benchmarks/_corpus.py``), SCVB0 ``partial_fit`` tokens/s for
one pass (best of ``--repeat``), ``transform`` tokens/s, held-out log-likelihood per word (document
completion), and, if gensim is importable, gensim's online LdaModel (one pass, single process) on the same
bag-of-words with its tokens/s, held-out log-likelihood and the speed ratio.

Usage: ``python -m benchmarks.bench_scvb0 [--topics 100] [--repeat 3] [--no-gensim]``.
"""

from __future__ import annotations

import os

# single thread for everyone (numba kernels are single-threaded; keep BLAS in gensim from using more cores)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks._corpus import (  # noqa: E402
    document_completion,
    evaluate,
    heldout_loglik,
    load_corpus,
)
from kernels import SCVB0  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="timed one-pass runs of SCVB0 (best is reported)")
    ap.add_argument("--burn-in", type=int, default=1)
    ap.add_argument("--no-gensim", action="store_true")
    ap.add_argument("--gensim-chunksize", default="2000,256", help="comma-separated gensim chunk sizes to run")
    args = ap.parse_args()
    K = args.topics

    t = time.perf_counter()
    train, test, vocab, _ = load_corpus("20ng")
    load_s = time.perf_counter() - t
    n_tok = train.n_tokens + test.n_tokens
    print(f"corpus: 20ng_all, {train.n_docs} train docs, {train.n_tokens:,.0f} train tokens, W={len(vocab)}")
    print(f"tokenizer (read + tokenize + vocabulary, Python): {n_tok / load_s:,.0f} tokens/s ({load_s:.1f} s)")

    SCVB0(K, len(vocab), seed=0, burn_in=args.burn_in).partial_fit(train.slice(0, 200))  # compile / load cache
    best = np.inf
    model = None
    for rep in range(args.repeat):
        model = SCVB0(K, len(vocab), seed=rep, burn_in=args.burn_in)
        t = time.perf_counter()
        model.partial_fit(train)
        best = min(best, time.perf_counter() - t)
    assert model is not None
    speed = train.n_tokens / best
    observed, heldout = document_completion(test, seed=0)
    t = time.perf_counter()
    theta = model.transform(observed)
    tr_s = time.perf_counter() - t
    ll = heldout_loglik(theta, model.topic_word(), heldout)
    print(
        f"SCVB0 K={K} burn_in={args.burn_in} B={model.batch_size}: partial_fit {speed:,.0f} tokens/s "
        f"({best:.2f} s, best of {args.repeat}); transform ({model.transform_passes} passes) "
        f"{observed.n_tokens / tr_s:,.0f} tokens/s; held-out {ll:.3f} nats/word"
    )
    assert abs(ll - evaluate(model, test)) < 1e-12

    if args.no_gensim:
        return
    try:
        from gensim.models import LdaModel
    except ImportError:
        print("gensim not importable: skipped (pip install gensim)")
        return
    corpus = [
        list(zip(ids.tolist(), cnts.tolist(), strict=True)) for ids, cnts in (train.doc(d) for d in range(train.n_docs))
    ]
    id2word = dict(enumerate(vocab))
    obs = [
        list(zip(observed.doc(d)[0].tolist(), observed.doc(d)[1].tolist(), strict=True)) for d in range(observed.n_docs)
    ]
    for chunksize in (int(c) for c in args.gensim_chunksize.split(",")):
        t = time.perf_counter()
        lda = LdaModel(corpus, num_topics=K, id2word=id2word, passes=1, random_state=0, chunksize=chunksize)
        g_s = time.perf_counter() - t
        gamma, _ = lda.inference(obs)
        g_theta = gamma / gamma.sum(axis=1, keepdims=True)
        g_ll = heldout_loglik(g_theta, lda.get_topics(), heldout)
        print(
            f"gensim LdaModel K={K} (online VB, 1 pass, chunksize {chunksize}, defaults otherwise): "
            f"{train.n_tokens / g_s:,.0f} tokens/s ({g_s:.1f} s); held-out {g_ll:.3f} nats/word"
        )
        print(
            f"  SCVB0 / gensim(chunksize {chunksize}) speed: {speed / (train.n_tokens / g_s):.1f}x; "
            f"held-out difference {ll - g_ll:+.3f} nats/word"
        )


if __name__ == "__main__":
    main()
