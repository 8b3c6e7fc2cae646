"""The replicas' HTTP inference API (``service/api.py``) against the batch loop's own inference path, one process.

A model learned in one pass over BBC News (SCVB0, K = 50, the service's tokenizer and vocabulary, the settings'
defaults otherwise) is served by :class:`service.api.ApiServer` on a free local port, as ``topicstream replica
--api-port`` serves it. ``--clients`` threads, each with one keep-alive connection, send the held-out articles one
per request, then ``--batch`` per request. Printed for each: requests/s, articles/s and the p50/p95 time of one
request; and, in the same run, articles/s through the path the replica's batch loop takes for the same articles
(tokenize, encode, ``transform``, :func:`service.pipeline.output_records`, in batches of ``TOPICSTREAM_BATCH_SIZE``),
so the ratio is what HTTP, JSON and one-article calls cost. Client and server share the machine's cores.

    python -m benchmarks.bench_api [--corpus PATH] [--clients 4] [--requests 2000] [--batch 50]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import threading
import time
from pathlib import Path

import numpy as np

from kernels import SCVB0
from service.api import ApiServer, InferenceApi
from service.follower import Served
from service.inflight import ModelRef
from service.metrics import Metrics
from service.pipeline import TopicLabels, output_records, tokenize
from service.schemas import Article, decode_article
from service.settings import load_settings
from service.text import Tokenizer, Vocabulary

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "bbc.jsonl.gz"


def read(path: Path) -> list[bytes]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.strip().encode() for line in f if line.strip()]
    return [line for line in lines if isinstance(decode_article(line, 1_000_000), Article)]


def learn(train: list[Article], topics: int, vocab_size: int, tokenizer: Tokenizer) -> Served:
    vocab = Vocabulary(vocab_size)
    model = SCVB0(n_topics=topics, n_words=vocab_size, seed=0)
    for i in range(0, len(train), 100):
        model.partial_fit(vocab.encode(tokenize(tokenizer, train[i : i + 100])).batch)
    labels = TopicLabels(model.topic_word(), vocab.slot_words())
    return Served(model, vocab, ModelRef(labels, "scvb0", 1, topics, tuple(range(topics))), model.topic_weights(), None)


def clients(port: int, bodies: list[bytes], n_clients: int) -> tuple[float, list[float]]:
    """Send ``bodies`` from ``n_clients`` threads (one connection each); wall seconds and each request's."""
    times: list[float] = []
    lock = threading.Lock()

    def work(part: list[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        for body in part:
            t0 = time.perf_counter()
            conn.request("POST", "/v1/mixtures", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200, response.status
            mine.append(time.perf_counter() - t0)
        conn.close()
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=work, args=(bodies[i::n_clients],)) for i in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=2000, help="requests of one article")
    ap.add_argument("--batch", type=int, default=50, help="articles per request in the second run")
    args = ap.parse_args()

    s = load_settings()
    tokenizer = Tokenizer()
    lines = read(args.corpus)
    articles = [a for a in (decode_article(line, s.max_article_bytes) for line in lines) if isinstance(a, Article)]
    train, test_lines = articles[:1800], lines[1800:]
    served = learn(train, args.topics, s.vocab_size, tokenizer)
    test = articles[1800:]
    print(f"model: SCVB0 K={args.topics}, {len(train)} BBC articles learned; {len(test)} held out")

    t0 = time.perf_counter()
    for _ in range(3):
        for i in range(0, len(test), s.batch_size):
            part = test[i : i + s.batch_size]
            encoded = served.vocab.encode(tokenize(tokenizer, part), learn=False)
            theta = served.model.transform(encoded.batch)
            output_records(part, theta, encoded.batch.doc_tokens(), served.ref, s)
    loop_rate = 3 * len(test) / (time.perf_counter() - t0)
    print(f"batch loop path (batches of {s.batch_size}): {loop_rate:,.0f} articles/s")

    server = ApiServer(InferenceApi(lambda: served, tokenizer, s, Metrics("replica")), "127.0.0.1", 0, s.api_threads,
                       s.api_max_bytes)  # fmt: skip
    try:
        clients(server.port, test_lines[:50], 2)  # warm-up
        one = [test_lines[i % len(test_lines)] for i in range(args.requests)]
        many = [
            b"[" + b",".join(test_lines[(j + i) % len(test_lines)] for i in range(args.batch)) + b"]"
            for j in range(0, args.requests, args.batch)
        ]
        for name, bodies, per in (("1 article a request", one, 1), (f"{args.batch} a request", many, args.batch)):
            wall, times = clients(server.port, bodies, args.clients)
            p50, p95 = np.percentile(times, [50, 95]) * 1000
            rate = len(bodies) * per / wall
            print(
                f"HTTP, {name}, {args.clients} clients: {len(bodies) / wall:,.0f} requests/s, {rate:,.0f} articles/s "
                f"({rate / loop_rate:.2f}× the batch loop path), p50 {p50:.1f} ms, p95 {p95:.1f} ms"
            )
    finally:
        server.close()


if __name__ == "__main__":
    main()
