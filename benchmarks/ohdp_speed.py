"""Online HDP speed and quality A/B (issue 11): ``ohdp`` and gensim's ``HdpModel`` in one process, one pass.

    nice -n 19 .venv/bin/python -m benchmarks.ohdp_speed                          # defaults, + gensim
    nice -n 19 .venv/bin/python -m benchmarks.ohdp_speed --no-gensim --set '{"tol": 2e-3}' --corpus-seed 1
    nice -n 19 .venv/bin/python -m benchmarks.ohdp_speed --planted --set '{"tol": 2e-3}'
    nice -n 19 .venv/bin/python -m benchmarks.ohdp_speed --corpora 20ng --batch-size 256 --all-train   # issue 11's

Each run is one ``benchmarks.peers.run`` (the measurement of ``benchmarks/run_all.py``: minibatches of 100
(``--batch-size``), truncation 150, CPU seconds of the updates only, held-out log-likelihood, NPMI and topics used
as ``evaluation.score_model`` scores them) on the corpora ``run_all`` prepares (vocabulary 10,000, 20NG capped at
6,000 training documents unless ``--all-train``, 2,000 test documents); ``--corpus-seed`` changes the shuffle and
the split.
``--planted`` instead fits the planted-topics corpus of ``tests/test_ohdp.py`` for corpus seeds 0–4 and says
whether each fit meets that test's criteria.
"""

from __future__ import annotations

import argparse
import json
import os

_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def planted(params: dict) -> None:
    """The criteria of ``tests/test_ohdp.py::test_planted_topics_are_recovered`` (:func:`tests.synthetic.planted_fit`)
    on five planted corpora."""
    from kernels.ohdp import OnlineHDP
    from tests.synthetic import block_topics_corpus, planted_fit

    for seed in range(5):
        phi_true, docs = block_topics_corpus(seed=seed)
        m = OnlineHDP(50, 240, seed=0, window=len(docs), batch_size=100, **{"eta": 0.1, **params})
        for d0 in range(0, len(docs), 100):
            m.partial_fit(docs[d0 : d0 + 100])
        fit = planted_fit(m, phi_true)
        print(f"planted seed {seed}: {'pass' if fit.ok else 'FAIL'}  topics used {fit.topics_used}  "
              f"min matched cosine {fit.min_cosine:.3f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", default="bbc,20ng,reuters")
    ap.add_argument("--corpus-seed", type=int, default=0)
    ap.add_argument("--set", default="{}", help="ohdp settings as JSON")
    ap.add_argument("--no-gensim", action="store_true")
    ap.add_argument("--planted", action="store_true")
    ap.add_argument("--batch-size", type=int, default=100, help="documents per minibatch")
    ap.add_argument("--all-train", action="store_true", help="20NG's whole training set (11,314), not 6,000")
    args = ap.parse_args()
    params = json.loads(args.set)
    if args.planted:
        planted(params)
        return
    for name in _THREADS:
        os.environ[name] = "1"
    from benchmarks._corpus import prepare
    from benchmarks.peers import run

    caps = {} if args.all_train else {"20ng": 6000}
    for corpus in args.corpora.split(","):
        path, _ = prepare(corpus, vocab_size=10_000, seed=args.corpus_seed, max_train=caps.get(corpus), max_test=2000)
        for method in ["ohdp"] + ([] if args.no_gensim else ["gensim-hdp"]):
            spec = {"corpus": corpus, "corpus_path": str(path), "batch_size": args.batch_size, "seed": 0,
                    "method": method, "topics": 150, "mode": "single", "curve_docs": 0, "checkpoints": 1}  # fmt: skip
            if method == "ohdp":
                spec["params"] = params
            r = run(spec)
            print(f"{corpus:8s} {method:11s} tokens/s {r['tokens_per_second']:>10,.0f}  "
                  f"held-out ll {r['heldout_loglik_per_word']:.4f}  NPMI {r['npmi_coherence']:.4f}  "
                  f"topics used {r['topics_used']}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
