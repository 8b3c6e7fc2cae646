"""A small harness for fault tests on real processes: a broker and Redis of one's own, ``topicstream`` processes,
a paced producer of keyed articles, a reader of what comes out, and a judge that compares ids as sets.

Everything is judged only by what comes out of Kafka and Redis: ids in = ids out ∪ dead letters. The broker and
Redis belong to one :class:`FaultStack` (one test, or the soak script), so a test may SIGKILL, SIGSTOP or restart
them without touching anyone else's.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from service.dev.localstack import LocalStack, free_port, run_names
from service.kafka import ensure_topics
from service.pipeline import H_VERSION
from service.settings import Settings, load_settings
from service.snapshot import SnapshotStore
from tests.integration.helpers import CONNECTION_FIELDS, TEST_SETTINGS, TEST_SIZE_FIELDS, env_for

__all__ = [
    "FaultStack",
    "Feeder",
    "Proc",
    "Reader",
    "Record",
    "Verdict",
    "judge",
    "keyed_articles",
    "longest_gap",
]

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Settings passed to every process (besides the per-process ones: group, output topic, metrics port).
_PROCESS_FIELDS = (
    *CONNECTION_FIELDS,
    *TEST_SIZE_FIELDS,
    "algorithm",
    "kernel_params",  # else a soak "with the demo's settings" ran the kernel's defaults (a helper's soak)
    "topic_hygiene_every_s",
    "lease_ttl_s",
    "snapshot_every_batches",
    "snapshot_every_s",
    "snapshot_keep",
    "max_article_bytes",
)

_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def keyed_articles(n_good: int, n_bad: int, seed: int = 0) -> list[tuple[bytes, bytes]]:
    """``n_good`` generated articles and ``n_bad`` invalid messages as ``(key, value)`` records in a seeded shuffled
    order; a good article's key is its id (the output's key), a bad one's is ``bad-<i>`` (the dead letter's)."""
    from service.dev.generator import generate_articles

    records: list[tuple[bytes, bytes]] = []
    for a in generate_articles(n_good, seed=seed):
        a["id"] = f"{seed}-{a['id']}"
        records.append((a["id"].encode(), json.dumps(a).encode()))
    kinds = [b"not json", b"\xff\xfe bad utf-8", b"[1, 2]", b'{"text": "no id"}', b'{"id": "x", "text": ""}']
    records += [(f"bad-{seed}-{i}".encode(), kinds[i % len(kinds)]) for i in range(n_bad)]
    random.Random(seed).shuffle(records)
    return records


@dataclass(eq=False)
class Proc:
    """One ``topicstream`` process (``python -m service <command>``) with its log in a file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill(self) -> float:
        """SIGKILL; returns when it was sent (``time.time()``)."""
        t = time.time()
        self.signal(signal.SIGKILL)
        self.popen.wait(30)
        return t

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (finish the batch, final snapshot, commit) and wait; returns the exit code."""
        self.signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
        self.signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise AssertionError(f"{self.name} did not stop within {timeout:.0f}s after SIGTERM") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern: str, timeout: float = 60.0, after: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in the log past character ``after``; fails after ``timeout`` seconds or
        when the process exits without it."""
        rx = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.log(), after)
            if m is not None:
                return m
            if not self.alive():
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}) before /{pattern}/:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no /{pattern}/ in its log after {timeout:.0f}s:\n{self.tail()}")
            time.sleep(0.05)

    def logged_at(self, match: re.Match[str]) -> float:
        """Unix time of the log line holding ``match`` (from the line's own timestamp)."""
        text = match.string
        start = text.rfind("\n", 0, match.start()) + 1
        stamp = _LOG_TIME.match(text[start:])
        assert stamp is not None, text[start : start + 80]
        return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.log().splitlines()[-n:])

    def scrape(self, name: str, labels: str = "") -> float | None:
        """One sample from the process's /metrics, ``labels`` as exposed (``'{kind="fenced"}'``; none by default);
        None when it does not answer or has no such sample."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
        return float(m.group(1)) if m else None

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")


class FaultStack:
    """A broker and a Redis of one's own, the topics of one run, and the ``topicstream`` processes started on them
    (all stopped on :meth:`close`). The settings follow the tests' ``settings`` fixture: K = 8, W = 2048, short
    group timeouts, a 2 s lease; ``overrides`` change them."""

    def __init__(self, log_dir: Path | None = None, **overrides: Any) -> None:
        self.dir = Path(log_dir or tempfile.mkdtemp(prefix="topicstream-faults-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stack = LocalStack(log_dir=self.dir).start()
        names = run_names("articles")
        base = {"kafka_bootstrap": self.stack.kafka_bootstrap, "redis_url": self.stack.redis_url, **TEST_SETTINGS}
        self.settings: Settings = load_settings(**{**base, **names, **overrides})
        self.replica_topic = names["output_topic"] + "-replica"
        s = self.settings
        ensure_topics(s, {s.input_topic: 2, s.output_topic: 1, s.dlq_topic: 1, self.replica_topic: 1})
        self.procs: list[Proc] = []
        self.readers: list[Reader] = []
        self._count = 0

    def reader(self, topics: list[str]) -> Reader:
        """A :class:`Reader` of ``topics`` on this stack (stopped on :meth:`close`)."""
        reader = Reader(self.settings, topics)
        self.readers.append(reader)
        return reader

    # ------------------------------------------------------------------ processes
    def start(self, command: str = "run", name: str | None = None, **env: str) -> Proc:
        """``python -m service <command>`` on this stack; a learner (``run``) publishes to the output topic, a
        replica to :attr:`replica_topic` (so each topic has one writer and its versions can be checked)."""
        s = self.settings
        self._count += 1
        name = name or f"{command}{self._count}"
        port = free_port()
        penv = {k: v for k, v in os.environ.items() if not k.startswith("TOPICSTREAM_")}
        penv.update(env_for(s, _PROCESS_FIELDS))
        penv.update(
            {
                "TOPICSTREAM_METRICS_PORT": str(port),
                "TOPICSTREAM_METRICS_HOST": "127.0.0.1",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
                "NUMBA_NUM_THREADS": os.environ.get("NUMBA_NUM_THREADS", "1"),
            }
        )
        if command == "replica":
            penv["TOPICSTREAM_OUTPUT_TOPIC"] = self.replica_topic
        penv.update(env)
        log_path = self.dir / f"{name}.log"
        with open(log_path, "ab") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "service", command],
                env=penv,
                cwd=self.dir,  # no stray .env file
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(name, popen, log_path, port)
        self.procs.append(proc)
        return proc

    # ------------------------------------------------------------------ faults on the services
    def kill(self, name: str) -> None:
        """SIGKILL the ``"broker"`` or ``"redis"``."""
        proc = self.stack.process(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def restart(self, name: str) -> None:
        """An empty ``"broker"`` or ``"redis"`` on the same port (:meth:`LocalStack.restart`)."""
        self.stack.restart(name)

    def pause_broker(self) -> None:
        self.stack.process("broker").send_signal(signal.SIGSTOP)

    def resume_broker(self) -> None:
        self.stack.process("broker").send_signal(signal.SIGCONT)

    # ------------------------------------------------------------------ Redis views
    def store(self) -> SnapshotStore:
        s = self.settings
        return SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix, keep=s.snapshot_keep)

    def latest(self) -> int | None:
        """The ``latest`` snapshot version, or None (none, or Redis down)."""
        try:
            return self.store().latest_version()
        except Exception:
            return None

    def close(self) -> None:
        self.resume_broker()
        for reader in self.readers:
            reader.close(linger=0)
        for proc in self.procs:
            if proc.alive():
                proc.signal(signal.SIGCONT)
                proc.popen.kill()
                proc.popen.wait(30)
        self.stack.stop()

    def __enter__(self) -> FaultStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Feeder(threading.Thread):
    """Sends ``records`` to the input topic at ``rate`` per second (0: as fast as it can), retrying through any
    broker outage (``message.timeout.ms`` 0). ``acked`` holds the keys the broker acknowledged, ``sent_at`` when
    each key was handed to the producer (for latency)."""

    def __init__(self, settings: Settings, records: Iterable[tuple[bytes, bytes]], rate: float = 0.0):
        super().__init__(name="feeder", daemon=True)
        self.settings = settings
        self.records = records
        self.rate = rate
        self.acked: set[bytes] = set()
        self.sent_at: dict[bytes, float] = {}
        self.failures: list[str] = []
        self.started_at = 0.0
        self.finished_at = 0.0
        self.halt = threading.Event()
        self._lock = threading.Lock()

    def _report(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(str(err))
        else:
            with self._lock:
                self.acked.add(msg.key())

    def run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.settings.kafka_bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 0,
                "enable.idempotence": False,
            }
        )
        self.started_at = time.time()
        t0 = time.monotonic()
        for i, (key, value) in enumerate(self.records):
            if self.halt.is_set():
                break
            # poll() returns at the first delivery report: wait again until the send time has come (a single
            # poll sent about twice as fast as ``rate``, and a feed could end before the fault it was meant for).
            while self.rate > 0 and (wait := t0 + i / self.rate - time.monotonic()) > 0:
                producer.poll(wait)
            while True:
                try:
                    producer.produce(self.settings.input_topic, value=value, key=key, on_delivery=self._report)
                    break
                except BufferError:
                    producer.poll(0.1)
            self.sent_at[key] = time.time()
            producer.poll(0)
        while producer.flush(1.0):
            pass
        self.finished_at = time.time()

    def acked_keys(self) -> set[bytes]:
        with self._lock:
            return set(self.acked)


@dataclass(frozen=True)
class Record:
    """What the judge needs of one message read back."""

    topic: str
    partition: int
    offset: int
    key: bytes
    version: int | None
    ts: float  # the producer's timestamp, seconds


class Reader(threading.Thread):
    """Reads ``topics`` from their beginning, without a consumer group, into :attr:`records` until :meth:`close`."""

    def __init__(self, settings: Settings, topics: list[str]):
        super().__init__(name="reader", daemon=True)
        self.settings = settings
        self.topics = topics
        self.records: dict[str, list[Record]] = {t: [] for t in topics}
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self.start()

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.settings.kafka_bootstrap,
                "group.id": "unused-reader",  # required by librdkafka; never joined (assign, no commits)
                "enable.auto.commit": False,
            }
        )
        tps = []
        for topic in self.topics:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            tps += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions]
        consumer.assign(tps)
        try:
            while not self._halt.is_set():
                got = []
                for m in consumer.consume(1000, 0.2):
                    if m.error() is not None:
                        continue
                    raw = dict(m.headers() or []).get(H_VERSION)
                    version = int(raw) if raw is not None else None
                    name, part, offset = m.topic(), m.partition(), m.offset()
                    assert name is not None and part is not None and offset is not None
                    got.append(Record(name, part, offset, m.key() or b"", version, m.timestamp()[1] / 1e3))
                with self._lock:
                    for r in got:
                        self.records[r.topic].append(r)
        finally:
            consumer.close()

    def get(self, topic: str) -> list[Record]:
        with self._lock:
            return list(self.records[topic])

    def keys(self, topic: str) -> set[bytes]:
        with self._lock:
            return {r.key for r in self.records[topic]}

    def wait_for(self, topic: str, keys: set[bytes], timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
        """Wait until every one of ``keys`` was read from ``topic`` (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if keys <= self.keys(topic):
                return True
            if not alive():
                return False
            time.sleep(0.2)
        return keys <= self.keys(topic)

    def close(self, linger: float = 1.0) -> None:
        """Keep reading ``linger`` seconds (a late duplicate is counted), then stop."""
        time.sleep(linger)
        self._halt.set()
        self.join(30)


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time in [``start``, ``end``] without an output (seconds)."""
    ts = sorted(t for t in times if start <= t <= end)
    edges = [start, *ts, end]
    return max(b - a for a, b in itertools.pairwise(edges)) if len(edges) > 1 else end - start


@dataclass
class Verdict:
    """ids in vs ids out ∪ dead letters, as sets."""

    lost: set[bytes]
    unexpected: set[bytes]  # out or dead-lettered but never sent, or good dead-lettered / bad answered
    duplicates: int  # outputs beyond one per id (at least once allows them)
    outputs: int
    dead_letters: int
    #: (offset, version, highest before it, the output's timestamp) of each output whose version went backwards
    versions_backwards: list[tuple[int, int, int, float]] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"lost={len(self.lost)} unexpected={len(self.unexpected)} duplicates={self.duplicates} "
            f"outputs={self.outputs} dead_letters={self.dead_letters} versions_backwards={len(self.versions_backwards)}"
        )


def judge(good: set[bytes], bad: set[bytes], outputs: list[Record], dead: list[Record]) -> Verdict:
    """Compare what went in with what came out. Output versions are checked in offset order per partition."""
    out_keys = {r.key for r in outputs}
    dead_keys = {r.key for r in dead}
    lost = (good | bad) - (out_keys | dead_keys)
    unexpected = (out_keys - good) | (dead_keys - bad)
    backwards = []
    for part in {(r.topic, r.partition) for r in outputs}:
        high = -1
        for r in sorted((r for r in outputs if (r.topic, r.partition) == part), key=lambda r: r.offset):
            if r.version is not None:
                if r.version < high:
                    backwards.append((r.offset, r.version, high, r.ts))
                high = max(high, r.version)
    return Verdict(lost, unexpected, len(outputs) - len(out_keys), len(outputs), len(dead), backwards)
