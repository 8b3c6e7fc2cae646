"""All benchmarks against the peers, one command: ``python -m benchmarks.run_all`` (the first step of ``make bench``).

For each corpus the documents are tokenised once (``service.text.Tokenizer``) into one fixed vocabulary and
stored as ``benchmarks/results/cache/<corpus>-v<vocabulary>-s<seed>-tr<train cap>-te<test cap>-r<recipe>.npz`` (with a
``.json`` of its description); every method then runs in its own process
(``python -m benchmarks.peers``) with every thread pool pinned to one thread, one after the other, so that
speed and peak memory are comparable. Per corpus and K:

1. the batch reference (tomotopy collapsed Gibbs, ``--gibbs-iterations`` sweeps); its training time is T_ref;
2. every method once over the training stream in minibatches of ``--batch-size`` documents (single pass);
3. every online method cycling over the training stream for T_ref seconds of training (equal time).

Records go to ``benchmarks/results/results.jsonl`` (one JSON object per run); ``docs/benchmarks.md`` and
``docs/img/*.png`` are regenerated from them (``--docs-only`` regenerates without running anything).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._corpus import CORPORA, prepare, shared_data_dir
from benchmarks.peers import FLOOR, REFERENCE

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

PINNED_THREADS = {
    name: "1"
    for name in (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMBA_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "BLIS_NUM_THREADS",
    )
}

HDP_METHODS = {"ohdp", "gensim-hdp"}


def our_kernels() -> list[str]:
    from kernels import ALGORITHMS

    return list(ALGORITHMS)


def available_peers() -> tuple[list[str], dict[str, str]]:
    """Peers whose library imports here, and why the others are missing."""
    needs = {
        "gensim-lda": "gensim",
        "gensim-hdp": "gensim",
        "sklearn-lda": "sklearn",
        "vw-lda": "vowpalwabbit",
        REFERENCE: "tomotopy",
        FLOOR: "numpy",
    }
    ok, missing = [], {}
    for name, module in needs.items():
        try:
            __import__(module)
            ok.append(name)
        except ImportError as e:
            missing[name] = f"{module} not installed ({e})"
    return ok, missing


def run_one(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one method in a fresh process (threads pinned); an error record on failure or timeout."""
    work = RESULTS / "runs"
    work.mkdir(parents=True, exist_ok=True)
    stem = f"{spec['corpus']}-K{spec['topics']}-{spec['method']}-{spec['mode']}"
    spec_path, out_path = work / f"{stem}.spec.json", work / f"{stem}.json"
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    env = {**os.environ, **PINNED_THREADS, "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "benchmarks.peers", str(spec_path), str(out_path)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        ok = proc.returncode == 0 and out_path.exists()
        error = None if ok else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    except subprocess.TimeoutExpired:
        ok, error = False, f"timed out after {timeout:.0f} s"
    wall = time.perf_counter() - t0
    if ok:
        result = json.loads(out_path.read_text())
    else:
        result = {k: spec[k] for k in ("corpus", "method", "mode", "topics", "batch_size", "seed")}
        result["error"] = error
    result["process_seconds"] = wall
    return result


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", default="bbc,20ng,reuters", help="comma-separated: " + ",".join(CORPORA))
    p.add_argument("--methods", default="all", help="comma-separated method names, or 'all'")
    p.add_argument("--topics", default="50,100", help="comma-separated K values")
    p.add_argument(
        "--corpus-topics", default="20ng=50,reuters=50", help="per-corpus K override, e.g. 20ng=50;reuters=50"
    )
    p.add_argument("--checkpoints", type=int, default=8, help="points on each log-likelihood curve")
    p.add_argument("--modes", default="single,time", help="single (one pass) and/or time (equal CPU time)")
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--vocab-size", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gibbs-iterations", type=int, default=100, help="tomotopy sweeps (sets T_ref)")
    p.add_argument("--hdp-truncation", type=int, default=150, help="T of ohdp and gensim HDP")
    p.add_argument("--max-train-docs", default="20ng=6000", help="per corpus cap, e.g. 20ng=6000,reuters=10000")
    p.add_argument("--max-test-docs", type=int, default=2000, help="random test subset per corpus")
    p.add_argument(
        "--ref-seconds",
        type=float,
        default=None,
        help="equal-time budget (CPU seconds) when the batch reference is not among --methods (else its own time)",
    )
    p.add_argument("--max-time-seconds", type=float, default=60.0, help="cap on the equal-time budget")
    p.add_argument("--curve-docs", type=int, default=500, help="test documents scored at each checkpoint")
    p.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    p.add_argument("--docs-only", action="store_true", help="regenerate docs from the existing results")
    p.add_argument("--no-docs", action="store_true", help="do not regenerate docs/benchmarks.md")
    p.add_argument("--append", action="store_true", help="keep earlier records in results.jsonl")
    args = p.parse_args(argv)

    RESULTS.mkdir(parents=True, exist_ok=True)
    results_path = RESULTS / "results.jsonl"
    if args.docs_only:
        from benchmarks._plots import write_docs

        write_docs(RESULTS, ROOT / "docs")
        return 0

    data = shared_data_dir()
    if not data.is_dir():
        print(f"corpora not found at {data} (set TOPICSTREAM_SHARED_DATA)", file=sys.stderr)
        return 2
    peers, missing = available_peers()
    kernels = our_kernels()
    everything = kernels + peers
    chosen = everything if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in everything and m not in missing]
    if unknown:
        print(f"unknown methods {unknown}; available: {everything}", file=sys.stderr)
        return 2
    skipped = {m: missing[m] for m in chosen if m in missing}
    chosen = [m for m in chosen if m in everything]
    caps = {}
    for item in filter(None, args.max_train_docs.split(",")):
        k, _, v = item.partition("=")
        caps[k.strip()] = int(v)
    topics = [int(k) for k in args.topics.split(",")]
    corpus_topics: dict[str, list[int]] = {}
    for item in filter(None, args.corpus_topics.replace(";", ",").split(",")):
        k, _, v = item.partition("=")
        corpus_topics.setdefault(k.strip(), []).append(int(v))
    modes = [m.strip() for m in args.modes.split(",")]

    meta: dict[str, Any] = {
        "command": "python -m benchmarks.run_all " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "threads_per_method": 1,
            "load_average_start": round(os.getloadavg()[0], 1),
        },
        "versions": _versions(),
        "git": _git_state(),
        "settings": vars(args),
        "skipped_methods": skipped,
        "corpora": {},
    }
    if not args.append:
        results_path.write_text("")
    started = time.perf_counter()
    for name in [c.strip() for c in args.corpora.split(",")]:
        _log(f"preparing {name}")
        path, desc = prepare(
            name, vocab_size=args.vocab_size, seed=args.seed, max_train=caps.get(name), max_test=args.max_test_docs
        )
        meta["corpora"][name] = desc
        for k_index, K in enumerate(corpus_topics.get(name, topics)):
            base = {
                "corpus": name,
                "corpus_path": str(path),
                "batch_size": args.batch_size,
                "seed": args.seed,
            }
            base.update(curve_docs=args.curve_docs, iterations=args.gibbs_iterations, checkpoints=args.checkpoints)
            t_ref = args.ref_seconds
            order = [m for m in chosen if m == REFERENCE] + [m for m in chosen if m != REFERENCE]
            for method in order:
                hdp = method in HDP_METHODS
                if hdp and k_index > 0:
                    continue  # nonparametric: one run per corpus, at the truncation
                k_eff = args.hdp_truncation if hdp else K
                for mode in modes:
                    if method in (REFERENCE, FLOOR) and mode != "single":
                        continue
                    if mode == "time" and t_ref is None:
                        continue
                    spec = {**base, "method": method, "topics": k_eff, "mode": mode}
                    if mode == "time":
                        spec["seconds"] = t_ref
                    _log(f"{name} K={k_eff} {method} {mode}" + (f" ({t_ref:.1f} s)" if mode == "time" else ""))
                    res = run_one(spec, args.timeout)
                    res["k_block"] = K
                    if method == REFERENCE and "error" not in res:
                        t_ref = min(res["train_seconds"], args.max_time_seconds)
                    _log(
                        "  -> "
                        + (
                            f"error: {res['error']}"
                            if "error" in res
                            else f"ll {res['heldout_loglik_per_word']:.3f}  "
                            f"{res['tokens_per_second']:,.0f} tok/s  {res['train_seconds']:.1f} s  "
                            f"rss {res['peak_rss_mb']:.0f} MB"
                        )
                    )
                    with results_path.open("a") as f:
                        f.write(json.dumps(res) + "\n")
    meta["wall_seconds"] = time.perf_counter() - started
    meta["machine"]["load_average_end"] = round(os.getloadavg()[0], 1)
    old_meta = RESULTS / "meta.json"
    if args.append and old_meta.exists():  # a top-up run: keep the main run's description, note this one
        old = json.loads(old_meta.read_text())
        old["corpora"].update(meta["corpora"])
        old.setdefault("extra_commands", []).append(meta["command"])
        old["wall_seconds"] = old.get("wall_seconds", 0.0) + meta["wall_seconds"]
        meta = old
    old_meta.write_text(json.dumps(meta, indent=1))
    _log(f"done in {meta['wall_seconds']:.0f} s")
    if not args.no_docs:
        from benchmarks._plots import write_docs

        write_docs(RESULTS, ROOT / "docs")
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "kernels", "service", "benchmarks"], cwd=ROOT,
                               capture_output=True, text=True)  # fmt: skip
    except OSError:
        return "unknown"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("numpy", "numba", "scikit-learn", "gensim", "tomotopy", "vowpalwabbit", "topicstream"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


if __name__ == "__main__":
    sys.exit(main())
