"""End-to-end throughput and memory of the learner through a real (local) broker and Redis.

Replays a corpus (cycled, with fresh ids) into a local Tansu broker, runs ``topicstream run`` as its own process
(K=100 by default), and reports articles/s, the time spent per stage (from the learner's own histograms), and
the learner's peak RSS (VmHWM) after 20k and after 200k articles: a learner whose memory grows with the stream
would show it here.

    python -m benchmarks.bench_service [--articles 200000] [--topics 100] [--corpus PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from service.dev.localstack import LocalStack, free_port
from service.kafka import ensure_topics
from service.settings import load_settings
from service.source import produce_lines

from ._proc import vm_mb

DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "20ng_all_train.jsonl.gz"


def corpus_lines(path: Path | None, n: int) -> Iterator[bytes]:
    """``n`` articles: the corpus cycled with unique ids, or generated articles when there is no corpus."""
    if path is None or not path.exists():
        from service.dev.generator import generate_articles

        for a in generate_articles(n, seed=0):
            yield json.dumps(a).encode()
        return
    with gzip.open(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    docs = [d for d in docs if (d.get("text") or "").strip()]
    for i in range(n):
        d = dict(docs[i % len(docs)])
        d["id"] = f"{d['id']}#{i // len(docs)}"
        yield json.dumps(d).encode()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
            out[key] = s.value
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--articles", type=int, default=200_000)
    ap.add_argument("--checkpoint", type=int, default=20_000, help="also report RSS after this many")
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--algorithm", default="scvb0")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = ap.parse_args()

    with LocalStack() as stack:
        port = free_port()
        env = {
            **os.environ,
            "TOPICSTREAM_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
            "TOPICSTREAM_REDIS_URL": stack.redis_url,
            "TOPICSTREAM_TOPICS": str(args.topics),
            "TOPICSTREAM_ALGORITHM": args.algorithm,
            "TOPICSTREAM_BATCH_SIZE": str(args.batch_size),
            # Snapshots (the learner's memory peak) well before the first checkpoint, then regularly.
            "TOPICSTREAM_SNAPSHOT_EVERY_BATCHES": str(max(1, args.checkpoint // args.batch_size // 2)),
            "TOPICSTREAM_METRICS_PORT": str(port),
            "TOPICSTREAM_MAX_POLL_INTERVAL_MS": "10000",
            "TOPICSTREAM_SESSION_TIMEOUT_MS": "10000",
            "TOPICSTREAM_LOG_LEVEL": "WARNING",
            "NUMBA_NUM_THREADS": "1",
        }
        s = load_settings(kafka_bootstrap=stack.kafka_bootstrap, redis_url=stack.redis_url)
        ensure_topics(s, {s.input_topic: 2, s.output_topic: 2, s.dlq_topic: 1})
        t0 = time.perf_counter()
        n = produce_lines(s, corpus_lines(args.corpus, args.articles))
        print(f"produced {n} articles in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

        learner = subprocess.Popen([sys.executable, "-m", "service", "run"], env=env)
        try:
            consumed, first_t, at_checkpoint = 0.0, None, None
            first_n = 0.0
            next_report = args.checkpoint
            while consumed < n:
                time.sleep(0.5)
                if learner.poll() is not None:
                    raise SystemExit(f"learner exited with {learner.returncode}")
                try:
                    m = scrape(port)
                except OSError:
                    continue
                consumed = m.get("topicstream_articles_consumed_total", 0.0)
                if consumed and first_t is None:
                    first_t, first_n = time.perf_counter(), consumed
                if at_checkpoint is None and consumed >= args.checkpoint:
                    at_checkpoint = vm_mb(learner.pid)
                if consumed >= next_report:
                    rss, hwm = vm_mb(learner.pid, "VmRSS"), vm_mb(learner.pid)
                    print(f"  {int(consumed):>8,} articles: RSS {rss:.0f} MB, peak {hwm:.0f} MB", file=sys.stderr)
                    next_report += args.checkpoint
            elapsed = time.perf_counter() - (first_t or time.perf_counter())
            end_rss = vm_mb(learner.pid)
            m = scrape(port)
        finally:
            learner.terminate()
            learner.wait(60)

    rate = (consumed - first_n) / elapsed if elapsed > 0 else float("nan")
    stages = {
        st: m.get(f"topicstream_batch_duration_seconds_sum{{stage={st}}}", 0.0)
        for st in ("decode", "tokenize", "kernel", "publish", "commit")
    }
    busy = sum(stages.values())
    tokens = m.get("topicstream_tokens_total", 0.0)
    print(f"algorithm={args.algorithm} K={args.topics} articles={int(consumed)} corpus={args.corpus.name}")
    print(f"end-to-end: {rate:,.0f} articles/s, {tokens / max(busy, 1e-9):,.0f} tokens/s of busy time")
    print("time per stage: " + ", ".join(f"{k} {v / busy:.0%}" for k, v in stages.items()))
    print(f"kernel alone: {tokens / max(stages['kernel'], 1e-9):,.0f} tokens/s")
    early = at_checkpoint if at_checkpoint is not None else float("nan")  # the stream ended before it
    print(
        f"peak RSS after {args.checkpoint:,}: {early:.0f} MB; after {int(consumed):,}: {end_rss:.0f} MB "
        f"(ratio {end_rss / early:.3f})"
    )


if __name__ == "__main__":
    main()
