"""Soak: drive a steady stream through two learners (active + standby) and a replica while faults are injected on a
timer, and print what a user would count: lost ids, duplicates, p99 latency and memory over time.

Everything runs on a broker and a Redis of its own (``tests/faults/procs.py``'s :class:`FaultStack`); every
``--fault-every`` seconds the next fault of the cycle is injected and the script supervises like an orchestrator
would (a learner that exited is started again, as a standby):

1. ``kill-active``: SIGKILL the active learner (the standby takes over from the newest snapshot);
2. ``redis-empty``: SIGKILL Redis, keep it down ``--redis-down`` seconds, start it again empty on the same port;
3. ``broker-pause``: SIGSTOP the broker for 3 × the session timeout, then SIGCONT;
4. ``pause-active``: SIGSTOP the active learner past its lease TTL (the standby takes over), SIGCONT (it must step
   down: exit 1 with the LeaseLost message);
5. ``corrupt-latest``: pause the active learner, overwrite the newest snapshot's data with random bytes, SIGKILL it
   (the standby falls back to the previous readable version).

Latency is the output's broker timestamp minus the moment the article was handed to the producer. At the end
the feed stops, the script waits for the last answers, stops everything cleanly and judges: ids in vs. outputs ∪
dead letters (sets), duplicates, ``articles_learned`` in the final snapshot vs. good articles sent. Exit status 0
when nothing was lost, 1 when something was, 2 (inconclusive) when the broker stopped completing the learners'
consumer group (the active learner says so twice, ``service/group_stall.py``): the soak then stops, since what is
lost from there on is the broker's. Tansu does this when its group's leader leaves during a rebalance, which the
``pause-active`` fault can make.

    python -m benchmarks.soak [--rate 1000] [--minutes 30] [--fault-every 60] [--report-every 10]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from service.pipeline import H_VERSION
from tests.faults.procs import FaultStack, Feeder, Proc


def records(seed: int, bad_every: int) -> Iterator[tuple[bytes, bytes]]:
    """An endless stream of generated articles (key = id) with an invalid message every ``bad_every``."""
    from service.dev.generator import generate_articles

    for i, a in enumerate(generate_articles(None, seed=seed)):
        if bad_every and i % bad_every == bad_every - 1:
            yield f"bad-{i}".encode(), b'{"id": "", "text": "an id must not be empty"}'
        a.pop("label", None)
        yield a["id"].encode(), json.dumps(a).encode()


class Answers(threading.Thread):
    """Reads an output topic (or the dead-letter topic) from its beginning without a group; keeps the answered
    ids, counts duplicates and collects latencies (seconds) since the last :meth:`take`."""

    def __init__(self, stack: FaultStack, topic: str, sent_at: dict[bytes, float]):
        super().__init__(name=f"answers:{topic}", daemon=True)
        self.stack, self.topic, self.sent_at = stack, topic, sent_at
        self.keys: set[bytes] = set()
        self.duplicates = 0
        self.backwards = 0  # outputs whose model version is lower than one already read from their partition
        self._high: dict[int, int] = {}
        self.latencies: list[float] = []
        self.all_latencies: list[float] = []
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.start()

    def run(self) -> None:
        c = Consumer(
            {"bootstrap.servers": self.stack.settings.kafka_bootstrap, "group.id": "soak", "enable.auto.commit": False}
        )
        meta = c.list_topics(self.topic, timeout=10).topics[self.topic]
        c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        while not self.halt.is_set():
            msgs = c.consume(2000, 0.2)
            with self.lock:
                for m in msgs:
                    if m.error() is not None:
                        continue
                    key = m.key() or b""
                    raw = dict(m.headers() or []).get(H_VERSION)
                    if raw is not None:
                        part, version = m.partition() or 0, int(raw)
                        self.backwards += version < self._high.get(part, -1)
                        self._high[part] = max(version, self._high.get(part, -1))
                    if key in self.keys:
                        self.duplicates += 1
                        continue
                    self.keys.add(key)
                    sent = self.sent_at.get(key)
                    if sent is not None:
                        self.latencies.append(m.timestamp()[1] / 1000 - sent)
        c.close()

    def take(self) -> list[float]:
        with self.lock:
            out, self.latencies = self.latencies, []
        self.all_latencies += out
        return out

    def count(self) -> int:
        with self.lock:
            return len(self.keys)

    def missing(self, ids: set[bytes]) -> set[bytes]:
        """The ids of ``ids`` not answered yet."""
        with self.lock:
            return ids - self.keys


def p99(xs: list[float]) -> float:
    return float(np.percentile(xs, 99)) if xs else float("nan")


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        log_dir = Path(args.log_dir) if args.log_dir else None
        self.stack = FaultStack(
            log_dir,
            topics=args.topics,
            vocab_size=args.vocab,
            batch_size=500,
            snapshot_every_batches=20,
            snapshot_every_s=5.0,
            # The tests' 50 ms fetch wait suits their small logs; a soak's grow to ~150,000 records a partition, and
            # then Tansu answered a busy machine's 50 ms fetches empty for good: a helper's soak, whose replica
            # stalled 68,153 records short of the end (README, TOPICSTREAM_FETCH_WAIT_MS: the service's 500 ms).
            fetch_wait_ms=500,
        )
        self.learners: list[Proc] = []
        self.replica: Proc | None = None
        self.events: list[str] = []
        self.exits: list[str] = []
        self.t0 = time.monotonic()
        self.halt = False

    # ------------------------------------------------------------------ processes
    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.1f}s] {text}"
        self.events.append(line)
        print(line, flush=True)

    def start_learner(self) -> Proc:
        proc = self.stack.start("run", TOPICSTREAM_LOG_LEVEL="INFO")
        self.learners.append(proc)
        return proc

    def supervise(self) -> None:
        """Start again what exited (learners as standbys); note each exit."""
        for proc in list(self.learners):
            if not proc.alive():
                self.learners.remove(proc)
                code = proc.popen.returncode
                if code != -signal.SIGKILL:
                    lease_lost = code == 1 and "another learner took over" in proc.log()
                    if not lease_lost:  # stepping down after a pause is expected; anything else is not
                        self.exits.append(f"{proc.name} exit {code}")
                    self.say(f"{proc.name} exited with {code}{' (LeaseLost: stepped down)' if lease_lost else ''}")
                self.start_learner()
        if self.replica is not None and not self.replica.alive():
            self.exits.append(f"replica exit {self.replica.popen.returncode}")
            self.say(f"replica exited with {self.replica.popen.returncode}: restarting it")
            self.replica = self.stack.start("replica")

    def active(self) -> Proc | None:
        """The learner holding the lease (from Redis), or None."""
        try:
            pid = self.stack.store().r.hget(f"{self.stack.settings.redis_prefix}:lease:learner", "pid")
        except Exception:
            return None
        return next((p for p in self.learners if pid is not None and p.pid == int(pid)), None)

    def wait_new_active(self, old: Proc, since: float, timeout: float = 60.0) -> str:
        """Until another learner holds the lease; says how long that took."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.active()
            if now is not None and now is not old:
                return f"{now.name} active after {time.time() - since:.1f}s"
            time.sleep(0.1)
        return f"no new active learner after {timeout:.0f}s"

    # ------------------------------------------------------------------ faults
    def fault(self, kind: str) -> None:
        s = self.stack.settings
        act = self.active()
        if kind in ("kill-active", "pause-active", "corrupt-latest") and act is None:
            self.say(f"{kind}: no active learner right now, skipped")
            return
        assert act is not None or kind in ("redis-empty", "broker-pause")
        if kind == "kill-active":
            assert act is not None
            t = act.kill()
            self.say(f"fault kill-active: SIGKILL {act.name}; {self.wait_new_active(act, t)}")
        elif kind == "redis-empty":
            self.stack.kill("redis")
            time.sleep(self.args.redis_down)
            self.stack.restart("redis")
            self.say(f"fault redis-empty: Redis down {self.args.redis_down:.0f}s, restarted empty")
        elif kind == "broker-pause":
            pause = 3 * s.session_timeout_ms / 1000
            self.stack.pause_broker()
            time.sleep(pause)
            self.stack.resume_broker()
            self.say(f"fault broker-pause: broker stopped {pause:.0f}s")
        elif kind == "pause-active":
            assert act is not None
            act.signal(signal.SIGSTOP)
            t = time.time()
            took = self.wait_new_active(act, t)
            act.signal(signal.SIGCONT)
            self.say(f"fault pause-active: SIGSTOP {act.name}; {took}; SIGCONT")
        elif kind == "corrupt-latest":
            assert act is not None
            act.signal(signal.SIGSTOP)
            r, p = self.stack.store().r, s.redis_prefix
            newest = self.stack.latest()
            data = r.get(f"{p}:snapshot:{newest}:data") if newest else None
            if data is not None:
                r.set(f"{p}:snapshot:{newest}:data", os.urandom(len(data)))
            t = act.kill()
            took = self.wait_new_active(act, t)
            fell_back = ""
            for proc in self.learners:
                m = re.search(r"restoring snapshot (\d+), the newest readable one", proc.log())
                if m and proc.alive():
                    fell_back = f", fell back to {m.group(1)}"
            self.say(f"fault corrupt-latest: snapshot {newest} overwritten, SIGKILL {act.name}; {took}{fell_back}")

    # ------------------------------------------------------------------ the run
    def run(self) -> int:
        a, s = self.args, self.stack.settings
        print(f"soak: {a.rate:.0f} articles/s for {a.minutes:g} min, a fault every {a.fault_every:.0f}s; logs in "
              f"{self.stack.dir}", flush=True)  # fmt: skip
        self.start_learner()
        self.start_learner()
        self.replica = self.stack.start("replica")
        deadline = time.monotonic() + 120
        while self.active() is None or "assigned" not in (self.active() or self.learners[0]).log():
            if time.monotonic() > deadline:
                raise SystemExit("no learner became active within 120 s")
            time.sleep(0.2)
        n = int(a.rate * a.minutes * 60)
        feeder = Feeder(s, itertools.islice(records(a.seed, a.bad_every), n), rate=a.rate)
        out = Answers(self.stack, s.output_topic, feeder.sent_at)
        rep = Answers(self.stack, self.stack.replica_topic, feeder.sent_at)
        dead = Answers(self.stack, s.dlq_topic, feeder.sent_at)
        feeder.start()
        reporter = threading.Thread(target=self.report, args=(feeder, out, rep), daemon=True)
        reporter.start()
        kinds = itertools.cycle(["kill-active", "redis-empty", "broker-pause", "pause-active", "corrupt-latest"])
        next_fault = time.monotonic() + a.fault_every
        rss_start = {"learner": self.rss_active(), "replica": self.replica.rss_mb() if self.replica else 0.0}
        stuck, next_look = None, time.monotonic()
        while feeder.is_alive():
            self.supervise()
            due = time.monotonic() >= next_fault
            # Reads the active learner's whole log: every 5 s, not every turn, and before a fault may replace the
            # learner that said so (a helper's soak: three learners said it twice and were killed before a look).
            if due or time.monotonic() >= next_look:
                next_look = time.monotonic() + 5.0
                stuck = self.group_stuck()
            if stuck is not None:
                why = "the broker does not complete the learners' group; what is lost from now on is the broker's"
                self.say(f"{stuck} has had no partition for two rebalances (service.group_stall): {why}; stopping")
                feeder.halt.set()
                break
            if due:
                self.fault(next(kinds))
                next_fault = time.monotonic() + a.fault_every
            time.sleep(0.2)
        feeder.join(60)
        self.say("feed finished; waiting for the last answers")
        sent = set(feeder.sent_at)
        good = {k for k in sent if not k.startswith(b"bad-")}
        bad = sent - good
        # The replica answers every good id too (its own group, its own outputs): the drain waits for it as for the
        # learner, or a replica still catching up after a broker stall reads as ids it "missed".
        deadline = time.monotonic() + (0 if stuck else 180)
        while time.monotonic() < deadline and (
            out.count() < len(good) or dead.count() < len(bad) or len(rep.missing(good)) > 0
        ):
            self.supervise()
            time.sleep(0.5)
        time.sleep(2)
        rss_end = {"learner": self.rss_active(), "replica": self.replica.rss_mb() if self.replica else 0.0}
        self.halt = True
        for ans in (out, rep, dead):
            ans.halt.set()
        # Stop the standbys first (so none takes over), then the active learner (final snapshot), then the replica.
        act = self.active()
        for proc in [p for p in self.learners if p is not act] + ([act] if act else []):
            proc.stop()
        if self.replica is not None:
            self.replica.stop()
        loaded = self.stack.store().load()
        learned = int(loaded[0]["articles_learned"]) if loaded else -1
        # The feeder does not produce idempotently: a retry across a broker pause writes a record twice, and the
        # learner learns both (a helper's soak: 288,009 records for 288,000 sent, learned = good records read back).
        input_good = self.good_records_in_input(len(sent))
        lost = (good - out.keys) | (bad - dead.keys)
        lats = out.all_latencies + out.take()
        rlats = rep.all_latencies + rep.take()
        print("\n== soak summary ==")
        print(f"sent {len(sent)} ({len(good)} good, {len(bad)} bad) in {feeder.finished_at - feeder.started_at:.0f}s")
        print(f"ids lost (outputs ∪ dead letters): {len(lost)}; replica missed: {len(rep.missing(good))}")
        print(f"duplicates: outputs {out.duplicates}, replica {rep.duplicates}, dead letters {dead.duplicates}")
        print(f"outputs whose model version went backwards: {out.backwards}, replica {rep.backwards}")
        if loaded:
            print(f"articles_learned {learned} vs good records in the input {input_good} ({len(good)} sent; learned "
                  f"twice: {learned - input_good})")  # fmt: skip
        else:
            print(f"no readable snapshot at the end; {input_good} good records in the input")
        print(f"latency p50 {np.percentile(lats, 50):.2f}s p99 {p99(lats):.2f}s max {max(lats):.1f}s; replica p99 "
              f"{p99(rlats):.2f}s")  # fmt: skip
        print(f"RSS start: learner {rss_start['learner']:.0f} MB, replica {rss_start['replica']:.0f} MB; end: "
              f"learner {rss_end['learner']:.0f} MB, replica {rss_end['replica']:.0f} MB")  # fmt: skip
        print(f"unexpected exits: {self.exits or 'none'}")
        if stuck is not None:
            tansu = "Tansu keeps a group whose leader left during a rebalance so: service/group_stall.py"
            print(f"INCONCLUSIVE: the broker stopped completing the learners' group ({stuck} never assigned; {tansu})")
        print("faults:")
        for e in self.events:
            print("  " + e)
        self.stack.close()
        ok = (
            not lost
            and not rep.missing(good)
            and learned == input_good
            and not self.exits
            and not out.backwards
            and not rep.backwards
        )
        return 2 if stuck is not None else 0 if ok else 1

    def group_stuck(self) -> str | None:
        """The active learner, when it has said twice that no partition is assigned to it (service.group_stall: two
        rebalances' time, then 30 s more), else None."""
        act = self.active()
        if act is None or act.log().count("service.group_stall: no partition of") < 2:
            return None
        return act.name

    def good_records_in_input(self, sent: int, quiet_s: float = 3.0) -> int:
        """The good records in the input topic, read back (a record the feeder wrote twice counts twice)."""
        topic = self.stack.settings.input_topic
        reader = self.stack.reader([topic])
        seen, since = -1, time.monotonic()
        while time.monotonic() - since < quiet_s or seen < sent:
            now = len(reader.get(topic))
            if now != seen:
                seen, since = now, time.monotonic()
            if time.monotonic() - since > 30:  # fewer than sent: the broker lost some (ids lost says which)
                break
            time.sleep(0.2)
        return sum(1 for r in reader.get(topic) if not r.key.startswith(b"bad-"))

    def rss_active(self) -> float:
        act = self.active()
        return act.rss_mb() if act is not None else float("nan")

    def report(self, feeder: Feeder, out: Answers, rep: Answers) -> None:
        """A line every ``--report-every`` seconds: what was sent and answered, pending ids, latency, memory."""
        print(f"{'t':>7} {'sent':>8} {'answered':>8} {'replica':>8} {'pending':>7} {'dups':>6} {'p99 s':>6} "
              f"{'max s':>6} {'learner MB':>10} {'replica MB':>10}", flush=True)  # fmt: skip
        while not self.halt:
            time.sleep(self.args.report_every)
            lats = out.take()
            rep.take()
            sent = len(feeder.sent_at)
            answered = out.count()
            rss_r = self.replica.rss_mb() if self.replica else float("nan")
            print(f"{time.monotonic() - self.t0:7.0f} {sent:8d} {answered:8d} {rep.count():8d} "
                  f"{max(0, sent - answered - sent // max(1, self.args.bad_every)):7d} {out.duplicates:6d} "
                  f"{p99(lats):6.2f} {max(lats, default=float('nan')):6.1f} {self.rss_active():10.0f} {rss_r:10.0f}",
                  flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=1000.0, help="articles per second")
    p.add_argument("--minutes", type=float, default=30.0, help="how long to feed")
    p.add_argument("--fault-every", type=float, default=60.0, help="seconds between two faults")
    p.add_argument("--redis-down", type=float, default=5.0, help="seconds Redis stays down in the redis-empty fault")
    p.add_argument("--report-every", type=float, default=10.0, help="seconds between two report lines")
    p.add_argument("--bad-every", type=int, default=100, help="one invalid message every N (0: none)")
    p.add_argument("--topics", type=int, default=8, help="K")
    p.add_argument("--vocab", type=int, default=2048, help="W")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-dir", help="where the processes' logs go (default: a temporary folder, kept)")
    args = p.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
