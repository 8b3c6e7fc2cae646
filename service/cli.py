"""The ``topicstream`` command line.

Every command reads the ``TOPICSTREAM_*`` settings (environment, ``.env``); the flags shown override them.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from evaluation.command import eval_command

from .settings import Settings, SettingsError, load_settings
from .tables import topics_table

app = typer.Typer(help="Streaming topic models over Kafka.", no_args_is_help=True, add_completion=False)
app.command("eval")(eval_command)
err = Console(stderr=True)

Bootstrap = Annotated[str | None, typer.Option("--bootstrap", help="Kafka bootstrap servers (host:port)")]
RedisUrl = Annotated[str | None, typer.Option("--redis-url", help="Redis URL for snapshots")]
Algorithm = Annotated[str | None, typer.Option("--algorithm", "-a", help="scvb0 | ohdp | pf")]
Topics = Annotated[int | None, typer.Option("--topics", "-k", help="Number of topics K")]
MetricsPort = Annotated[int | None, typer.Option("--metrics-port", help="Port of /metrics (0 disables)")]


def _settings(*, kernel: bool = False, sizes: bool = False, **overrides: Any) -> Settings:
    """The settings, or exit 2 with one line per problem; ``kernel``: check TOPICSTREAM_KERNEL_PARAMS against the
    kernel; ``sizes``: check that W × K fits this machine and Redis (see :mod:`service.compat`)."""
    try:
        settings = load_settings(**overrides)
    except SettingsError as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    if kernel or sizes:
        from rich.markup import escape

        from .compat import kernel_param_problems, size_problems

        problems = kernel_param_problems(settings)
        if sizes and not problems:
            problems = size_problems(settings)
        if problems:
            lines = "\n  ".join(escape(p) for p in problems)
            err.print(f"[red]invalid settings:\n  {lines}[/red]", soft_wrap=True)  # one line per problem
            raise typer.Exit(2)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    return settings


def _steady_malloc() -> None:
    """Keep a long-running process's resident memory flat (glibc only; a no-op elsewhere).

    glibc raises its mmap threshold each time a large block (a numpy array, a snapshot buffer) is freed; after
    that, mid-size blocks are carved from the heap and rarely returned, so resident memory creeps up and swings
    by ~100 MB over hours. Pinning the thresholds at 128 KiB (what ``MALLOC_MMAP_THRESHOLD_`` and
    ``MALLOC_TRIM_THRESHOLD_`` do) keeps it flat: measured with ``python -m benchmarks.bench_service``.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 128 * 1024)
    libc.mallopt(m_trim_threshold, 128 * 1024)


@contextlib.contextmanager
def _unreachable_is_fatal(settings: Settings) -> Iterator[None]:
    """Turn "cannot reach Kafka/Redis" into one clear line and exit code 3 instead of a traceback."""
    import redis
    from confluent_kafka import KafkaException

    from .redact import redact_url, scrub

    try:
        yield
    except redis.exceptions.AuthenticationError as e:
        url, why = redact_url(settings.redis_url), scrub(str(e), settings.redis_url)
        err.print(f"[red]Redis at {url} refused the credentials: {why}[/red] (TOPICSTREAM_REDIS_URL)")
        raise typer.Exit(3) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
        url, why = redact_url(settings.redis_url), scrub(str(e), settings.redis_url)
        err.print(f"[red]cannot reach Redis at {url}: {why}[/red] (TOPICSTREAM_REDIS_URL)")
        raise typer.Exit(3) from None
    except KafkaException as e:
        err.print(f"[red]Kafka at {settings.kafka_bootstrap}: {e}[/red] (TOPICSTREAM_KAFKA_BOOTSTRAP)")
        raise typer.Exit(3) from None


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM/SIGINT: the loop finishes its batch, snapshots, commits and exits."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        logging.getLogger("topicstream").info("%s: finishing the batch and stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


@app.command()
def run(
    bootstrap: Bootstrap = None,
    redis_url: RedisUrl = None,
    algorithm: Algorithm = None,
    topics: Topics = None,
    metrics_port: MetricsPort = None,
    create_topics: Annotated[bool, typer.Option(help="Create missing topics first")] = True,
) -> None:
    """The learner: consume articles, learn topics, publish mixtures, snapshot to Redis."""
    from .kafka import ensure_topics
    from .learner import Learner, LeaseLost, StateMismatch
    from .metrics import Metrics

    s = _settings(
        kernel=True,
        sizes=True,
        kafka_bootstrap=bootstrap,
        redis_url=redis_url,
        algorithm=algorithm,
        topics=topics,
        metrics_port=metrics_port,
    )
    _steady_malloc()
    metrics = Metrics("learner")
    metrics.serve(s.metrics_port, s.metrics_host)  # before the lease: a standby shows up on dashboards too
    stop = _stop_on_signals()
    with _unreachable_is_fatal(s):
        if create_topics:
            ensure_topics(s, {s.input_topic: 1, s.output_topic: 1, s.dlq_topic: 1})
        try:
            learner = Learner(s, metrics=metrics, stop=stop)
        except StateMismatch as e:
            err.print(f"[red]{escape(str(e))}[/red]")
            raise typer.Exit(2) from None
        except LeaseLost:
            return  # stopped (SIGTERM) while waiting as a standby
    try:
        learner.run(stop)
    except LeaseLost as e:
        err.print(f"[red]{escape(str(e))}[/red]")
        raise typer.Exit(1) from None


@app.command()
def replica(
    bootstrap: Bootstrap = None,
    redis_url: RedisUrl = None,
    metrics_port: MetricsPort = None,
) -> None:
    """A read replica: serve mixtures from the learner's newest snapshot (inference only)."""
    from .replica import Replica

    s = _settings(kernel=True, kafka_bootstrap=bootstrap, redis_url=redis_url, metrics_port=metrics_port)
    _steady_malloc()
    with _unreachable_is_fatal(s):
        rep = Replica(s)
    rep.metrics.serve(s.metrics_port, s.metrics_host)
    rep.run(_stop_on_signals())


@app.command()
def produce(
    file: Annotated[
        str | None,
        typer.Argument(help="JSONL(.gz) file of articles, or - for standard input; none = generate"),
    ] = None,
    rate: Annotated[float, typer.Option(help="Articles per second (0 = as fast as possible)")] = 0.0,
    limit: Annotated[int | None, typer.Option(help="Stop after this many articles")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the generated articles")] = 0,
    bootstrap: Bootstrap = None,
) -> None:
    """Replay a JSONL file or a live feed into the input topic, or generate articles offline."""
    from .kafka import ensure_topics
    from .source import generated_lines, iter_lines, produce_lines

    s = _settings(kafka_bootstrap=bootstrap)
    with _unreachable_is_fatal(s):
        ensure_topics(s, {s.input_topic: 1})
    lines = iter_lines(file) if file else generated_lines(limit, seed)
    t0 = time.monotonic()
    try:
        n = produce_lines(s, lines, rate=rate, limit=limit)
    except FileNotFoundError as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    dt = time.monotonic() - t0
    err.print(f"produced {n} articles to {s.input_topic} in {dt:.1f}s ({n / max(dt, 1e-9):.0f}/s)")


@app.command("topics")
def show_topics(
    redis_url: RedisUrl = None,
    limit: Annotated[int | None, typer.Option(help="Show only the N most prevalent topics")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON")] = False,
) -> None:
    """Print the current topics (top words, prevalence, drift) from the newest snapshot in Redis."""
    from .snapshot import SnapshotStore

    s = _settings(redis_url=redis_url)
    with _unreachable_is_fatal(s):
        summary = SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix).summary()
    if summary is None:
        err.print(f"no snapshot under Redis prefix {s.redis_prefix!r} yet: is the learner running?")
        raise typer.Exit(1)
    if as_json:
        print(json.dumps(summary))
    else:
        Console().print(topics_table(summary, limit=limit))


@app.command()
def subscribe(
    topic: Annotated[int, typer.Argument(help="Topic id to follow")],
    min_weight: Annotated[float, typer.Option(help="Least weight of the topic in the article")] = 0.0,
    from_beginning: Annotated[bool, typer.Option(help="Start from the oldest output")] = False,
    limit: Annotated[int | None, typer.Option(help="Stop after N matching articles")] = None,
    bootstrap: Bootstrap = None,
) -> None:
    """Follow the articles tagged with a topic (filters on headers; prints one JSON line per article)."""
    import uuid

    from .kafka import make_consumer
    from .pipeline import H_TOPICS

    s = _settings(kafka_bootstrap=bootstrap)
    consumer = make_consumer(
        s,
        f"topicstream-subscribe-{uuid.uuid4().hex[:8]}",
        **{"auto.offset.reset": "earliest" if from_beginning else "latest"},
    )
    consumer.subscribe([s.output_topic])
    stop = _stop_on_signals()
    wanted, seen = str(topic).encode(), 0
    try:
        while not stop.is_set() and (limit is None or seen < limit):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            tags = dict(msg.headers() or []).get(H_TOPICS) or b""
            if wanted not in (tags if isinstance(tags, bytes) else tags.encode()).split(b","):
                continue
            event = json.loads(msg.value() or b"{}")
            weight = event["mixture"][topic]
            if weight < min_weight:
                continue
            print(
                json.dumps(
                    {
                        "id": event["id"],
                        "title": event.get("title"),
                        "weight": weight,
                        "model_version": event["model"]["version"],
                    }
                ),
                flush=True,
            )
            seen += 1
    finally:
        consumer.close()


@app.command()
def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML page to write")] = Path("topicstream-report.html"),
    png: Annotated[Path | None, typer.Option(help="PNG to write; default: the page's path with .png")] = None,
    top: Annotated[int, typer.Option(min=1, max=20, help="Topics drawn over time")] = 8,
    since: Annotated[
        str | None, typer.Option(help="Compare now with this long ago (90s, 15m, 24h, 7d); default: the oldest")
    ] = None,
    x: Annotated[str, typer.Option(help="Horizontal axis: time or articles")] = "time",
    redis_url: RedisUrl = None,
) -> None:
    """Write a self-contained HTML page and a PNG of how the topics drifted (from the history kept in Redis)."""
    import redis
    from rich.markup import escape

    from .report import ReportUnavailable, baseline_index, load, parse_duration, write_report

    if x not in ("time", "articles"):
        raise typer.BadParameter(f"expected time or articles, got {x!r}", param_hint="--x")
    try:
        since_s = parse_duration(since) if since is not None else None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--since") from None
    s = _settings(redis_url=redis_url)
    with _unreachable_is_fatal(s):
        records, names = load(redis.Redis.from_url(s.redis_url, socket_timeout=30), s.redis_prefix)
    if not records:
        err.print(
            f"no summary history under Redis prefix {s.redis_prefix!r} yet: is the learner running? "
            "(TOPICSTREAM_REDIS_PREFIX)"
        )
        raise typer.Exit(1)
    png_path = png or out.with_suffix(".png")
    try:
        write_report(
            records,
            out,
            png_path,
            names,
            top=top,
            baseline=baseline_index(records, since_s),
            x=x,
            source=f"Redis prefix {s.redis_prefix!r}",
        )
    except ReportUnavailable as e:
        err.print(f"[red]{escape(str(e))}[/red]")
        raise typer.Exit(2) from None
    except OSError as e:
        err.print(f"[red]cannot write the report: {escape(str(e))}[/red]")
        raise typer.Exit(2) from None
    first, last = records[0]["version"], records[-1]["version"]
    err.print(f"wrote {out} and {png_path} ({len(records)} snapshots kept, versions {first}..{last})")


@app.command()
def demo(
    articles: Annotated[
        Path | None, typer.Option(help="JSONL(.gz) file of articles to replay; default: generated articles")
    ] = None,
    rate: Annotated[float, typer.Option(help="Articles per second")] = 500.0,
    algorithm: Algorithm = None,
    topics: Topics = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds")] = None,
) -> None:
    """`make run`: start a local broker + Redis (unless configured), stream articles, show live topics."""
    from .dev.demo import run_demo

    s = _settings(algorithm=algorithm, topics=topics)
    run_demo(s, articles=articles, rate=rate, duration=duration)
