"""The README's drift picture: the dated Reuters-21578 stream replayed in time order through the real learner.

Starts a local broker and Redis (:class:`service.dev.localstack.LocalStack`), produces the file into a fresh input
topic with one partition (the file is sorted by ``published_at``, so the topic is in time order), runs
:class:`service.learner.Learner` in this process, batch by batch, with a snapshot after every batch (each one's
summary goes to the bounded :class:`service.history.SummaryHistory`, as in the service), and writes
``topicstream report``'s page and PNG from that history.

    python -m benchmarks.reuters_drift [--topics 20] [--batch-size 200] [--png docs/img/drift_reuters.png]

The corpus stays in ``../shared/data``; only the picture is committed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import sys
import time
from pathlib import Path

import redis

from benchmarks._corpus import shared_data_dir
from service.dev.localstack import LocalStack, run_names
from service.kafka import ensure_topics
from service.learner import Learner
from service.report import load, write_report
from service.settings import load_settings
from service.source import iter_lines, produce_lines

ROOT = Path(__file__).resolve().parent.parent
CORPUS = "news_stream_reuters21578.jsonl.gz"


def article_days(path: Path) -> list[str]:
    """The ``published_at`` day (YYYY-MM-DD) of each article, in file order."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [(json.loads(line).get("published_at") or "")[:10] for line in f]


def month_ticks(days: list[str]) -> list[tuple[float, str]]:
    """(articles learned when a month starts, "Mar 1987") for each month of the stream; a month holding under 3 %
    of the articles gives its tick to the next one (their labels would overlap)."""
    ticks: list[tuple[float, str]] = []
    for i, day in enumerate(days):
        label = dt.date.fromisoformat(day[:7] + "-01").strftime("%b %Y")
        if ticks and ticks[-1][1] == label:
            continue
        if ticks and i - ticks[-1][0] < 0.03 * len(days):
            ticks.pop()
        ticks.append((float(i), label))
    return ticks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=shared_data_dir() / CORPUS)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--png", type=Path, default=ROOT / "docs" / "img" / "drift_reuters.png")
    ap.add_argument("--html", type=Path, default=Path("/tmp/drift_reuters.html"))
    ap.add_argument("--then", default="1987-04-01", help="Baseline day of the rose/faded/changed lists")
    args = ap.parse_args()
    if not args.corpus.exists():
        sys.exit(f"{args.corpus} not found (set TOPICSTREAM_SHARED_DATA to the folder holding {CORPUS})")
    days = article_days(args.corpus)

    with LocalStack() as stack:
        s = load_settings(
            kafka_bootstrap=stack.kafka_bootstrap,
            redis_url=stack.redis_url,
            **run_names("reuters"),
            topics=args.topics,
            batch_size=args.batch_size,
            snapshot_every_batches=1,
            snapshot_every_s=3600,
            vocab_size=32_768,
            learner_publish=False,
            metrics_port=0,
            max_poll_interval_ms=10_000,
            session_timeout_ms=10_000,
        )
        ensure_topics(s, {s.input_topic: 1, s.output_topic: 1, s.dlq_topic: 1})
        t0 = time.monotonic()
        produced = produce_lines(s, iter_lines(args.corpus))
        print(f"produced {produced} articles in {time.monotonic() - t0:.0f}s", file=sys.stderr)

        learner = Learner(s)  # appends each snapshot's summary to the history itself
        t0 = time.monotonic()
        learner.subscribe()
        done = 0
        try:
            while done < produced:
                done += learner.step(limit=produced - done)
                # A snapshot is taken between two batches only when the writer has finished the last one, and it
                # waits for the batch's acknowledgements: flushing (acknowledged, committed) and waiting for the
                # writer keeps one snapshot per batch, as the picture's caption says (the backlog is read at once).
                learner.flush()
                learner.writer.wait_idle(60)
        finally:
            learner.close()
        print(
            f"learned {learner.articles_learned} articles in {time.monotonic() - t0:.0f}s, {learner.version} snapshots",
            file=sys.stderr,
        )
        records, names = load(redis.Redis.from_url(s.redis_url), s.redis_prefix)
    if len(records) < 2:
        sys.exit(f"the learner left {len(records)} history records under {s.redis_prefix!r}: nothing to draw")

    then_articles = next((i for i, day in enumerate(days) if day >= args.then), len(days))
    baseline = next((i for i, r in enumerate(records) if r["articles_learned"] >= then_articles), 0)
    analysis = write_report(
        records,
        args.html,
        args.png,
        names,
        top=args.top,
        baseline=baseline,
        x="articles",
        title=f"Reuters-21578, {days[0]} to {days[-1]}, replayed in time order",
        source=f"{len(days):,} articles, K = {s.topics}, a snapshot every {s.batch_size} articles",
        top_ticks=month_ticks(days),
    )
    print(f"wrote {args.png} and {args.html} from {len(records)} history records", file=sys.stderr)
    for name in ("rose", "faded", "born", "changed"):
        for c in getattr(analysis, name):
            print(
                f"{name:8s} #{c.topic:<3d} {c.then:.3f} -> {c.now:.3f}  {' '.join(c.words_then[:6])}  ->  "
                f"{' '.join(c.words_now[:6])}"
            )


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    main()
