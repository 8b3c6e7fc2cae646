"""Does the online HDP's truncation choose the number of topics? (issue 11, "Online HDP that chooses").

    nice -n 19 .venv/bin/python -m benchmarks.hdp_truncation                      # 20NG and BBC, T = 50/150/300
    nice -n 19 .venv/bin/python -m benchmarks.hdp_truncation --corpus bbc --truncations 50,150 --max-train-docs 2000
    nice -n 19 .venv/bin/python -m benchmarks.hdp_truncation --corpus generator,lda    # planted topics

For each corpus, truncation T and configuration (fixed or learned concentrations, each without and with topic
hygiene), one pass of :class:`kernels.ohdp.OnlineHDP` over the training stream in batches of 256 documents, then
the scores of ``topicstream eval`` (:func:`evaluation.score_model`: document-completion held-out log-likelihood
per word, NPMI of the topics with E[β] ≥ 1 % over the test documents). Printed per run: the number of topics
holding 95 % of E[β] (:func:`kernels.hygiene.mass_topics`), the number holding ≥ 1/(10 T) of it, the final γ
and α0 in use, training tokens/s (``partial_fit`` only) and the seconds hygiene took.

Corpora from :func:`benchmarks._corpus.load`, by ``benchmarks/run_all.py``'s recipe
(:func:`evaluation.prepare_corpus`, vocabulary 10,000, corpus seed ``--seed``, cached) but without its caps: all of
20 Newsgroups' train/test files (11,314 / 7,532 documents, so a vocabulary of its own), BBC with a seeded 20 % test
split; ``--max-train-docs`` keeps a seeded random subset of the training documents.
Planted corpora (``--corpus generator,lda``): the demo generator's articles (16 planted topics: 15 desks
and the background words; ``--max-train-docs`` training articles, default 5,000, in stream order) and an
LDA-drawn corpus with known φ (:func:`benchmarks._corpus.lda_corpus`: 20 topics over 2,000 words); for them the
table adds planted topics recovered (a planted topic is recovered when a learned topic among those holding 95 %
lies within Hellinger :data:`RECOVERED` of it), the worst recovery distance, and the closest pair among the learned
topics holding 95 % (a duplicate when under :data:`kernels.hygiene.DEFAULT_THRESHOLD`). Window D = the training
documents used.
Hygiene as measured in ``docs/topic-hygiene.md`` for the HDP:
``TopicHygiene(threshold=0.35, retire_below=0.01, warmup_docs=2000)`` (``--hygiene-warmup`` sets the
warm-up: BBC's 1,780 training documents never reach 2,000), applied every 10 batches to the last 256 documents
and once at the end (hygiene column "retire"); its merges alone, ``TopicHygiene(threshold=0.35,
warmup_docs=2000, max_births=0)``, the same way (column "merge"). Hygiene column "delete": the held-out delete move
(:mod:`kernels._delete`) with merges, ``TopicHygiene(threshold=0.35, warmup_docs=2000, delete_tries=8,
max_births=0)``, applied every 10 batches and before the last one to the batch about to be learned. Hygiene
column "service": the service's default hygiene for the HDP (``OnlineHDP.hygiene_defaults``: merges by distance at
0.35 and by co-occurrence, :mod:`kernels._cooccur`, ``merge_correlation=0.3``; the held-out delete move; no
births) in one call before every 10th and the last batch, as the learner plans it on a snapshot's copy: merges on
the latest documents learned (``recent_window``: 1,024 for the HDP; ``--recent-window`` replaces it), the delete
move and the background merge scored on the batch about to be learned, which the copy never learns; column
"cooccur": the same without those held-out moves.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks._corpus import load
from evaluation.corpus import PreparedCorpus, iter_batches
from evaluation.scores import fold_in, score_model
from kernels.hygiene import RecentDocs, TopicHygiene, hellinger_matrix, mass_topics
from kernels.ohdp import OnlineHDP

# configuration → (learn_concentrations, hygiene: "" none, "retire" as docs/topic-hygiene.md, "merge" its merges
# alone, "delete" held-out, "service" the service's default for the HDP, "cooccur" that without the delete move)
CONFIGS: dict[str, tuple[bool, str]] = {
    "fixed": (False, ""),
    "learned": (True, ""),
    "fixed+hygiene": (False, "retire"),
    "learned+hygiene": (True, "retire"),
    "fixed+merge": (False, "merge"),
    "fixed+delete": (False, "delete"),
    "learned+delete": (True, "delete"),
    "fixed+cooccur": (False, "cooccur"),
    "fixed+service": (False, "service"),
}
BATCH = 256
#: Hellinger distance within which a learned topic recovers a planted one (as ``benchmarks/hygiene_planted.py``).
RECOVERED = 0.35
#: E[β] of a learned topic that may recover a planted one in the "recovered, any" column.
RECOVERY_WEIGHT = 0.005
HYGIENE_EVERY = 10  # batches


def planted_recovery(
    phi: NDArray[np.float64], weights: NDArray[np.float64], truth: NDArray[np.float64]
) -> dict[str, Any]:
    """Planted topics recovered by the learned topics holding 95 % of the mass, the worst recovery distance, and
    the closest pair among those learned topics (Hellinger); and planted topics recovered by any learned topic
    holding ≥ :data:`RECOVERY_WEIGHT` of it (the planted model's smallest topics lie outside its own 95 %)."""
    top = np.argsort(-weights, kind="stable")[: mass_topics(weights, 0.95)]
    d = hellinger_matrix(np.vstack([truth, phi[top]]))[: truth.shape[0], truth.shape[0] :]
    best = d.min(axis=1)
    held = np.flatnonzero(weights >= RECOVERY_WEIGHT)
    d_any = hellinger_matrix(np.vstack([truth, phi[held]]))[: truth.shape[0], truth.shape[0] :]
    pairs = hellinger_matrix(phi[top])
    np.fill_diagonal(pairs, np.inf)
    return {
        "recovered": int(np.count_nonzero(best < RECOVERED)),
        "recovered_any": int(np.count_nonzero(d_any.min(axis=1) < RECOVERED)),
        "planted": int(truth.shape[0]),
        "worst": float(best.max()),
        "closest": float(pairs.min()) if top.size > 1 else float("inf"),
    }


def planted_mass_topics(truth: NDArray[np.float64], corpus: PreparedCorpus) -> int:
    """How many planted topics hold 95 % of the training tokens, each document's mixture fitted with the planted φ
    fixed (:func:`evaluation.scores.fold_in`, maximum likelihood): the count a learned model that found the planted
    topics exactly would report."""
    phi = truth + 1e-12
    phi /= phi.sum(axis=1, keepdims=True)
    train = corpus.train
    doc_of = np.repeat(np.arange(train.n_docs), np.diff(train.indptr))
    lengths = np.bincount(doc_of, weights=train.counts, minlength=train.n_docs)
    return mass_topics(lengths @ fold_in(phi, train, alpha=0.0), 0.95)


def run(
    corpus: PreparedCorpus,
    T: int,
    learn: bool,
    hygiene: str,
    seed: int = 0,
    warmup: int = 2000,
    truth: NDArray[np.float64] | None = None,
    recent_window: int | None = None,
) -> dict[str, Any]:
    """One pass of ``OnlineHDP(T)`` and its scores; ``recent_window`` replaces the hygiene's own."""
    model = OnlineHDP(T, corpus.n_words, seed=seed, window=corpus.train.n_docs, learn_concentrations=learn)
    tidy = None
    if hygiene == "retire":
        tidy = TopicHygiene(threshold=0.35, retire_below=0.01, warmup_docs=warmup)
    elif hygiene == "merge":
        tidy = TopicHygiene(threshold=0.35, warmup_docs=warmup, max_births=0)
    elif hygiene == "delete":
        tidy = TopicHygiene(threshold=0.35, warmup_docs=warmup, delete_tries=8, max_births=0)
    elif hygiene in ("service", "cooccur"):
        no_delete = {"delete_tries": 0, "merge_background": False} if hygiene == "cooccur" else {}
        tidy = TopicHygiene(**{**(OnlineHDP.hygiene_defaults or {}), "warmup_docs": warmup, **no_delete})
    if tidy is not None and recent_window is not None:
        tidy.recent_window = recent_window
    before = hygiene in ("delete", "service", "cooccur")  # prequential: the batch about to be learned is unseen
    recent = RecentDocs(tidy.recent_window if tidy is not None else 1)
    train_s = hygiene_s = 0.0
    events = 0
    for i, batch in enumerate(iter_batches(corpus.train, BATCH), 1):
        due = tidy is not None and (i % HYGIENE_EVERY == 0 or i * BATCH >= corpus.train.n_docs)
        if due and before and tidy is not None:
            t0 = time.perf_counter()
            learned = recent.batch() if hygiene != "delete" else None
            events += len(tidy.apply(model, learned, unseen_docs=batch))
            hygiene_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        model.partial_fit(batch)
        train_s += time.perf_counter() - t0
        recent.append(batch)
        if due and not before and tidy is not None:
            t0 = time.perf_counter()
            events += len(tidy.apply(model, recent.batch()))
            hygiene_s += time.perf_counter() - t0
    weights = model.topic_weights()
    scores = score_model(model.topic_word(), model.transform, corpus, topic_weights=weights)
    planted = planted_recovery(model.topic_word(), weights, truth) if truth is not None else {}
    return {
        **planted,
        "m95": mass_topics(weights, 0.95),
        "over": int(np.count_nonzero(weights >= 1.0 / (10 * T))),
        "ll": float(scores["heldout_loglik_per_word"]),
        "npmi": float(scores["npmi_coherence"]),
        "used": int(scores["topics_used"]),
        "gamma": model.diagnostics()["gamma"],
        "alpha": model.diagnostics()["alpha"],
        "tok_s": corpus.train.n_tokens / train_s,
        "hygiene_s": hygiene_s,
        "events": events,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="20ng,bbc")
    ap.add_argument("--truncations", default="50,150,300")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--max-train-docs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hygiene-warmup", type=int, default=2000, help="documents before the first merge/retirement")
    ap.add_argument(
        "--recent-window", type=int, default=None, help="latest documents hygiene plans on (default: the hygiene's)"
    )
    args = ap.parse_args()
    for name in args.corpus.split(","):
        corpus, truth = load(name, seed=args.seed, max_train=args.max_train_docs)
        print(
            f"\n## {name}: {corpus.train.n_docs} train docs, {corpus.train.n_tokens:.0f} tokens, W={corpus.n_words}, "
            f"{corpus.held_out.n_docs} held-out docs"
            + (
                f"; the planted topics' own tokens: {planted_mass_topics(truth, corpus)} hold 95 %"
                if truth is not None
                else ""
            )
            + "\n"
        )
        print(
            "| T | concentrations | hygiene | topics holding 95 % | topics ≥ 1/(10T) | held-out ll/word | NPMI "
            "| topics ≥ 1 % | γ | α0 | tokens/s | hygiene s (events) |"
            + (" planted recovered (95 % / any) | worst H | closest pair |" if truth is not None else "")
        )
        print(
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            + ("---:|---:|---:|" if truth is not None else "")
        )
        for T in (int(t) for t in args.truncations.split(",")):
            for cfg in args.configs.split(","):
                learn, hygiene = CONFIGS[cfg]
                r = run(corpus, T, learn, hygiene, args.seed, args.hygiene_warmup, truth, args.recent_window)
                print(
                    f"| {T} | {'learned' if learn else 'fixed'} | {hygiene or 'off'} | {r['m95']} "
                    f"| {r['over']} | {r['ll']:.3f} | {r['npmi']:.3f} | {r['used']} | {r['gamma']:.2f} "
                    f"| {r['alpha']:.2f} | {r['tok_s']:,.0f} | "
                    + (f"{r['hygiene_s']:.1f} ({r['events']})" if hygiene else "—")
                    + " |"
                    + (
                        f" {r['recovered']} / {r['recovered_any']} of {r['planted']} | {r['worst']:.3f}"
                        f" | {r['closest']:.3f} |"
                        if truth is not None
                        else ""
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main()
