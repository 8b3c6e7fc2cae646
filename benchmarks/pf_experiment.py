"""Seed 003's experiments with the reservoir particle filter (``kernels.ParticleFilterLDA``).

Datasets: 20 Newsgroups diff3, rel3, sim3 (``../shared/data/20ng_{name}_{train,test}.jsonl.gz``, bydate 60/40),
K = 3. Preprocessing as in the seed (seed 003's section on data): body text only (headers are already
removed in the files), drop lines without a non-trailing space, split on non-letters, lower-case, drop sklearn's
English stop words, vocabulary = non-singleton training types + one out-of-vocabulary symbol, documents shuffled
once (seed 0). Metric: out-of-sample NMI — φ fixed, five Gibbs sweeps on each test document, label = the topic
holding most of its tokens, ``sklearn.metrics.normalized_mutual_info_score`` against the newsgroups.

Experiments (``--exp``):
  a   one fixed initial model (200 Gibbs sweeps on the first 10% of the documents, chain seed 0), then
      rejuvenation none / reservoir of 1000 / whole history;
  b   initial sample of 0, 30, 100, 300 documents (``--init-sizes``; ``--sweeps`` Gibbs sweeps, a new chain
      every run), reservoir 1000;
  d   experiment a's reservoir and whole-history arms with longer rejuvenation sequences (``--rejuv-lengths``;
      a is r = 30): does sampling the history more often than new tokens help, and at what cost?
  batch  batch collapsed Gibbs on the whole training set (``--sweeps`` sweeps), the reference of the tables;
  c   best of 20 Gibbs initialisations (200 sweeps, first 10% of the documents) chosen by held-out perplexity
      (the kernel's label-free ``init_restarts``) or by in-sample NMI (labels; via ``initialize_from``).
  ref references for the 90 % goal: batch Gibbs NMI after 1, 2, 5, …, 2000 sweeps of the whole training set
      (one chain per run, NMI taken as it goes; the 2000-sweep point is ``batch``'s number for the same seed),
      Gibbs on the first n documents alone (2000 sweeps; ``--init-sizes``, the ceiling of "initialise, then
      filter" if filtering added nothing) and one pass of SCVB0 (``kernels.SCVB0``, defaults) over the stream.
  tp  throughput and peak memory: P particles, K topics, vocabulary capped at W, on ``--tp-dataset`` (all).

Particle filter settings: P = 100, ESS threshold P/5, r = 30, α = 0.1, β = 0.01. NMI is also recorded at
``--checkpoints`` points of the stream for the figures. Results go to ``--results`` (JSON); ``--plot`` draws the
figures from it and prints the Markdown tables.

    .venv/bin/python -m benchmarks.pf_experiment --exp a b c batch --runs 30 --results /tmp/pf_results.json
    .venv/bin/python -m benchmarks.pf_experiment --plot --results /tmp/pf_results.json --out docs/experiments

Runs can be added later with the next seeds (``--first-run 10 --runs 10 --results other.json``) and merged when
plotting (``--merge other.json ...``: runs of the same setting are appended). The commands behind the committed
numbers are in ``docs/experiments/particle-filter.md``.
    .venv/bin/python -m benchmarks.pf_experiment --exp tp --particles 100 --topics 100 --max-words 65536
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from sklearn.metrics import normalized_mutual_info_score

from kernels import SCVB0, Batch, ParticleFilterLDA
from kernels import _pf_state as st
from kernels._pf_gibbs import TokenDocs, Tokens, fold_in_gibbs, gibbs_chain, new_chain

from ._pf_report import report
from ._proc import reset_peak, vm_mb

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
_SPLIT = re.compile(r"[^a-z]+")
_STOP = frozenset(ENGLISH_STOP_WORDS)
K = 3
# The seed's filter: one initial Gibbs sample, no refinement of it (``refine_docs`` = 0).
PF = {
    "n_particles": 100,
    "ess_threshold": 0.2,
    "n_rejuvenate": 30,
    "alpha": 0.1,
    "beta": 0.01,
    "pool_factor": 100.0,
    "refine_docs": 0,
}


# ------------------------------------------------------------------------------------------ data
def tokenize(text: str) -> list[str]:
    out: list[str] = []
    for line in text.split("\n"):
        if " " not in line.rstrip():  # the seed drops lines without a non-trailing space
            continue
        out.extend(t for t in _SPLIT.split(line.lower()) if t and t not in _STOP)
    return out


def _read(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class Corpus:
    """Token arrays of one dataset: training documents (shuffled) and test documents, with labels."""

    def __init__(self, name: str, max_words: int | None = None) -> None:
        train = _read(DATA / f"20ng_{name}_train.jsonl.gz")
        test = _read(DATA / f"20ng_{name}_test.jsonl.gz")
        order = np.random.default_rng(0).permutation(len(train))
        train = [train[i] for i in order]
        tr_tok = [tokenize(r["text"]) for r in train]
        te_tok = [tokenize(r["text"]) for r in test]
        counts = Counter(t for doc in tr_tok for t in doc)
        vocab = [w for w, c in counts.most_common() if c > 1]
        if max_words is not None:
            vocab = vocab[: max_words - 1]
        self.index = {w: i for i, w in enumerate(vocab)}
        self.W = len(vocab) + 1  # + the out-of-vocabulary symbol
        oov = self.W - 1
        labels = sorted({r["label"] for r in train})
        lab = {x: i for i, x in enumerate(labels)}

        def ids(doc: list[str]) -> NDArray[np.int64]:
            return np.array([self.index.get(t, oov) for t in doc], dtype=np.int64)

        self.train = [ids(d) for d in tr_tok]
        self.test = [ids(d) for d in te_tok]
        self.y_train = np.array([lab[r["label"]] for r in train])
        self.y_test = np.array([lab[r["label"]] for r in test])
        self.test_ptr = np.concatenate(([0], np.cumsum([len(d) for d in self.test]))).astype(np.int64)
        self.test_toks = np.concatenate(self.test) if self.test else np.zeros(0, np.int64)
        self.n_train_tokens = int(sum(len(d) for d in self.train))

    def batch(self, lo: int, hi: int) -> Batch:
        """Training documents lo..hi as a batch of tokens (count 1 each, order kept)."""
        docs = self.train[lo:hi]
        indptr = np.concatenate(([0], np.cumsum([len(d) for d in docs]))).astype(np.int64)
        toks = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        return Batch(indptr, toks, np.ones(toks.size))

    def tokens(self, lo: int, hi: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        docs = self.train[lo:hi]
        toks = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        doc_of = np.repeat(np.arange(len(docs)), [len(d) for d in docs]).astype(np.int64)
        return toks, doc_of


def nmi(corpus: Corpus, phi: NDArray[np.float64], seed: int) -> float:
    """The seed's out-of-sample NMI (φ fixed, five Gibbs sweeps per test document, argmax of n_dk)."""
    rng = _prng(seed)
    ndk = fold_in_gibbs(TokenDocs(corpus.test_ptr, corpus.test_toks), np.ascontiguousarray(phi), 0.1, 5, rng)
    return float(normalized_mutual_info_score(corpus.y_test, ndk.argmax(axis=1)))


def _prng(seed: int) -> NDArray[np.uint64]:
    s = np.random.default_rng(seed).integers(1, 2**63, size=4, dtype=np.int64).astype(np.uint64)
    return s


def gibbs(
    corpus: Corpus, n_docs: int, sweeps: int, seed: int
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]:
    """Collapsed Gibbs on the first ``n_docs`` training documents: (z, φ over the full vocabulary, n_dk)."""
    toks, doc_of = corpus.tokens(0, n_docs)
    z = np.zeros(toks.size, dtype=np.int64)
    beta = PF["beta"]
    chain = new_chain(n_docs, corpus.W, K)
    gibbs_chain(Tokens(toks, doc_of, z), chain, st.Prior(PF["alpha"], beta, corpus.W * beta), sweeps, True, _prng(seed))
    phi = (chain.nwk.T + beta) / (chain.nk[:, None] + corpus.W * beta)
    return z, phi, chain.ndk


def _checkpoints(start: int, n: int, m: int) -> list[int]:
    return sorted({int(x) for x in np.linspace(start, n, m + 1)[1:]} | {n})


def run_filter(
    corpus: Corpus, seed: int, checkpoints: int, init: tuple[int, NDArray[np.int64]] | None = None, **params: Any
) -> dict[str, Any]:
    """One particle-filter run over the training stream; NMI at the checkpoints (documents seen)."""
    n = len(corpus.train)
    model = ParticleFilterLDA(K, corpus.W, seed, **{**PF, **params})
    start = 0
    if init is not None:
        start, z = init
        model.initialize_from(corpus.batch(0, start), z)
    points, scores = [], []
    t0 = time.perf_counter()
    filt_time = 0.0
    pos = start
    for c in _checkpoints(start, n, checkpoints):
        t = time.perf_counter()
        model.partial_fit(corpus.batch(pos, c))
        filt_time += time.perf_counter() - t
        pos = c
        points.append(c)
        scores.append(nmi(corpus, model.topic_word(), seed + 10_000))
    d = model.diagnostics()
    return {
        "docs": points,
        "nmi": scores,
        "final": scores[-1],
        "seconds": time.perf_counter() - t0,
        "filter_seconds": filt_time,
        "tokens": int(model.particles_.ctr[st.TOKENS]),
        "resamples": d["resamples"],
        "collapses": d["collapses"],
        "state_mb": d["state_mb"],
    }


# ------------------------------------------------------------------------------------------ experiments
def _fixed_start(corpus: Corpus) -> tuple[int, NDArray[np.int64], float]:
    """Experiments a and d start from one fixed initial model: 200 Gibbs sweeps on the first 10 % (chain 0)."""
    n0 = max(1, len(corpus.train) // 10)
    z, phi, _ = gibbs(corpus, n0, 200, seed=0)
    return n0, z, nmi(corpus, phi, 1)


def _rejuvenation_modes(corpus: Corpus) -> dict[str, dict[str, Any]]:
    hist = {"history_tokens": corpus.n_train_tokens + 1, "history_docs": len(corpus.train) + 1}
    return {"none": {}, "reservoir": {"reservoir_size": 1000}, "history": hist}


def exp_a(corpus: Corpus, runs: range, checkpoints: int) -> dict[str, Any]:
    n0, z, init_nmi = _fixed_start(corpus)
    out: dict[str, Any] = {"init_nmi": init_nmi, "init_docs": n0}
    for mode, extra in _rejuvenation_modes(corpus).items():
        out[mode] = [
            run_filter(corpus, r, checkpoints, init=(n0, z.copy()), rejuvenation=mode, init_docs=0, **extra)
            for r in runs
        ]
        _log(corpus, f"a/{mode}", out[mode])
    return out


def exp_d(corpus: Corpus, runs: range, checkpoints: int, lengths: list[int]) -> dict[str, Any]:
    """Experiment a's reservoir and whole-history arms with longer rejuvenation sequences r (a is r = 30): the
    seed's closing remark that sampling the history more often than new tokens should help."""
    n0, z, _ = _fixed_start(corpus)
    out: dict[str, Any] = {}
    for r_len in lengths:
        for mode in ("reservoir", "history"):
            extra = _rejuvenation_modes(corpus)[mode]
            key = f"{mode} r={r_len}"
            out[key] = [
                run_filter(
                    corpus,
                    r,
                    checkpoints,
                    init=(n0, z.copy()),
                    rejuvenation=mode,
                    init_docs=0,
                    n_rejuvenate=r_len,
                    **extra,
                )
                for r in runs
            ]
            _log(corpus, f"d/{key}", out[key])
    return out


def exp_b(corpus: Corpus, runs: range, checkpoints: int, sweeps: int, sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n0 in sizes:
        out[str(n0)] = [
            run_filter(
                corpus,
                r,
                checkpoints,
                rejuvenation="reservoir",
                reservoir_size=1000,
                init_docs=n0,
                init_max_tokens=max(corpus.n_train_tokens, 1),
                init_sweeps=sweeps,
                init_restarts=1,
            )
            for r in runs
        ]
        _log(corpus, f"b/{n0}", out[str(n0)])
    return out


def exp_batch(corpus: Corpus, runs: range, sweeps: int) -> list[dict[str, Any]]:
    """Batch collapsed Gibbs on the whole training set (``sweeps`` sweeps, chain seed = run): the reference."""
    batch = []
    for r in runs:
        t = time.perf_counter()
        _, phi, _ = gibbs(corpus, len(corpus.train), sweeps, seed=r)
        batch.append({"final": nmi(corpus, phi, r + 10_000), "seconds": time.perf_counter() - t})
    _log(corpus, "batch", batch)
    return batch


def exp_c(corpus: Corpus, runs: range, checkpoints: int) -> dict[str, Any]:
    n0 = max(1, len(corpus.train) // 10)
    common: dict[str, Any] = {"rejuvenation": "reservoir", "reservoir_size": 1000}
    perp = [
        run_filter(
            corpus,
            r,
            checkpoints,
            init_docs=n0,
            init_max_tokens=corpus.n_train_tokens,
            init_sweeps=200,
            init_restarts=20,
            init_holdout=0.2,
            **common,
        )
        for r in runs
    ]
    _log(corpus, "c/perplexity", perp)
    by_nmi = []
    for r in runs:
        best, best_z = -1.0, None
        for c in range(20):
            z, _, ndk = gibbs(corpus, n0, 200, seed=1000 * (r + 1) + c)
            s = float(normalized_mutual_info_score(corpus.y_train[:n0], ndk.argmax(axis=1)))
            if s > best:
                best, best_z = s, z
        assert best_z is not None
        by_nmi.append(run_filter(corpus, r, checkpoints, init=(n0, best_z), init_docs=0, **common))
    _log(corpus, "c/nmi", by_nmi)
    return {"perplexity": perp, "nmi": by_nmi, "init_docs": n0}


SWEEP_POINTS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)


def exp_ref(corpus: Corpus, runs: range, sizes: list[int]) -> dict[str, Any]:
    """Reference points for the goal (see the module docstring, ``ref``)."""
    toks, doc_of = corpus.tokens(0, len(corpus.train))
    beta = PF["beta"]
    curves = []
    for r in runs:  # one chain per run, continued from checkpoint to checkpoint (same draws as ``batch``)
        rng, z, done, scores = _prng(r), np.zeros(toks.size, dtype=np.int64), 0, []
        prior = st.Prior(PF["alpha"], beta, corpus.W * beta)
        for s in SWEEP_POINTS:
            chain = new_chain(len(corpus.train), corpus.W, K)
            gibbs_chain(Tokens(toks, doc_of, z), chain, prior, s - done, done == 0, rng)
            done = s
            scores.append(nmi(corpus, (chain.nwk.T + beta) / (chain.nk[:, None] + prior.wbeta), r + 10_000))
        curves.append({"sweeps": list(SWEEP_POINTS), "nmi": scores, "final": scores[-1]})
    _log(corpus, "ref/batch-curve", curves)
    subsample: dict[str, Any] = {}
    for n0 in sizes:
        rows = [{"final": nmi(corpus, gibbs(corpus, n0, SWEEP_POINTS[-1], seed=r)[1], r + 10_000)} for r in runs]
        subsample[str(n0)] = rows
        _log(corpus, f"ref/gibbs-first-{n0}", rows)
    scvb0 = []
    for r in runs:
        model = SCVB0(K, corpus.W, r)
        for lo in range(0, len(corpus.train), 100):
            model.partial_fit(corpus.batch(lo, min(len(corpus.train), lo + 100)))
        scvb0.append({"final": nmi(corpus, model.topic_word(), r + 10_000)})
    _log(corpus, "ref/scvb0", scvb0)
    return {"batch_curve": curves, "gibbs_first": subsample, "scvb0": scvb0}


def exp_tp(
    dataset: str, particles: int, topics: int, max_words: int, max_docs: int, pool_factor: float | None
) -> dict[str, Any]:
    """Throughput (filtered tokens per second, Gibbs initialisation excluded) and memory: the resident set
    before the model exists (interpreter + corpus), and the peak from then on (the kernel's high-water mark is
    reset after loading the corpus, so a loading transient cannot hide the filter's own peak)."""
    global K
    corpus = Corpus(dataset, max_words=max_words)
    gc.collect()
    rss_before = vm_mb(os.getpid(), "VmRSS")
    reset_peak()
    K = topics
    n = min(max_docs, len(corpus.train))
    extra: dict[str, Any] = {} if pool_factor is None else {"pool_factor": pool_factor}
    model = ParticleFilterLDA(
        topics,
        max(corpus.W, 2),
        0,
        n_particles=particles,
        init_docs=100,
        init_sweeps=20,
        init_restarts=1,
        refine_docs=0,
        **extra,
    )
    model.partial_fit(corpus.batch(0, 100))
    tok0 = int(model.particles_.ctr[st.TOKENS])
    t = time.perf_counter()
    for lo in range(100, n, 200):
        model.partial_fit(corpus.batch(lo, min(n, lo + 200)))
    secs = time.perf_counter() - t
    toks = int(model.particles_.ctr[st.TOKENS]) - tok0
    d = model.diagnostics()
    peak = vm_mb(os.getpid(), "VmHWM")
    return {
        "dataset": dataset,
        "particles": particles,
        "topics": topics,
        "W": corpus.W,
        "pool_factor": model.pool_factor,
        "docs": n,
        "tokens": toks,
        "seconds": secs,
        "tokens_per_second": toks / secs,
        "state_mb": model.memory_bytes() / 1e6,
        "rss_before_model_mb": rss_before,
        "peak_rss_mb": peak,
        "filter_peak_mb": peak - rss_before,
        "resamples": d["resamples"],
        "collapses": d["collapses"],
        "pool_peak_fill": d["pool_peak_fill"],
        "resample_copied_mb": d["resample_copied_mb"],
    }


def _log(corpus: Corpus, tag: str, rows: list[dict[str, Any]]) -> None:
    f = np.array([r["final"] for r in rows])
    print(f"{tag}: NMI {f.mean():.3f} ± {f.std(ddof=1) if f.size > 1 else 0:.3f} (n={f.size})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exp", nargs="*", default=[], choices=["a", "b", "c", "d", "batch", "ref", "tp"])
    ap.add_argument("--datasets", nargs="*", default=["diff3", "rel3", "sim3"])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--first-run", type=int, default=0, help="seed of the first run (to add runs to a result)")
    ap.add_argument("--checkpoints", type=int, default=8)
    ap.add_argument("--sweeps", type=int, default=2000, help="Gibbs sweeps of experiment b (seed: 2000)")
    ap.add_argument("--init-sizes", type=int, nargs="+", default=[0, 30, 100, 300], help="experiment b")
    ap.add_argument("--rejuv-lengths", type=int, nargs="+", default=[300, 3000], help="experiment d: r")
    ap.add_argument("--merge", type=Path, nargs="*", default=[], help="--plot: also read these result files")
    ap.add_argument("--results", type=Path, default=Path("/tmp/pf_results.json"))
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("docs/experiments"))
    ap.add_argument("--tp-dataset", default="all", help="--exp tp: the 20 Newsgroups file (all, diff3, …)")
    ap.add_argument("--particles", type=int, default=100)
    ap.add_argument("--pool-factor", type=float, default=None, help="--exp tp (default: the kernel's)")
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--max-words", type=int, default=65536)
    ap.add_argument("--max-docs", type=int, default=3000)
    args = ap.parse_args()
    res: dict[str, Any] = json.loads(args.results.read_text()) if args.results.exists() else {}
    for extra in args.merge:  # dataset -> experiment -> setting; later files add settings
        for name, entry in json.loads(extra.read_text()).items():
            mine = res.setdefault(name, {})
            for key, val in entry.items():
                if key in ("a", "b", "c", "d") and isinstance(mine.get(key), dict):
                    for setting, rows in val.items():  # runs of the same setting are appended
                        old = mine[key].get(setting)
                        mine[key][setting] = old + rows if isinstance(old, list) and isinstance(rows, list) else rows
                elif key == "batch" and isinstance(mine.get(key), list):
                    mine[key] = mine[key] + val
                else:
                    mine[key] = val
    for exp in args.exp:
        if exp == "tp":
            res.setdefault("throughput", []).append(
                exp_tp(args.tp_dataset, args.particles, args.topics, args.max_words, args.max_docs, args.pool_factor)
            )
            print(json.dumps(res["throughput"][-1]), flush=True)
            args.results.write_text(json.dumps(res))
            continue
        runs = range(args.first_run, args.first_run + args.runs)
        for name in args.datasets:
            corpus = Corpus(name)
            entry = res.setdefault(name, {})
            entry.update({"n_train_docs": len(corpus.train), "W": corpus.W, "tokens": corpus.n_train_tokens})
            print(f"{name}: {len(corpus.train)} docs, {corpus.n_train_tokens} tokens, W = {corpus.W}", flush=True)
            if exp == "a":
                entry["a"] = exp_a(corpus, runs, args.checkpoints)
            elif exp == "b":
                entry.setdefault("b", {}).update(exp_b(corpus, runs, args.checkpoints, args.sweeps, args.init_sizes))
            elif exp == "batch":
                entry["batch"] = exp_batch(corpus, runs, args.sweeps)
            elif exp == "d":
                entry.setdefault("d", {}).update(exp_d(corpus, runs, args.checkpoints, args.rejuv_lengths))
            elif exp == "ref":
                entry["ref"] = exp_ref(corpus, runs, args.init_sizes)
            else:
                entry["c"] = exp_c(corpus, runs, args.checkpoints)
            entry.setdefault("runs", {})[exp] = [runs.start, runs.stop]
            args.results.write_text(json.dumps(res))
    if args.plot:
        args.out.mkdir(parents=True, exist_ok=True)
        report(res, args.out)


if __name__ == "__main__":
    main()
