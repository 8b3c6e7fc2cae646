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

from benchmarks._corpus import document_completion, evaluate, heldout_loglik, load_corpus
from kernels import SCVB0, Batch

SEED_PHI = {"phi_scale": 10.0, "phi_tau": 1000.0, "phi_kappa": 0.9, "phi_floor": 0.0}  # the seed's Φ schedule
STATIONARY = {"phi_floor": 0.0, "window": 1e12}  # no floor, C = tokens seen (≈ "the whole corpus")

Config = tuple[str, dict[str, Any], bool]


def vary(label: str, setting: str, values: str, kind: type = float) -> list[Config]:
    """One row per value in ``values`` (space-separated, as the row names show them): ``setting`` alone changed
    from the defaults, the row named ``label=value``; the name is made from the value, so the two cannot differ."""
    return [(f"{label}={v}", {setting: kind(v)}, False) for v in values.split()]


# (name, settings, fixed_c). fixed_c: C = min(window, corpus size) from the start instead of tokens seen.
CONFIGS: list[Config] = [
    ("seed: Φ s=10 τ=1000 κ=.9, B=100, fixed C", {**SEED_PHI, "batch_size": 100, "window": 1e12}, True),
    ("seed: Φ s=10 τ=1000 κ=.9, B=256, fixed C", {**SEED_PHI, "batch_size": 256, "window": 1e12}, True),
    ("s=1 τ=1 κ=.7, B=100, no floor, fixed C", {**STATIONARY}, True),
    ("s=1 τ=1 κ=.7, B=100, no floor, C=seen", {**STATIONARY}, False),
    ("defaults", {}, False),
    *vary("B", "batch_size", "16 32 128 256", int),
    *vary("κ", "phi_kappa", "0.5 0.6 0.9"),
    *vary("τ", "phi_tau", "10 64"),
    *vary("floor", "phi_floor", "0 0.002 0.005 0.02 0.05"),
    ("C = window (1e6) from the start", {}, True),
    *vary("window", "window", "1e5 3e5 3e6 1e7"),
    *vary("burn_in", "burn_in", "0 2 3", int),
    *vary("Θ: τ", "theta_tau", "1"),
    *vary("Θ: κ", "theta_kappa", "0.6 0.7 0.8"),
    *vary("α", "alpha", "0.02 0.05 0.5"),
    *vary("η", "eta", "0.005 0.003"),
    ("α=0.05 η=0.005", {"alpha": 0.05, "eta": 0.005}, False),
    *vary("η", "eta", "0.05 0.1"),
    *vary("transform_passes", "transform_passes", "3 10 20", int),
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


def static_runner(name: str, topics: int) -> Callable[..., tuple[float, float]]:
    train, test, vocab, _ = load_corpus(name)
    print(f"# {name}: {train.n_docs} train docs, {train.n_tokens:,.0f} tokens, W={len(vocab)}, {test.n_docs} test")

    def run(settings: dict[str, Any], fixed_c: bool, seed: int) -> tuple[float, float]:
        model = SCVB0(topics, len(vocab), seed=seed, **settings)
        spent = fit_one_pass(model, train, fixed_c, train.n_tokens)
        return evaluate(model, test, seed=seed), train.n_tokens / spent

    return run


def prequential_runner(topics: int, chunk: int = 500) -> Callable[..., tuple[float, float]]:
    stream, _, vocab, _ = load_corpus("reuters", test_fraction=0.0)  # the whole file, in date order
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
        runners[f"20ng K={args.topics}"] = static_runner("20ng", args.topics)
    if "bbc" in wanted:
        runners[f"bbc K={args.bbc_topics}"] = static_runner("bbc", args.bbc_topics)
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
