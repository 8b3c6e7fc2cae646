"""Choose SCVB0's defaults by held-out log-likelihood per word (document completion).

Corpora (from ``../shared/data``, never copied here):

* ``20ng``: 20 Newsgroups, official train/test split, training order shuffled (seeded), K=100, one pass;
* ``bbc``: BBC News, random 80/20 split, shuffled, K=100 (``--bbc-topics``), one pass;
* ``reuters`` (prequential, the streaming case): Reuters-21578 in date order, in chunks of 500 articles; each
  chunk is first scored (document completion, topics fixed) and then trained on. The column is the
  token-weighted mean over all chunks after the first two, so it rewards following the stream.

Each row changes settings relative to the chosen defaults (``SCVB0()``'s) unless it says otherwise. The
"fixed C" rows use C = the corpus size from the first minibatch on, as in the seed; "C = window from the
start" uses C = ``window`` instead of min(window, tokens seen).

Usage: ``python -m benchmarks.tune_scvb0 [--seeds 2] [--only 20ng,bbc]`` (about 3 minutes on one core).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks._corpus import document_completion, evaluate, heldout_loglik, load_corpus, shared_data_dir
from kernels import SCVB0, Batch

SEED_PHI = {"phi_scale": 10.0, "phi_tau": 1000.0, "phi_kappa": 0.9, "phi_floor": 0.0}  # the seed's Φ schedule
STATIONARY = {"phi_floor": 0.0, "window": 1e12}  # no floor, C = tokens seen (≈ "the whole corpus")

# (name, settings, fixed_c). fixed_c: C = min(window, corpus size) from the start instead of tokens seen.
CONFIGS: list[tuple[str, dict[str, Any], bool]] = [
    ("seed: Φ s=10 τ=1000 κ=.9, B=100, fixed C", {**SEED_PHI, "batch_size": 100, "window": 1e12}, True),
    ("seed: Φ s=10 τ=1000 κ=.9, B=256, fixed C", {**SEED_PHI, "batch_size": 256, "window": 1e12}, True),
    ("s=1 τ=1 κ=.7, B=64, no floor, fixed C", {**STATIONARY}, True),
    ("s=1 τ=1 κ=.7, B=64, no floor, C=seen", {**STATIONARY}, False),
    ("defaults", {}, False),
    ("B=16", {"batch_size": 16}, False),
    ("B=32", {"batch_size": 32}, False),
    ("B=128", {"batch_size": 128}, False),
    ("B=256", {"batch_size": 256}, False),
    ("κ=0.5", {"phi_kappa": 0.5}, False),
    ("κ=0.6", {"phi_kappa": 0.6}, False),
    ("κ=0.9", {"phi_kappa": 0.9}, False),
    ("τ=10", {"phi_tau": 10.0}, False),
    ("τ=64", {"phi_tau": 64.0}, False),
    ("floor=0", {"phi_floor": 0.0}, False),
    ("floor=0.002", {"phi_floor": 0.002}, False),
    ("floor=0.005", {"phi_floor": 0.005}, False),
    ("floor=0.02", {"phi_floor": 0.02}, False),
    ("floor=0.05", {"phi_floor": 0.05}, False),
    ("C = window (1e6) from the start", {}, True),
    ("window=1e5", {"window": 1e5}, False),
    ("window=3e5", {"window": 3e5}, False),
    ("window=3e6", {"window": 3e6}, False),
    ("window=1e7", {"window": 1e7}, False),
    ("burn_in=0", {"burn_in": 0}, False),
    ("burn_in=2", {"burn_in": 2}, False),
    ("burn_in=3", {"burn_in": 3}, False),
    ("Θ: τ=1", {"theta_tau": 1.0}, False),
    ("Θ: κ=0.6", {"theta_kappa": 0.6}, False),
    ("α=0.02", {"alpha": 0.02}, False),
    ("α=0.05", {"alpha": 0.05}, False),
    ("α=0.5", {"alpha": 0.5}, False),
    ("η=0.005", {"eta": 0.005}, False),
    ("η=0.003", {"eta": 0.003}, False),
    ("α=0.05 η=0.005", {"alpha": 0.05, "eta": 0.005}, False),
    ("η=0.05", {"eta": 0.05}, False),
    ("η=0.1", {"eta": 0.1}, False),
    ("transform_passes=3", {"transform_passes": 3}, False),
    ("transform_passes=10", {"transform_passes": 10}, False),
    ("transform_passes=20", {"transform_passes": 20}, False),
]


def fit_one_pass(model: SCVB0, train: Batch, fixed_c: bool, corpus_tokens: float) -> float:
    """Stream ``train`` through the model in chunks of 1,000 documents. Returns seconds in partial_fit."""
    if fixed_c:  # C from the first minibatch on: the window, or (window=1e12) the whole corpus as in the seed
        model.window = min(model.window, corpus_tokens)
        model.n_tokens_seen_ = 1e12
    spent = 0.0
    for d0 in range(0, train.n_docs, 1000):
        t = time.perf_counter()
        model.partial_fit(train.slice(d0, min(train.n_docs, d0 + 1000)))
        spent += time.perf_counter() - t
    return spent


def static_runner(name: str, path: str, test_path: str | None, topics: int) -> Callable[..., tuple[float, float]]:
    train, test, vocab, _ = load_corpus(shared_data_dir() / path, test_path and shared_data_dir() / test_path)
    print(f"# {name}: {train.n_docs} train docs, {train.n_tokens:,.0f} tokens, W={len(vocab)}, {test.n_docs} test")

    def run(settings: dict[str, Any], fixed_c: bool, seed: int) -> tuple[float, float]:
        model = SCVB0(topics, len(vocab), seed=seed, **settings)
        spent = fit_one_pass(model, train, fixed_c, train.n_tokens)
        return evaluate(model, test, seed=seed), train.n_tokens / spent

    return run


def prequential_runner(topics: int, chunk: int = 500) -> Callable[..., tuple[float, float]]:
    stream, _, vocab, _ = load_corpus(
        shared_data_dir() / "news_stream_reuters21578.jsonl.gz", test_fraction=0.0, shuffle=False
    )
    print(f"# reuters: {stream.n_docs} docs in date order, {stream.n_tokens:,.0f} tokens, W={len(vocab)}")
    chunks = [stream.slice(d0, min(stream.n_docs, d0 + chunk)) for d0 in range(0, stream.n_docs, chunk)]
    halves = [document_completion(c, seed=i) for i, c in enumerate(chunks)]

    def run(settings: dict[str, Any], fixed_c: bool, seed: int) -> tuple[float, float]:
        model = SCVB0(topics, len(vocab), seed=seed, **settings)
        if fixed_c:
            model.window = min(model.window, stream.n_tokens)
            model.n_tokens_seen_ = 1e12
        total = n = spent = 0.0
        for i, (c, (observed, heldout)) in enumerate(zip(chunks, halves, strict=True)):
            if i >= 2:
                ll = heldout_loglik(model.transform(observed), model.topic_word(), heldout)
                total += ll * heldout.n_tokens
                n += heldout.n_tokens
            t = time.perf_counter()
            model.partial_fit(c)
            spent += time.perf_counter() - t
        return total / n, stream.n_tokens / spent

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2, help="random seeds per cell (mean reported)")
    ap.add_argument("--only", default="20ng,bbc,reuters", help="comma-separated corpora")
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--bbc-topics", type=int, default=100)
    ap.add_argument("--reuters-topics", type=int, default=50)
    ap.add_argument("--rows", default="", help="comma-separated substrings: run only matching rows")
    args = ap.parse_args()
    wanted = args.only.split(",")
    runners: dict[str, Callable[..., tuple[float, float]]] = {}
    if "20ng" in wanted:
        runners[f"20ng K={args.topics}"] = static_runner(
            "20ng", "20ng_all_train.jsonl.gz", "20ng_all_test.jsonl.gz", args.topics
        )
    if "bbc" in wanted:
        runners[f"bbc K={args.bbc_topics}"] = static_runner("bbc", "bbc.jsonl.gz", None, args.bbc_topics)
    if "reuters" in wanted:
        runners[f"reuters preq. K={args.reuters_topics}"] = prequential_runner(args.reuters_topics)
    d = SCVB0(1, 1)
    print(
        f"# defaults: α={d.alpha} η={d.eta} Φ: s={d.phi_scale} τ={d.phi_tau} κ={d.phi_kappa}"
        f" floor={d.phi_floor}"
        f" Θ: s={d.theta_scale} τ={d.theta_tau} κ={d.theta_kappa} B={d.batch_size} burn_in={d.burn_in}"
        f" window={d.window:g} transform_passes={d.transform_passes}; {args.seeds} seed(s) per cell"
    )
    print("# held-out log-likelihood per word (nats; higher is better), mean over seeds")
    print("| config | " + " | ".join(runners) + " | tokens/s (20ng) |")
    print("|---|" + "---:|" * (len(runners) + 1))
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    for name, settings, fixed_c in CONFIGS:
        if rows and not any(r in name for r in rows):
            continue
        cells = []
        speed = float("nan")
        for corpus, run in runners.items():
            results = [run(settings, fixed_c, seed) for seed in range(args.seeds)]
            cells.append(f"{np.mean([r[0] for r in results]):.3f}")
            if corpus.startswith("20ng"):
                speed = float(np.mean([r[1] for r in results]))
        print(f"| {name} | " + " | ".join(cells) + f" | {speed:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
