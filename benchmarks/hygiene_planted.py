"""Topic hygiene on planted and real corpora: planted topics recovered, duplicates, muddles, held-out likelihood.

    .venv/bin/python -m benchmarks.hygiene_planted                      # demo generator, SCVB0 K = 20
    .venv/bin/python -m benchmarks.hygiene_planted --background 0.2     # ... with make run's background slot
    .venv/bin/python -m benchmarks.hygiene_planted --corpus 20ng --topics 50 --docs 11314
    .venv/bin/python -m benchmarks.hygiene_planted --corpus bbc --topics 50 --docs 1780 --every 1 --warmup 500

One pass, one thread, batches of 256 documents; with hygiene, ``TopicHygiene.apply`` every ``--every`` (10) batches
on the last 256 documents, with the next 256 as the unseen documents of the held-out moves, and once at the end, as
``docs/topic-hygiene.md`` describes. Runs are: no hygiene, hygiene (the defaults: no splits), hygiene with splits
(``max_splits=2``), hygiene with near merges (``near_merge_tries=4``). NPMI is ``topicstream eval``'s (the used
topics, the test documents as the reference). For the generator corpus (20,000
articles of ``service.dev.generator``, seed 0, in stream order, vocabulary 5,000; 2,000 more articles held out)
the planted topics are its 15 desks (Zipf weights over their word lists) and its background words (uniform
over ``BACKGROUND_WORDS``, repeats counted): a planted topic is *recovered* when a live learned topic lies
within Hellinger 0.35 of it. Held-out log-likelihood is document completion (``evaluation``).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks._corpus import load
from evaluation.corpus import PreparedCorpus
from evaluation.scores import score_model
from kernels import SCVB0
from kernels.hygiene import TopicHygiene, hellinger_matrix, mass_topics

RECOVERED = 0.35


def run(
    c: PreparedCorpus, topics: int, hygiene: TopicHygiene | None, seed: int, background: float = 0.0, every: int = 10
) -> dict[str, Any]:
    model = SCVB0(n_topics=topics, n_words=c.n_words, seed=seed, background=background)
    docs, kinds, spent = c.train, Counter[str](), 0.0
    t0 = time.perf_counter()
    for n, start in enumerate(range(0, docs.n_docs, 256), 1):
        stop = min(docs.n_docs, start + 256)
        model.partial_fit(docs.slice(start, stop))
        if hygiene is not None and n % every == 0:
            t1 = time.perf_counter()
            # Unseen documents for the held-out moves: the next 256, which the model has not learned (the service
            # scores its plan on the documents learned after the snapshot it planned on).
            unseen = docs.slice(stop, min(docs.n_docs, stop + 256)) if stop < docs.n_docs else None
            kinds.update(e.kind for e in hygiene.apply(model, docs.slice(max(0, stop - 256), stop), unseen))
            spent += time.perf_counter() - t1
    if hygiene is not None:
        t1 = time.perf_counter()
        kinds.update(e.kind for e in hygiene.apply(model, None))
        spent += time.perf_counter() - t1
    phi, w = model.topic_word(), model.topic_weights()
    scores = score_model(phi, model.transform, c, topic_weights=w)
    live = np.flatnonzero(w >= 1e-4)
    pairs = hellinger_matrix(phi[live])
    np.fill_diagonal(pairs, np.inf)
    return {
        "model": model,
        "heldout": scores["heldout_loglik_per_word"],
        "npmi": scores["npmi_coherence"],
        "closest": float(pairs.min()),
        "pairs_035": int(np.count_nonzero(np.triu(pairs < RECOVERED))),
        "mass95": mass_topics(w),
        "events": dict(kinds),
        "hygiene_s": spent,
        "seconds": time.perf_counter() - t0,
    }


def recovery(model: SCVB0, truth: NDArray[np.float64]) -> tuple[int, float, list[str]]:
    phi, w = model.topic_word(), model.topic_weights()
    live = np.flatnonzero(w >= 1e-4)
    d = np.sqrt(np.clip(1.0 - np.sqrt(truth) @ np.sqrt(phi[live]).T, 0.0, 1.0))
    best = d.min(axis=1)
    return int(np.count_nonzero(best < RECOVERED)), float(best.max()), [f"{x:.3f}" for x in best]


def generic_words(model: SCVB0, generic: NDArray[np.float64]) -> str:
    """Where the generic words went: the topic marked as the background, its Hellinger distance from the planted
    generic words, and the generic words' share of every other topic holding ≥ 2 % of the mass."""
    phi, w = model.topic_word(), model.topic_weights()
    mark = model.background_topic()
    share = phi[:, generic > 0].sum(axis=1)
    others = [k for k in np.flatnonzero(w >= 0.02) if k != mark]
    where = (
        "none" if mark is None else f"{mark} (Hellinger {hellinger_matrix(np.vstack([generic, phi[mark]]))[0, 1]:.3f})"
    )
    return (
        f"background marked: {where}; generic words' share of the other topics median "
        f"{np.median(share[others]):.3f} max {share[others].max():.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="generator", choices=["generator", "20ng", "bbc"])
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--docs", type=int, default=20_000, help="training documents")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--background", type=float, default=0.0, help="SCVB0's background slot b (make run: 0.2)")
    ap.add_argument("--every", type=int, default=10, help="batches of 256 between two hygiene calls")
    ap.add_argument("--warmup", type=int, default=None, help="hygiene's warmup_docs (default: 40 per topic)")
    a = ap.parse_args(argv)
    # 20NG: the first --docs training articles and the first 2,000 test articles, corpus seed 0 whatever --seed
    c, truth = load(a.corpus, seed=0, max_train=a.docs, max_test=2000, first=True)
    print(f"{a.corpus}: {c.train.n_docs} train docs, {c.n_words} words, K = {a.topics}, seed {a.seed}")
    configs: list[tuple[str, TopicHygiene | None]] = [
        ("no hygiene", None),
        ("hygiene, no splits", TopicHygiene(warmup_docs=a.warmup)),
        ("hygiene + splits", TopicHygiene(warmup_docs=a.warmup, max_splits=2)),
        ("hygiene + near merges", TopicHygiene(warmup_docs=a.warmup, near_merge_tries=4)),
    ]
    for name, hyg in configs:
        r = run(c, a.topics, hyg, a.seed, a.background, a.every)
        line = (
            f"{name:<22} held-out {r['heldout']:.4f}  NPMI {r['npmi']:.3f}  closest pair {r['closest']:.3f}"
            f"  pairs<0.35 {r['pairs_035']}  topics holding 95% {r['mass95']}  events {r['events']}"
            f"  hygiene {r['hygiene_s']:.2f} s  pass {r['seconds']:.1f} s"
        )
        if truth is not None:
            n, worst, each = recovery(r["model"], truth)
            line += f"\n{'':<22} recovered {n}/{len(truth)}  worst {worst:.3f}  per planted {' '.join(each)}"
            line += f"\n{'':<22} {generic_words(r['model'], truth[-1])}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
