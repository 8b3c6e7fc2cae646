"""The commands a user types: topics, subscribe, produce, and `make run`'s demo."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from service.cli import app
from service.dev.localstack import free_port
from service.learner import Learner
from service.lease import Lease
from service.lineage import LineageEvent, LineageStore
from service.settings import Settings

from .helpers import env_for, good_articles, read_all, run_until, sample
from .redis_faults import RedisServer, server

__all__ = ["server"]  # a fixture, imported for pytest

pytestmark = pytest.mark.integration


def test_produce_file_then_topics_and_subscribe(settings: Settings, tmp_path: Path) -> None:
    s = settings
    path = tmp_path / "articles.jsonl"
    articles = good_articles(150, seed=7)
    path.write_bytes(b"\n".join(articles) + b"\nnot json\n")
    runner = CliRunner()
    result = runner.invoke(app, ["produce", str(path)], env=env_for(s))
    assert result.exit_code == 0, result.output
    assert "produced 151 articles" in result.output

    learner = Learner(s)
    run_until(learner, 151)
    assert sample(learner.metrics, "topicstream_articles_dead_lettered_total", reason="not_json") == 1

    result = runner.invoke(app, ["topics", "--json"], env=env_for(s))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["articles_learned"] == 150 and len(summary["topics"]) == s.topics
    assert all(t["top_words"] for t in summary["topics"] if t["prevalence"] > 0.05)
    # The names as they are now, not as of the last snapshot, and the recent topic events.
    named = summary["topics"][0]["topic"]
    assert runner.invoke(app, ["label", str(named), "Weather"], env=env_for(s)).exit_code == 0
    lineage = LineageStore(redis.Redis.from_url(s.redis_url), s.redis_prefix)
    lineage.push([LineageEvent("retire", 99, 7, None, 0.001, summary["version"], 0.0)])
    now = json.loads(runner.invoke(app, ["topics", "--json"], env=env_for(s)).stdout)
    assert [t.get("name") for t in now["topics"] if t["topic"] == named] == ["Weather"]
    assert now["lineage"][0] == dataclasses.asdict(lineage.recent(1)[0]) and now["lineage"][0]["topic"] == 99
    table = runner.invoke(app, ["topics", "--limit", "3"], env=env_for(s))
    assert table.exit_code == 0 and "prevalence" in table.output

    outputs = read_all(s, s.output_topic, 150)
    dominant = json.loads(outputs[0].value())["top_topics"][0]["topic"]
    expected = sum(1 for m in outputs if str(dominant).encode() in dict(m.headers())["topicstream-topics"].split(b","))
    result = runner.invoke(
        app, ["subscribe", str(dominant), "--from-beginning", "--limit", str(expected)], env=env_for(s)
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == expected and all(line["weight"] >= 0.1 for line in lines)


def test_produce_says_what_is_wrong_with_a_file_in_one_line(settings: Settings, tmp_path: Path) -> None:
    """A directory, a truncated gzip file, and an article too large for the broker: one line each, a non-zero
    exit, no traceback; the articles around the large one are sent, and the line named is the file's (blank lines
    count). Gzip is known by its bytes, not the name: a plain file named .gz and a gzip file named .jsonl are read
    as what they are (before, the second went out as compressed bytes cut at newlines: garbage, exit 0)."""
    runner, env = CliRunner(), env_for(settings)
    result = runner.invoke(app, ["produce", str(tmp_path)], env=env)
    assert result.exit_code == 2 and "not a file" in result.output and result.exception is not None
    a, b, c = good_articles(3, seed=1)
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(a + b"\n")
    zipped = tmp_path / "zipped.jsonl"
    zipped.write_bytes(gzip.compress(b + b"\n" + c + b"\n"))
    for path, n in ((plain, 1), (zipped, 2)):
        result = runner.invoke(app, ["produce", str(path)], env=env)
        assert result.exit_code == 0 and f"produced {n} articles" in result.output, result.output
    truncated = tmp_path / "truncated.jsonl.gz"
    truncated.write_bytes(gzip.compress(b"\n".join(good_articles(200, seed=3)) + b"\n")[:-40])
    result = runner.invoke(app, ["produce", str(truncated)], env=env)
    assert result.exit_code == 2 and re.search(r"cannot read .* after line \d+: .*\(\d+ articles sent\)", result.output)
    big = tmp_path / "big.jsonl"
    huge = json.dumps({"id": "huge", "text": "word " * 400_000}).encode()
    big.write_bytes(b"\n".join([good_articles(1, seed=1)[0], b"", huge, good_articles(1, seed=2)[0]]) + b"\n")
    result = runner.invoke(app, ["produce", str(big)], env=env)
    assert result.exit_code == 1, result.output
    assert "produced 2 articles" in result.output and "not sent: lines [3]" in result.output
    assert "Traceback" not in result.output
    assert "no valid article" not in result.output  # the refused line was not sent: nobody dead-letters it
    mixed = tmp_path / "mixed.csv"
    mixed.write_bytes(b'id,text\n{"id": "a1", "body": "Oil prices rose"}\n' + good_articles(1, seed=4)[0] + b"\n")
    result = runner.invoke(app, ["produce", str(mixed)], env=env)
    assert result.exit_code == 0 and "produced 3 articles" in result.output, result.output
    said = " ".join(result.output.split())
    assert "2 of them are no valid article, and the learner dead-letters them (line 1: not_json: " in said
    assert "; line 2: invalid: text: Field required" in said and "README, Events" in said


def test_a_metrics_port_in_use_is_one_line(settings: Settings) -> None:
    """``topicstream run`` on a host where the metrics port is taken (the compose learner publishes 9100): exit 2
    and the setting to change, not a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**env_for(settings), "TOPICSTREAM_METRICS_HOST": "127.0.0.1"}
        result = CliRunner().invoke(app, ["run", "--metrics-port", str(port)], env=env)
    assert result.exit_code == 2, result.output
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in result.output and "TOPICSTREAM_METRICS_PORT" in result.output


def test_topics_without_a_snapshot_says_so(settings: Settings) -> None:
    """No snapshot: whether a learner is running (before, a cold start learning a backlog for its first 30 s was
    asked "is the learner running?")."""
    result = CliRunner().invoke(app, ["topics"], env=env_for(settings))
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "no snapshot" in said and "is the learner running?" in said
    lease = Lease.from_url(settings.redis_url, settings.redis_prefix, ttl_s=30)
    assert lease.try_acquire()
    try:
        result = CliRunner().invoke(app, ["topics"], env=env_for(settings))
    finally:
        lease.release()
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and f"(pid {os.getpid()}) holds the lease and writes its first snapshot" in said


def test_a_redis_key_of_another_type_is_named_in_one_line(settings: Settings) -> None:
    """Another program wrote under the prefix (or an operator SET the wrong key). Before, the learner died with a
    WRONGTYPE traceback (lease, lineage) or ran writing no summary (topic names), and ``topics`` crashed."""
    s, r = settings, redis.Redis.from_url(settings.redis_url)
    env = {**env_for(s), "TOPICSTREAM_METRICS_HOST": "127.0.0.1"}
    r.set(f"{s.redis_prefix}:topic-names", "x")
    r.hset(f"{s.redis_prefix}:summary", "a", "b")
    run = CliRunner().invoke(app, ["run", "--metrics-port", "0"], env=env)
    assert run.exit_code == 2, run.output
    lines = run.output.splitlines()
    assert f"Redis key {s.redis_prefix}:topic-names is a string where topicstream keeps a hash" in lines
    assert f"Redis key {s.redis_prefix}:summary is a hash where topicstream keeps a string" in lines
    assert "Traceback" not in run.output and not r.exists(f"{s.redis_prefix}:lease:learner")  # before the lease
    assert r.type(f"{s.redis_prefix}:topic-names") == b"string"  # not deleted: it may be another program's
    topics = CliRunner().invoke(app, ["topics"], env=env)  # WRONGTYPE from Redis, named by the check
    assert topics.exit_code == 2 and "summary is a hash where topicstream keeps a string" in topics.output
    # Checked at the start where the error would be caught and retried: a subscriber waiting as if no snapshot
    # existed, a feed poller retrying its claims for ever.
    subscribe = CliRunner().invoke(app, ["subscribe", "--words", "oil"], env=env)
    assert subscribe.exit_code == 2 and "summary is a hash" in subscribe.output, subscribe.output
    r.delete(f"{s.redis_prefix}:summary", f"{s.redis_prefix}:topic-names")
    r.set(f"{s.redis_prefix}:feeds:seen", "x")
    feeds = CliRunner().invoke(app, ["feeds", "--once"], env={**env, "TOPICSTREAM_FEEDS": "http://127.0.0.1:9/feed"})
    assert feeds.exit_code == 2 and "feeds:seen is a string where topicstream keeps a sorted set" in feeds.output


@pytest.mark.parametrize("refusal", ["acl", "acl-script", "read-only", "full"])
def test_a_redis_that_refuses_the_services_commands_is_named_in_one_line(
    settings: Settings, server: RedisServer, refusal: str
) -> None:
    """A Redis user whose ACL lacks the prefix's keys, a read-only replica named by mistake, a Redis at its
    maxmemory: before, a traceback of 116 to 181 lines (exit 1); now one line saying what to do."""
    admin = redis.Redis.from_url(server.url())
    url = server.url()
    if refusal == "acl":
        admin.execute_command("ACL", "SETUSER", "narrow", "on", ">pw-secret", "~elsewhere:*", "+@all")
        url = url.replace("redis://", "redis://narrow:pw-secret@", 1)
        meaning, code = "its user lacks a command or key topicstream needs (deploy/README.md, Redis)", 2
    elif refusal == "acl-script":  # reads allowed, writes refused inside the lease's script (another wording)
        rules = ["~*", "+@read", "+@scripting", "+@connection", "+info"]
        admin.execute_command("ACL", "SETUSER", "reader", "on", ">pw-secret", *rules)
        url = url.replace("redis://", "redis://reader:pw-secret@", 1)
        meaning, code = "its user lacks a command or key topicstream needs (deploy/README.md, Redis)", 2
    elif refusal == "read-only":
        admin.execute_command("REPLICAOF", "127.0.0.1", "9")  # a primary that never answers: read-only for good
        meaning, code = "it is a read-only replica: point TOPICSTREAM_REDIS_URL at the primary", 2
    else:
        admin.config_set("maxmemory", "1")
        meaning, code = "it is full (maxmemory): give it more memory (deploy/README.md, Redis)", 3
    env = {**env_for(settings), "TOPICSTREAM_REDIS_URL": url}
    commands = [["run", "--metrics-port", "0"]]
    if refusal == "acl":  # a replica only reads: a read-only or full Redis, or a reading user, serves it
        commands.append(["replica", "--metrics-port", "0"])
    for args in commands:
        result = CliRunner().invoke(app, args, env=env)
        assert result.exit_code == code, (args, result.output)
        assert "Traceback" not in result.output and "pw-secret" not in result.output
        said = [line for line in result.output.splitlines() if "refused a command" in line]
        assert len(said) == 1 and meaning in said[0], (args, result.output)


def test_demo_refuses_half_a_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real broker but no Redis named (or the reverse): one clear line, exit 2, nothing started."""
    for name in [k for k in os.environ if k.startswith("TOPICSTREAM_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["demo", "--duration", "1"], env={"TOPICSTREAM_KAFKA_BOOTSTRAP": "kafka:9092"})
    assert result.exit_code == 2
    assert "TOPICSTREAM_KAFKA_BOOTSTRAP is set but TOPICSTREAM_REDIS_URL is not" in result.output
    assert not (tmp_path / ".topicstream").exists()


@pytest.mark.parametrize("how", ["ctrl-c twice", "terminal closed", "sigkill"])
def test_nothing_the_demo_started_outlives_it(tmp_path: Path, how: str) -> None:
    """The broker and Redis run in sessions of their own (a Ctrl-C must not stop them before the learner's final
    snapshot). A second Ctrl-C during the stop, SIGTERM or SIGHUP to the demo's process group (``kill %1``, a
    closed terminal) left both running for good, and a local broker grows to gigabytes; so would SIGKILL. The
    hangup of a closed terminal also killed the learner without its final snapshot: it was in the demo's group."""
    import psutil

    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICSTREAM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "demo", "--rate", "200"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell's job
    )
    try:
        deadline = time.monotonic() + 120
        log = tmp_path / ".topicstream" / "learner.log"
        while not (log.exists() and "snapshot 1:" in log.read_text()):  # learning: its stop takes a final snapshot
            assert time.monotonic() < deadline and proc.poll() is None, "the demo did not start"
            time.sleep(0.2)
        started = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in started)
        assert "tansu" in names and "redis-server" in names and " run" in names and " produce" in names
        if how == "ctrl-c twice":
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)
            os.killpg(proc.pid, signal.SIGINT)
        elif how == "terminal closed":
            os.killpg(proc.pid, signal.SIGHUP)
        else:
            proc.kill()
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(started, timeout=60)
    left = [p.name() for p in alive]
    for p in alive:
        p.kill()
    assert not left
    if how == "terminal closed":  # the hangup reached the demo alone, which stopped the learner with SIGTERM
        assert "SIGTERM: finishing the batch and stopping" in log.read_text()


def test_make_run_demo_invites_a_second_terminal_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """`make run`'s demo starts a broker, Redis, learner and producer; the commands it prints for a second
    terminal (with the settings it writes to .topicstream/demo.env) see its model, which is the kernel and the
    number of topics given on the command line; Ctrl-C stops everything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICSTREAM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "demo", "--rate", "400", "--algorithm", "ohdp", "--topics", "12"],
        env={**env, "COLUMNS": "160"},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        demo_env = tmp_path / ".topicstream" / "demo.env"
        summary = None
        deadline = time.monotonic() + 240  # the first test to compile the kernels on a cold numba cache
        while summary is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1.0)
            if not demo_env.exists():
                continue
            second = dict(line.split("=", 1) for line in demo_env.read_text().split())
            topics = subprocess.run(
                [sys.executable, "-m", "service", "topics", "--json"],
                env={**env, **second},
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if topics.returncode == 0:
                summary = json.loads(topics.stdout)
        assert summary is not None and summary["articles_learned"] > 0, "the second terminal never saw the model"
        assert summary["algorithm"] == "ohdp" and len(summary["topics"]) == 12
        assert second["TOPICSTREAM_ALGORITHM"] == "ohdp" and second["TOPICSTREAM_TOPICS"] == "12"
        assert all(t["top_words"] for t in summary["topics"] if t["prevalence"] > 0.05)
        # The hint's API-only replica answers from the demo's model (README, HTTP inference).
        port = free_port()
        api = subprocess.Popen(
            [sys.executable, "-m", "service", "replica", "--api-only", "--api-port", str(port), "--metrics-port", "0"],
            env={**env, **second},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        answer: dict[str, Any] = {}
        deadline = time.monotonic() + 120
        while not answer and time.monotonic() < deadline and api.poll() is None:
            time.sleep(0.5)
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/mixtures", b'{"id": "1", "text": "oil"}')
            with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=10) as response:
                answer = json.loads(response.read())
        api.send_signal(signal.SIGTERM)
        api_out, _ = api.communicate(timeout=60)
        assert answer.get("model", {}).get("algorithm") == "ohdp" and len(answer["mixture"]) == 12, api_out
        assert api.returncode == 0 and "Traceback" not in api_out, api_out
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "in a second terminal" in out and "demo.env" in out and "stopped" in out
    # The hints name the command as it was started (here `python -m service`, not .venv/bin/topicstream, which
    # this directory does not have), and the last line gives the learner's final snapshot, not the last table's.
    assert f"{sys.executable} -m service topics" in out
    final = re.search(r"final snapshot v(\d+): ([\d,]+) articles learned", out)
    assert final is not None and int(final.group(2).replace(",", "")) > 0, out[-2000:]
    learner_log = (tmp_path / ".topicstream" / "learner.log").read_text()
    assert "snapshot" in learner_log and "Traceback" not in learner_log
