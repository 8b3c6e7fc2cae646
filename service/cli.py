"""The ``topicstream`` command line.

Every command but ``eval`` reads the ``TOPICSTREAM_*`` settings (environment, ``.env``); the flags shown override
them. ``eval`` takes only its flags, so that a score does not depend on the environment it ran in."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from evaluation.command import eval_command

from . import __version__
from .cli_errors import api_port_is_fatal, err, outputs_refused_is_fatal, serve_metrics, unreachable_is_fatal
from .keys import check_types
from .process import stop_on_signals, tune_for_service
from .settings import Settings, SettingsError, load_settings
from .tables import matches_table, topics_table

if TYPE_CHECKING:  # imported where used: the commands that need neither Redis nor Kafka start fast
    from .lineage import LineageStore
    from .snapshot import SnapshotStore

app = typer.Typer(help="Streaming topic models over Kafka.", no_args_is_help=True, add_completion=False)
app.command("eval")(eval_command)


def _print_version(asked: bool) -> None:
    if asked:
        print(f"topicstream {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Streaming topic models over Kafka."""


Bootstrap = Annotated[str | None, typer.Option("--bootstrap", help="Kafka bootstrap servers (host:port)")]
RedisUrl = Annotated[str | None, typer.Option("--redis-url", help="Redis URL for snapshots")]
Algorithm = Annotated[str | None, typer.Option("--algorithm", "-a", help="scvb0 | ohdp | pf")]
Topics = Annotated[int | None, typer.Option("--topics", "-k", help="Number of topics K")]
MetricsPort = Annotated[int | None, typer.Option("--metrics-port", help="Port of /metrics (0 disables)")]
ApiPort = Annotated[
    int | None, typer.Option("--api-port", help="Port of the HTTP inference API, POST /v1/mixtures (0 disables)")
]

#: The setting each command-line flag overrides, by the name of the command parameter that holds the flag: a
#: command takes its flags' values from its context (:func:`_settings`), so a parameter of one of these names
#: overrides the same setting in every command.
_FLAG_SETTINGS = {
    "bootstrap": "kafka_bootstrap",
    "redis_url": "redis_url",
    "metrics_port": "metrics_port",
    "api_port": "api_port",
    "api_only": "api_only",
    "algorithm": "algorithm",
    "topics": "topics",
    "interval": "feed_interval_s",
    "timeout": "feed_timeout_s",
}


def _settings(ctx: typer.Context, *, kernel: bool = False, sizes: bool = False) -> Settings:
    """The settings with the command's flags on top (those of ``_FLAG_SETTINGS``; a flag not given is None and
    leaves its setting alone), or exit 2 with one line per problem; ``kernel``: check TOPICSTREAM_KERNEL_PARAMS
    against the kernel; ``sizes``: check that W × K fits this machine and Redis (see :mod:`service.compat`)."""
    overrides = {_FLAG_SETTINGS[name]: value for name, value in ctx.params.items() if name in _FLAG_SETTINGS}
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


@app.command()
def run(
    ctx: typer.Context,
    bootstrap: Bootstrap = None,
    redis_url: RedisUrl = None,
    algorithm: Algorithm = None,
    topics: Topics = None,
    metrics_port: MetricsPort = None,
    create_topics: Annotated[bool, typer.Option(help="Create missing topics first")] = True,
) -> None:
    """The learner: consume articles, learn topics, publish mixtures, snapshot to Redis."""
    from .kafka import check_reachable, ensure_topics
    from .learner import Learner, LeaseLost, StateMismatch
    from .metrics import Metrics

    s = _settings(ctx, kernel=True, sizes=True)
    tune_for_service()
    metrics = Metrics("learner")
    serve_metrics(metrics, s)  # before the lease: a standby shows up on dashboards too
    stop = stop_on_signals()
    with unreachable_is_fatal(s):
        if create_topics:
            ensure_topics(s, {s.input_topic: 1, s.output_topic: 1, s.dlq_topic: 1, s.lineage_topic_name(): 1})
        else:
            check_reachable(s)
        try:
            learner = Learner(s, metrics=metrics, stop=stop)
        except StateMismatch as e:
            err.print(f"[red]{escape(str(e))}[/red]")
            raise typer.Exit(2) from None
        except LeaseLost:
            return  # stopped (SIGTERM) while waiting as a standby
    try:
        with outputs_refused_is_fatal():
            learner.run(stop)
    except LeaseLost as e:
        err.print(f"[red]{escape(str(e))}[/red]")
        raise typer.Exit(1) from None


@app.command()
def replica(
    ctx: typer.Context,
    bootstrap: Bootstrap = None,
    redis_url: RedisUrl = None,
    metrics_port: MetricsPort = None,
    api_port: ApiPort = None,
    api_only: Annotated[
        bool | None,
        typer.Option("--api-only/--with-kafka", help="Only answer HTTP: read no Kafka topic (needs --api-port)"),
    ] = None,
) -> None:
    """A read replica: serve mixtures from the learner's newest snapshot (inference only), and on request over
    HTTP with --api-port (only over HTTP with --api-only)."""
    from .kafka import check_reachable
    from .replica import Replica

    s = _settings(ctx, kernel=True)
    tune_for_service()
    if s.api_only:
        _serve_api_only(s)
        return
    with unreachable_is_fatal(s):
        check_reachable(s)
        rep = Replica(s)
    serve_metrics(rep.metrics, s)
    api = None
    if s.api_port:
        from .api import serve_api

        with api_port_is_fatal(s):
            api = serve_api(lambda: rep.served, rep.tokenizer, s, rep.metrics)
    try:
        with outputs_refused_is_fatal():
            rep.run(stop_on_signals())
    finally:
        if api is not None:
            api.close()


def _serve_api_only(s: Settings) -> None:
    """``replica --api-only``: the HTTP API on the learner's snapshots, no Kafka (exit 2 without a port)."""
    from .api import ApiOnlyReplica
    from .metrics import Metrics

    if not s.api_port:
        err.print("[red]TOPICSTREAM_API_ONLY needs TOPICSTREAM_API_PORT (--api-port): nothing to serve[/red]")
        raise typer.Exit(2)
    metrics = Metrics("replica")
    with unreachable_is_fatal(s), api_port_is_fatal(s):
        rep = ApiOnlyReplica(s, metrics)
    serve_metrics(metrics, s)
    rep.run(stop_on_signals())


@app.command()
def produce(
    ctx: typer.Context,
    file: Annotated[
        str | None,
        typer.Argument(help="JSONL(.gz) file of articles, or - for standard input; none = generate"),
    ] = None,
    rate: Annotated[float, typer.Option(min=0.0, help="Articles per second (0 = as fast as possible)")] = 0.0,
    limit: Annotated[int | None, typer.Option(min=1, help="Stop after this many articles")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the generated articles")] = 0,
    bootstrap: Bootstrap = None,
) -> None:
    """Replay a JSONL file or a live feed into the input topic, or generate articles offline."""
    from .kafka import DeliveryError, ensure_topics
    from .source import Tally, generated_lines, iter_lines, produce_lines

    s = _settings(ctx)
    if file is not None and str(file) != "-" and not Path(file).is_file():  # before a broker check that may wait
        err.print(f"[red]{'not a file' if Path(file).exists() else 'no such file'}: {file}[/red]")
        raise typer.Exit(2)
    if limit is not None and limit < 0:
        raise typer.BadParameter(f"must be >= 0, got {limit}", param_hint="--limit")
    with unreachable_is_fatal(s):
        ensure_topics(s, {s.input_topic: 1})
    lines = iter_lines(file) if file else generated_lines(limit, seed)
    t0 = time.monotonic()
    tally = Tally()
    try:
        with unreachable_is_fatal(s):
            n = produce_lines(s, lines, rate=rate, limit=limit, tally=tally)
    except (OSError, EOFError) as e:  # truncated, unreadable: what was sent before stays sent
        err.print(f"[red]cannot read {file} after line {tally.lines}: {e}[/red] ({tally.acked} articles sent)")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print(f"interrupted after line {tally.lines}: {tally.acked} articles sent")
        raise typer.Exit(130) from None
    except DeliveryError as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(1) from None
    dt = time.monotonic() - t0
    err.print(f"produced {n} articles to {s.input_topic} in {dt:.1f}s ({n / max(dt, 1e-9):.0f}/s)")
    if tally.invalid:
        err.print(
            f"[yellow]{tally.invalid} of them are no valid article, and the learner dead-letters them "
            f"({tally.reasons()}); "
            "README, Events, says what an article holds[/yellow]",
            highlight=False,
        )
    if tally.skipped:
        more = "…" if tally.skipped > len(tally.first) else ""
        err.print(f"[red]{tally.skipped} too large for the broker, not sent: lines {tally.first}{more}[/red]")
        raise typer.Exit(1)


@app.command()
def feeds(
    ctx: typer.Context,
    file: Annotated[
        Path | None, typer.Argument(help="File of feed URLs, one per line (adds to TOPICSTREAM_FEEDS)")
    ] = None,
    interval: Annotated[float | None, typer.Option(help="Seconds between two fetches of one feed")] = None,
    timeout: Annotated[float | None, typer.Option(help="Longest wait for one feed's answer, seconds")] = None,
    once: Annotated[bool, typer.Option("--once", help="Poll every feed once, then exit")] = False,
    bootstrap: Bootstrap = None,
    redis_url: RedisUrl = None,
    metrics_port: MetricsPort = None,
) -> None:
    """Poll RSS/Atom feeds and produce their new entries to the input topic, each article once. With --once, exits
    with 1 when a feed failed (after producing the others' entries)."""
    import redis

    from .feeds import FeedPoller, read_feed_list
    from .kafka import DeliveryError, ensure_topics, make_producer
    from .seen import SeenIds

    s = _settings(ctx)
    try:
        urls = read_feed_list(file, s.feeds or "")
    except (OSError, ValueError) as e:
        err.print(f"[red]feed list: {e}[/red] (the FILE argument or TOPICSTREAM_FEEDS)")
        raise typer.Exit(2) from None
    if not urls:
        err.print("[red]no feeds: pass a file of URLs or set TOPICSTREAM_FEEDS[/red]")
        raise typer.Exit(2)
    with unreachable_is_fatal(s):
        ensure_topics(s, {s.input_topic: 1})
        client = redis.Redis.from_url(s.redis_url, socket_timeout=30, socket_connect_timeout=10)
        check_types(client, s.redis_prefix)  # else the claim script's WRONGTYPE is retried for ever
        seen = SeenIds(client, s.redis_prefix, max_ids=s.feed_seen_max, max_age_s=s.feed_seen_days * 86400)
        poller = FeedPoller(
            urls,
            make_producer(s),
            s.input_topic,
            seen,
            interval_s=s.feed_interval_s,
            timeout_s=s.feed_timeout_s,
            backoff_max_s=s.feed_backoff_max_s,
        )
        serve_metrics(poller.metrics, s)
        when = "once" if once else f"every {s.feed_interval_s:g}s"
        err.print(f"polling {len(urls)} feed(s) {when} into {s.input_topic}")
        try:
            if once:
                n = poller.poll_once()
                err.print(f"produced {n} new entries to {s.input_topic}")
                if failed := poller.failed:  # for a cron job: a feed that fails is worth a non-zero exit
                    err.print(f"[red]{len(failed)} of {len(urls)} feeds failed: {', '.join(failed)}[/red]")
                    raise typer.Exit(1)
            else:
                poller.run(stop_on_signals())
        except DeliveryError as e:
            err.print(f"[red]{e}[/red] (TOPICSTREAM_KAFKA_BOOTSTRAP)")
            raise typer.Exit(3) from None
        finally:
            poller.close()


@app.command("topics")
def show_topics(
    ctx: typer.Context,
    redis_url: RedisUrl = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Show only the N most prevalent topics")] = None,
    show_empty: Annotated[
        bool, typer.Option("--all", help="Also show the empty topic slots (unused, or freed by topic hygiene)")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON, with the names and the recent topic events")
    ] = False,
) -> None:
    """Print the current topics (top words, prevalence, drift) from the newest snapshot in Redis."""
    from .lease import Lease
    from .lineage import LineageStore, render_lineage
    from .names import TopicNames
    from .snapshot import SnapshotStore

    s = _settings(ctx)
    with unreachable_is_fatal(s):
        store = SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix)
        summary = store.summary()
        names = TopicNames(store.r, s.redis_prefix).all()
        events = LineageStore(store.r, s.redis_prefix).recent(10)
        holder = Lease(store.r, s.redis_prefix).holder() if summary is None else None
    if summary is None:
        if holder is None:
            err.print(f"no snapshot under Redis prefix {s.redis_prefix!r} yet: is the learner running?")
        else:  # a cold start: learning, not yet snapshotted
            err.print(
                f"no snapshot under Redis prefix {s.redis_prefix!r} yet: the learner on {holder.host} (pid "
                f"{holder.pid}) holds the lease and writes its first snapshot once it has learned its first batch of "
                "articles (are articles arriving?)"
            )
        raise typer.Exit(1)
    if as_json:  # the summary, with the names as they are now and the recent lineage events
        for t in summary["topics"]:
            t.pop("name", None)
            if t["topic"] in names:
                t["name"] = names[t["topic"]]
        print(json.dumps({**summary, "lineage": [dataclasses.asdict(e) for e in events]}))
    else:
        Console().print(topics_table(summary, limit=limit, names=names, show_empty=show_empty))
        if events:
            Console().print("recent topic events (newest first):\n  " + "\n  ".join(render_lineage(events)))


def _subscription_start(
    topic: int | None, words: str | None, from_beginning: bool, since: str | None, after: list[str] | None
) -> tuple[int | None, dict[int, int]]:
    """``subscribe``'s flags checked (exit 2 or a bad parameter): where to start reading, as a broker timestamp in
    milliseconds (``--since``) or None, and the offsets ``--after`` resumes after, by partition."""
    from .follow import query_words
    from .report import parse_duration
    from .subscriber import parse_after

    if (topic is None) == (words is None):
        err.print("[red]give a topic id or --words (one of the two)[/red]")
        raise typer.Exit(2)
    try:
        # A duration reaching before 1970 asks for every output (a negative time is no broker's timestamp).
        start_ms = None if since is None else max(0, int((time.time() - parse_duration(since)) * 1000))
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--since") from None
    if start_ms is not None and from_beginning:
        raise typer.BadParameter("give --since or --from-beginning, not both", param_hint="--since")
    try:
        resume = parse_after(after or [])
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--after") from None
    if words is not None:
        try:
            query_words(words)
        except ValueError as e:
            err.print(f"[red]{e}[/red]")
            raise typer.Exit(2) from None
    return start_ms, resume


def _check_topic_followed(topic: int, store: SnapshotStore, lineage: LineageStore, asks_past: bool) -> bool:
    """Exit 2 unless ``topic`` names a topic now, or one that ended while ``asks_past`` (its outputs before its
    end are asked for); say so when it weighs under 1 %. Returns whether a snapshot exists (before the first one,
    any id is taken: the first snapshot holds ids 0…K−1)."""
    from .subscriber import topic_fate

    summary = store.summary()
    fate = topic_fate(topic, summary, lineage.known([topic]))
    if fate.now is None and not (fate.ended and asks_past):
        err.print(f"[red]{fate.why}: nothing to follow[/red]")
        raise typer.Exit(2)
    if fate.empty:
        err.print(fate.empty)
    return summary is not None


@app.command()
def subscribe(
    ctx: typer.Context,
    topic: Annotated[int | None, typer.Argument(help="Topic id to follow")] = None,
    words: Annotated[
        str | None, typer.Option("--words", "-w", help="Follow the topics these words mean (re-resolved per snapshot)")
    ] = None,
    max_topics: Annotated[int, typer.Option(help="Most topics followed for --words")] = 3,
    min_weight: Annotated[float, typer.Option(min=0.0, max=1.0, help="Least weight of the topic in the article")] = 0.0,
    from_beginning: Annotated[bool, typer.Option(help="Start from the oldest output")] = False,
    since: Annotated[
        str | None, typer.Option(help="Start with the outputs of this long ago (90s, 15m, 24h, 7d); default: now")
    ] = None,
    after: Annotated[
        list[str] | None,
        typer.Option(help="Resume a partition after the line with this PARTITION:OFFSET (repeatable)"),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Stop after N matching articles")] = None,
    bootstrap: Bootstrap = None,
    redis_url: RedisUrl = None,
) -> None:
    """Follow the articles tagged with a topic, or with the topics some words mean (one JSON line per article).
    Exits with 2 for an id that is no topic (or one that ended, unless --from-beginning, --since or --after asks for
    its past), and 4 once every id followed has ended (retired, its slot retaken) and the outputs that carried it are
    read."""

    import redis

    from .lineage import LineageEvent, LineageStore
    from .names import TopicNames
    from .snapshot import SnapshotStore
    from .subscriber import OutputReader, TopicChoice, matching_articles, move_notice

    start_ms, resume = _subscription_start(topic, words, from_beginning, since, after)
    s = _settings(ctx)
    stop = stop_on_signals("stopping")

    def show(matches: list[Any], summary: dict[str, Any]) -> None:
        if matches:
            err.print(matches_table(matches, words or "", summary.get("version")))
            background = {t["topic"] for t in summary.get("topics", []) if t.get("background")}
            for m in matches:
                if m.topic in background:
                    err.print(
                        f"[yellow]topic {m.topic} is the background topic: the words every article uses, which "
                        "outputs never list among their top topics, so it tags no article; give words of a "
                        "subject[/yellow]"
                    )
        else:
            err.print(f"no topic of snapshot v{summary.get('version')} has any of {words!r} yet; waiting")

    def moved(events: list[LineageEvent]) -> None:
        for e in events:
            err.print(move_notice(e))

    with unreachable_is_fatal(s):
        client = redis.Redis.from_url(s.redis_url, socket_timeout=30, socket_connect_timeout=10)
        check_types(client, s.redis_prefix)  # else a summary of another type looks like no snapshot, for ever
        store = SnapshotStore(client, prefix=s.redis_prefix)
        lineage = LineageStore(client, s.redis_prefix) if topic is not None else None
        no_snapshot = False
        if topic is not None and lineage is not None:
            asks_past = from_beginning or start_ms is not None or bool(resume)
            no_snapshot = not _check_topic_followed(topic, store, lineage, asks_past)
        choice = TopicChoice(
            store,
            TopicNames(client, s.redis_prefix),
            words=words,
            fixed=frozenset() if topic is None else frozenset({topic}),
            max_topics=max_topics,
            on_change=show,
            lineage=lineage,
            on_moved=moved,
        )
        if words is not None:
            no_snapshot = not choice.update() and choice.version is None
        if no_snapshot:
            err.print(f"no snapshot under Redis prefix {s.redis_prefix!r} yet; waiting for the learner")
        reader = OutputReader(s, s.output_topic, from_beginning, start_ms=start_ms, after=resume)
        try:
            if notice := reader.check():
                err.print(notice)
        except ValueError as e:
            reader.close()
            raise typer.BadParameter(str(e), param_hint="--after") from None
        seen = 0
        try:
            for line in matching_articles(reader, choice, min_weight, stop):
                if line is not None:
                    print(json.dumps(line), flush=True)
                    seen += 1
                    if limit is not None and seen >= limit:
                        break
        finally:
            reader.close()
        if choice.ended_at is not None and not stop.is_set():
            err.print("no topic followed is left: stopping")
            raise typer.Exit(4)


@app.command()
def label(
    ctx: typer.Context,
    topic: Annotated[int | None, typer.Argument(help="Topic id to name (none: list the names)")] = None,
    name: Annotated[str | None, typer.Argument(help='The name, e.g. "Oil prices"')] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Forget the topic's name")] = False,
    redis_url: RedisUrl = None,
) -> None:
    """Name a topic (kept in Redis with the model), forget a name with --clear, or list the names."""
    from .lineage import LineageStore
    from .names import TopicNames
    from .snapshot import SnapshotStore
    from .subscriber import topic_fate
    from .tables import names_table

    s = _settings(ctx)
    with unreachable_is_fatal(s):
        store = SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix)
        names = TopicNames(store.r, s.redis_prefix)
        if topic is None:
            if clear or name is not None:
                err.print("[red]--clear needs a topic id[/red]")
                raise typer.Exit(2)
            Console().print(names_table(names.all(), store.summary(), s.redis_prefix))
            return
        if clear == (name is not None):
            err.print('[red]give a name, e.g. topicstream label 3 "Oil prices", or --clear[/red]')
            raise typer.Exit(2)
        summary = store.summary()
        if summary is None:  # a mistyped prefix, or a learner that has not written a snapshot yet
            err.print(f"[red]no snapshot under Redis prefix {s.redis_prefix!r} yet: no topic to name[/red]")
            raise typer.Exit(1)
        fate = topic_fate(topic, summary, LineageStore(store.r, s.redis_prefix).known([topic]))
        if fate.why:  # not a topic of the newest snapshot (a merged one: its successor's name is the one shown)
            err.print(f"[red]{fate.why}{f': name topic {fate.now}' if fate.now is not None else ''}[/red]")
            raise typer.Exit(2)
        if clear:
            err.print(f"topic {topic}: name cleared" if names.clear(topic) else f"topic {topic} had no name")
            return
        assert name is not None
        try:
            stored = names.set(topic, name)
        except ValueError as e:
            err.print(f"[red]{e}[/red]")
            raise typer.Exit(2) from None
        err.print(f"topic {topic} is now {stored!r}")


@app.command()
def report(
    ctx: typer.Context,
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
    s = _settings(ctx)
    with unreachable_is_fatal(s):
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
    ctx: typer.Context,
    articles: Annotated[
        Path | None, typer.Option(help="JSONL(.gz) file of articles to replay; default: generated articles")
    ] = None,
    rate: Annotated[float, typer.Option(help="Articles per second")] = 500.0,
    algorithm: Algorithm = None,
    topics: Topics = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds")] = None,
) -> None:
    """`make run`: start a local broker + Redis (unless configured), stream articles, show live topics."""
    from .dev.demo import ChildFailed, run_demo

    s = _settings(ctx)
    try:
        with unreachable_is_fatal(s):
            run_demo(s, articles=articles, rate=rate, duration=duration, topics=topics)
    except ChildFailed as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(1) from None
