"""End-to-end benchmark of the service through a real (local) broker and Redis, measured from outside.

Everything is judged by what goes in and comes out, so the same script measures any version of the code
(``--code DIR`` runs the learner and replicas from another checkout, e.g. a ``git worktree`` of an older commit):

1. **backlog**: ``--backlog`` articles (a corpus cycled with fresh ids) are in the input topic before the learner
   starts; articles/s from its first to its last consumed article, RSS at a quarter of the stream and at the end,
   time per stage (the learner's own ``topicstream_batch_duration_seconds``), snapshot duration;
2. **steady**: a producer sends at each of ``--rates`` articles/s for the matching ``--steady-seconds`` (one value:
   the same for every rate), snapshots every ``--snapshot-every-s`` (5 s); a
   reader measures consume→publish latency per article (time the output arrived − time the input was sent);
   then the same for ``benchmarks/passthrough.py``, which answers every article at once without learning: the
   floor that the broker, the clients and the batching set on this machine (``--no-floor`` skips it);
3. **replicas**: one replica process over a ``--replica-articles`` backlog, then two replicas (one partition each);
   articles/s of inference.

    python -m benchmarks.bench_service [--corpus PATH] [--backlog 50000] [--code DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from service.dev.localstack import LocalStack, free_port
from service.kafka import ensure_topics
from service.settings import load_settings

from ._proc import vm_mb

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "bbc.jsonl.gz"
STAGES = ("decode", "tokenize", "kernel", "publish", "commit", "snapshot")
#: Saved runs (``--save LABEL``); the README's service performance table is rendered from it.
RESULTS = ROOT / "docs" / "service-benchmark.json"


def corpus(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    return [d for d in docs if (d.get("text") or "").strip()]


def articles(docs: list[dict], n: int, tag: str) -> Iterator[tuple[str, bytes]]:
    for i in range(n):
        d = dict(docs[i % len(docs)])
        d["id"] = f"{tag}-{i}"
        yield d["id"], json.dumps(d).encode()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
            out[key] = s.value
    return out


def consumed(port: int) -> float:
    try:
        return scrape(port).get("topicstream_articles_consumed_total", 0.0)
    except OSError:
        return 0.0


class Stack:
    """A local broker and Redis, and a way to start service processes on them."""

    def __init__(
        self,
        stack: LocalStack,
        code: Path,
        topics: int,
        vocab: int,
        fetch_wait_ms: int | None,
        snapshot_every_s: float = 5.0,
    ) -> None:
        self.stack = stack
        self.snapshot_every_s = snapshot_every_s
        self.code = code
        # Tansu holds a fetch that finds no new data for the whole fetch.wait.max.ms (Kafka answers as soon as data
        # arrives), so every hop of a caught-up stream costs up to that wait; --fetch-wait-ms sets it on the
        # service's consumers (default: TOPICSTREAM_FETCH_WAIT_MS's). This script's own reader asks for 10 ms, so
        # that the instrument adds as little as it can.
        self.reader_config = {"fetch.wait.max.ms": 10}
        self.base = {
            **os.environ,
            "PYTHONPATH": str(code),
            "TOPICSTREAM_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
            "TOPICSTREAM_REDIS_URL": stack.redis_url,
            "TOPICSTREAM_TOPICS": str(topics),
            "TOPICSTREAM_VOCAB_SIZE": str(vocab),
            "TOPICSTREAM_MAX_POLL_INTERVAL_MS": "10000",
            "TOPICSTREAM_SESSION_TIMEOUT_MS": "10000",
            "TOPICSTREAM_LOG_LEVEL": "WARNING",
            "NUMBA_NUM_THREADS": "1",
        }
        if fetch_wait_ms is not None:
            self.base["TOPICSTREAM_KAFKA_CONFIG"] = json.dumps({"fetch.wait.max.ms": str(fetch_wait_ms)})

    def settings(self, tag: str, partitions: int) -> dict[str, str]:
        env = {
            "TOPICSTREAM_INPUT_TOPIC": f"in-{tag}",
            "TOPICSTREAM_OUTPUT_TOPIC": f"out-{tag}",
            "TOPICSTREAM_DLQ_TOPIC": f"dlq-{tag}",
            "TOPICSTREAM_REDIS_PREFIX": f"bench-{tag}",
        }
        s = load_settings(
            kafka_bootstrap=self.stack.kafka_bootstrap,
            input_topic=env["TOPICSTREAM_INPUT_TOPIC"],
            output_topic=env["TOPICSTREAM_OUTPUT_TOPIC"],
            dlq_topic=env["TOPICSTREAM_DLQ_TOPIC"],
        )
        ensure_topics(s, {s.input_topic: partitions, s.output_topic: partitions, s.dlq_topic: 1})
        return env

    def start(self, command: str, env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
        full = {**self.base, **env, "TOPICSTREAM_METRICS_PORT": str(port)}
        return subprocess.Popen([sys.executable, "-m", "service", command], env=full, cwd=self.code)


def produce_all(bootstrap: str, topic: str, records: Iterator[tuple[str, bytes]]) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 200_000})
    n = 0
    for key, value in records:
        while True:
            try:
                p.produce(topic, value=value, key=key)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
    p.flush(120)
    return n


def wait_consumed(
    proc: subprocess.Popen[bytes], port: int, n: float, timeout: float, rss: list[float] | None = None
) -> tuple[float, float, float]:
    """Poll the process's consumed counter until it reaches ``n``; (first time seen > 0, its value, end time).
    ``rss`` collects the process's resident memory (MB) at every poll."""
    first_t, first_n = None, 0.0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process exited with {proc.returncode}")
        c = consumed(port)
        now = time.perf_counter()
        if rss is not None:
            rss.append(vm_mb(proc.pid, "VmRSS"))
        if c and first_t is None:
            first_t, first_n = now, c
        if c >= n:
            return first_t or now, first_n, now
        time.sleep(0.2)
    raise SystemExit(f"only {consumed(port):.0f} of {n:.0f} consumed after {timeout:.0f}s")


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backlog(st: Stack, docs: list[dict], n: int) -> dict[str, float]:
    env = st.settings("backlog", 3)
    produce_all(st.stack.kafka_bootstrap, env["TOPICSTREAM_INPUT_TOPIC"], articles(docs, n, "b"))
    port = free_port()
    learner = st.start("run", {**env, "TOPICSTREAM_SNAPSHOT_EVERY_S": str(st.snapshot_every_s)}, port)  # else defaults
    early: list[float] = []
    late: list[float] = []
    try:
        first_t, first_n, _ = wait_consumed(learner, port, n // 4, 600)
        rss_quarter = vm_mb(learner.pid, "VmRSS")
        broker = st.stack.process("broker").pid
        cpu0, broker0 = cpu_s(learner.pid), cpu_s(broker)
        wait_consumed(learner, port, n // 2, 900, early)
        _, _, end_t = wait_consumed(learner, port, n, 900, late)
        rss_end = vm_mb(learner.pid, "VmRSS")
        cpu1, broker1 = cpu_s(learner.pid), cpu_s(broker)
        m = scrape(port)
    finally:
        stop(learner)
    stages = {s: m.get(f"topicstream_batch_duration_seconds_sum{{stage={s}}}", 0.0) for s in STAGES}
    snaps = m.get("topicstream_snapshot_duration_seconds_count", 0.0)
    return {
        "articles_per_s": (n - first_n) / (end_t - first_t),
        "rss_quarter_mb": rss_quarter,
        "rss_end_mb": rss_end,
        "rss_peak_second_quarter_mb": max(early, default=rss_quarter),
        "rss_peak_second_half_mb": max(late, default=rss_end),
        "learner_cores": (cpu1 - cpu0) / (end_t - first_t) if end_t > first_t else float("nan"),
        "broker_cores": (broker1 - broker0) / (end_t - first_t) if end_t > first_t else float("nan"),
        "snapshots": snaps,
        "snapshot_mean_s": m.get("topicstream_snapshot_duration_seconds_sum", 0.0) / max(snaps, 1),
        "snapshot_mb": m.get("topicstream_snapshot_size_bytes", 0.0) / 1e6,
        **{f"stage_{k}_s": v for k, v in stages.items()},
    }


def steady(st: Stack, docs: list[dict], rate: float, seconds: float, peer: str = "learner") -> dict[str, Any]:
    """Send ``rate`` articles/s for ``seconds`` to ``peer`` (the learner, or the passthrough floor) and time every
    answer. Snapshot figures come from the learner's own metrics (``None`` for the passthrough)."""
    tag = f"{peer}{int(rate)}"
    env = st.settings(tag, 3)
    port = free_port()
    if peer == "learner":
        proc = st.start("run", {**env, "TOPICSTREAM_SNAPSHOT_EVERY_S": str(st.snapshot_every_s)}, port)
    else:
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.passthrough"], env={**st.base, **env}, cwd=ROOT)
    sent: dict[str, float] = {}
    answered: set[str] = set()
    latencies: list[float] = []  # input sent → output read by this script
    published: list[float] = []  # input sent → output created by the service (its producer's timestamp)
    reader = Consumer(
        {
            "bootstrap.servers": st.stack.kafka_bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            **st.reader_config,
        }
    )
    out_topic = env["TOPICSTREAM_OUTPUT_TOPIC"]
    parts = reader.list_topics(out_topic, timeout=10).topics[out_topic].partitions
    reader.assign([TopicPartition(out_topic, p, OFFSET_END) for p in parts])
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            for msg in reader.consume(1000, 0.005):
                if msg.error() is None:
                    key = (msg.key() or b"").decode()
                    answered.add(key)
                    t = sent.get(key)
                    if t is not None:
                        latencies.append(time.time() - t)
                        published.append(msg.timestamp()[1] / 1000 - t)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        # Warm up: the peer is ready once it has answered the first articles.
        warm = list(articles(docs, 10, f"{tag}w"))
        produce_all(st.stack.kafka_bootstrap, env["TOPICSTREAM_INPUT_TOPIC"], iter(warm))
        deadline = time.monotonic() + 300
        while not answered.issuperset(k for k, _ in warm):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{peer} did not answer its warm-up articles (exit code {proc.poll()})")
            time.sleep(0.1)
        # librdkafka's default linger (5 ms), as a news producer would have it. With 1 ms every article was a
        # request of its own, which cost the local broker a third more CPU and tripled the floor's p99.
        p = Producer({"bootstrap.servers": st.stack.kafka_bootstrap, "linger.ms": 5})
        broker = st.stack.process("broker").pid
        cpu0, broker0 = cpu_s(proc.pid), cpu_s(broker)
        start = time.perf_counter()
        for i, (key, value) in enumerate(articles(docs, int(rate * seconds), tag)):
            ahead = i / rate - (time.perf_counter() - start)
            if ahead > 0:
                time.sleep(ahead)
            sent[key] = time.time()
            p.produce(env["TOPICSTREAM_INPUT_TOPIC"], value=value, key=key)
            p.poll(0)
        cpu1, broker1 = cpu_s(proc.pid), cpu_s(broker)
        broker_rss = vm_mb(broker, "VmRSS")
        p.flush(60)
        deadline = time.monotonic() + 30
        while len(latencies) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.2)
        m = scrape(port) if peer == "learner" else {}
    finally:
        done.set()
        stop(proc)
    lat = np.array(latencies)
    pub = np.array(published)
    return {
        "published_p50_ms": float(np.percentile(pub, 50) * 1000),
        "published_p99_ms": float(np.percentile(pub, 99) * 1000),
        "sent": float(len(sent)),
        "answered": float(len(lat)),
        "p50_ms": float(np.percentile(lat, 50) * 1000),
        "p95_ms": float(np.percentile(lat, 95) * 1000),
        "p99_ms": float(np.percentile(lat, 99) * 1000),
        "max_ms": float(lat.max() * 1000),
        "snapshot_mean_s": m["topicstream_snapshot_duration_seconds_sum"]
        / max(m.get("topicstream_snapshot_duration_seconds_count", 0.0), 1)
        if "topicstream_snapshot_duration_seconds_sum" in m
        else None,
        # What a snapshot held the batch loop up for (the stage "snapshot" of the learner's batch timings; None
        # for code that does not time it: before the pipelined worker, snapshots were written inside the loop).
        "stall_mean_ms": 1000
        * m["topicstream_batch_duration_seconds_sum{stage=snapshot}"]
        / m["topicstream_batch_duration_seconds_count{stage=snapshot}"]
        if m.get("topicstream_batch_duration_seconds_count{stage=snapshot}")
        else None,
        **{f"stage_{k}_s": m.get(f"topicstream_batch_duration_seconds_sum{{stage={k}}}", 0.0) for k in STAGES},
        "batches": m.get("topicstream_batches_total", 0.0),
        f"{peer}_cores": (cpu1 - cpu0) / seconds,
        "broker_cores": (broker1 - broker0) / seconds,
        "broker_rss_mb": broker_rss,
    }


def replicas(st: Stack, docs: list[dict], n: int) -> dict[str, float]:
    env = st.settings("replicas", 2)
    produce_all(st.stack.kafka_bootstrap, env["TOPICSTREAM_INPUT_TOPIC"], articles(docs, n, "r"))
    port = free_port()
    learner = st.start("run", {**env, "TOPICSTREAM_LEARNER_PUBLISH": "false"}, port)
    try:
        wait_consumed(learner, port, n, 900)
    finally:
        stop(learner)  # leaves its final snapshot
    out: dict[str, float] = {}
    for count in (1, 2):
        group = {**env, "TOPICSTREAM_REPLICA_GROUP_ID": f"replicas-{count}-{uuid.uuid4().hex[:6]}"}
        ports = [free_port() for _ in range(count)]
        procs = [st.start("replica", group, p) for p in ports]
        try:
            # The window opens when every replica has consumed something (all have joined the group and been
            # given a partition) and closes at 90 % of the backlog (before the first partition runs dry).
            t0 = time.perf_counter()
            first = None
            cpu0 = 0.0
            while True:
                counts = [consumed(p) for p in ports]
                total, now = sum(counts), time.perf_counter()
                if first is None and all(counts):
                    first = (now, total)
                    cpu0 = sum(cpu_s(p.pid) for p in procs)
                if total >= 0.9 * n or now - t0 > 900:
                    break
                time.sleep(0.1)
            if first is None:
                raise SystemExit(f"not every one of {count} replicas consumed before 90 % of the backlog was done")
            out[f"replicas_{count}_articles_per_s"] = (total - first[1]) / (now - first[0])
            out[f"replicas_{count}_cores"] = (sum(cpu_s(p.pid) for p in procs) - cpu0) / (now - first[0])
        finally:
            stop(*procs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--code", type=Path, default=ROOT, help="checkout whose learner and replica to run")
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=65_536)
    ap.add_argument("--backlog", type=int, default=50_000)
    ap.add_argument("--rates", type=float, nargs="*", default=[1000.0, 3000.0])
    ap.add_argument("--steady-seconds", type=float, nargs="*", default=[120.0, 60.0])
    ap.add_argument("--replica-articles", type=int, default=60_000)
    ap.add_argument("--skip", nargs="*", default=[], choices=["backlog", "steady", "replicas"])
    ap.add_argument("--fetch-wait-ms", type=int, default=None, help="fetch.wait.max.ms of every consumer")
    ap.add_argument("--snapshot-every-s", type=float, default=5.0, help="the learner's snapshot interval")
    ap.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the passthrough peer (benchmarks/passthrough.py) that measures the broker's share of the latency",
    )
    ap.add_argument(
        "--save",
        metavar="LABEL",
        help=f"store the numbers under LABEL (e.g. 'before', 'after') in {RESULTS.relative_to(ROOT)}, from which "
        "`make docs` renders the README's service performance table",
    )
    args = ap.parse_args()

    docs = corpus(args.corpus)
    head = subprocess.run(["git", "-C", str(args.code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    load_before = os.getloadavg()[0]
    print(f"code {args.code} at {head.stdout.strip()}; K={args.topics} W={args.vocab}; corpus {args.corpus.name}")
    print(f"load average before: {load_before:.2f} on {os.cpu_count()} cores")
    run: dict[str, Any] = {
        "code": head.stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": os.cpu_count(),
        "load_before": load_before,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("save", "code")},
    }

    def on_fresh_stack(phase: Callable[..., dict[str, Any]], *phase_args: Any) -> dict[str, Any]:
        """Each phase on its own broker and Redis: the local broker keeps every message in memory and its cost
        grows with what it holds, which would charge one phase's data to the next."""
        with LocalStack() as local:
            code = args.code.resolve()
            stack = Stack(local, code, args.topics, args.vocab, args.fetch_wait_ms, args.snapshot_every_s)
            return phase(stack, *phase_args)

    if "backlog" not in args.skip:
        r = run["backlog"] = on_fresh_stack(backlog, docs, args.backlog)
        busy = sum(r[f"stage_{s}_s"] for s in STAGES) or 1.0
        print(
            f"backlog {args.backlog:,}: {r['articles_per_s']:,.0f} articles/s; RSS {r['rss_quarter_mb']:.0f} MB "
            f"at a quarter, {r['rss_end_mb']:.0f} MB at the end ({r['rss_end_mb'] / r['rss_quarter_mb']:.3f}); "
            f"{r['snapshots']:.0f} snapshots of {r['snapshot_mb']:.0f} MB, {r['snapshot_mean_s']:.2f} s each"
        )
        print(
            f"  RSS peak in the second quarter {r['rss_peak_second_quarter_mb']:.0f} MB, in the second half "
            f"{r['rss_peak_second_half_mb']:.0f} MB; the learner used {r['learner_cores']:.2f} cores, the "
            f"broker {r['broker_cores']:.2f}"
        )
        print("  stage time: " + ", ".join(f"{s} {r[f'stage_{s}_s'] / busy:.0%}" for s in STAGES))
    if "steady" not in args.skip:
        durations = args.steady_seconds * len(args.rates) if len(args.steady_seconds) == 1 else args.steady_seconds
        if len(durations) != len(args.rates):
            raise SystemExit("--steady-seconds takes one value, or one per rate")
        for rate, seconds in zip(args.rates, durations, strict=True):
            r = run[f"steady_{rate:.0f}"] = on_fresh_stack(steady, docs, rate, seconds)
            r["seconds"] = seconds
            print(
                f"steady {rate:,.0f}/s for {seconds:.0f} s: answered {r['answered']:.0f}/"
                f"{r['sent']:.0f}; latency p50 {r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms, "
                f"p99 {r['p99_ms']:.0f} ms, max {r['max_ms']:.0f} ms (to the service's publish: p50 "
                f"{r['published_p50_ms']:.0f} ms, p99 {r['published_p99_ms']:.0f} ms); snapshots "
                f"{r['snapshot_mean_s']:.2f} s, each holding the batch loop up for {r['stall_mean_ms'] or 0:.0f} ms; "
                f"the learner used {r['learner_cores']:.2f} cores, the broker {r['broker_cores']:.2f} "
                f"(resident {r['broker_rss_mb']:,.0f} MB)"
            )
            print(
                f"  {r['batches']:,.0f} batches; learner time by stage: "
                + ", ".join(f"{k} {r[f'stage_{k}_s']:.1f} s" for k in STAGES)
            )
            if args.floor:
                f = run[f"floor_{rate:.0f}"] = on_fresh_stack(steady, docs, rate, seconds, "passthrough")
                f["seconds"] = seconds
                print(
                    f"  floor (benchmarks.passthrough: same broker, clients and batching, no learning) at "
                    f"{rate:,.0f}/s: p50 {f['p50_ms']:.0f} ms, p95 {f['p95_ms']:.0f} ms, p99 {f['p99_ms']:.0f} ms, "
                    f"max {f['max_ms']:.0f} ms; it used {f['passthrough_cores']:.2f} cores, the broker "
                    f"{f['broker_cores']:.2f}; the learner's own share of p50 / p99: "
                    f"{r['p50_ms'] - f['p50_ms']:.0f} / {r['p99_ms'] - f['p99_ms']:.0f} ms"
                )
    if "replicas" not in args.skip:
        r = run["replicas"] = on_fresh_stack(replicas, docs, args.replica_articles)
        one, two = r["replicas_1_articles_per_s"], r["replicas_2_articles_per_s"]
        c1, c2 = r["replicas_1_cores"], r["replicas_2_cores"]
        print(
            f"replicas: one {one:,.0f} articles/s ({c1:.2f} cores, {one / c1:,.0f} per core-second), two "
            f"{two:,.0f} articles/s ({two / one:.2f}x, {c2:.2f} cores, {two / c2:,.0f} per core-second)"
        )
    run["load_after"] = os.getloadavg()[0]
    print(f"load average after: {run['load_after']:.2f}")
    if args.save:
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        saved[args.save] = run
        RESULTS.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
        print(f"saved as {args.save!r} in {RESULTS}; `make docs` puts it in the README")


if __name__ == "__main__":
    main()
