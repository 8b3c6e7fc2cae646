"""Settings every topicstream process understands.

Read from environment variables with the ``TOPICSTREAM_`` prefix (a ``.env`` file in the working directory is
read too; command-line flags override both) and validated once at start-up: a bad value stops the process with
one clear line per problem, naming the variable.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError  # a value its source cannot parse (bad JSON)

if TYPE_CHECKING:
    from .text import Tokenizer

__all__ = ["Settings", "SettingsError", "load_settings", "settings_table", "write_settings_table"]


class SettingsError(ValueError):
    """Raised with a human-readable, one-line-per-problem message."""


class Settings(BaseSettings):
    """All settings, with their defaults. See the README's settings table."""

    model_config = SettingsConfigDict(
        env_prefix="TOPICSTREAM_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        allow_inf_nan=False,  # "inf" seconds passed the gt=0 checks, then crashed a wait or a socket timeout
        env_ignore_empty=True,  # VAR= (compose passes a variable unset in the shell so) means the default
    )

    # Where things are.
    kafka_bootstrap: str = Field("localhost:9092", description="Kafka bootstrap servers, host:port[,host:port]")
    kafka_config: dict[str, str] = Field(
        default_factory=dict,
        description="Extra librdkafka settings as JSON, e.g. security.protocol (applied to every client)",
    )
    redis_url: str = Field("redis://localhost:6379/0", description="Redis for snapshots, redis://[:pw@]host:port/db")
    input_topic: str = Field("articles", description="Topic the articles are read from")
    output_topic: str = Field("article-topics", description="Topic the mixtures are written to")
    dlq_topic: str = Field("articles.dlq", description="Dead-letter topic for bad input")
    lineage_topic: str | None = Field(
        None,
        description="Topic the learner announces topic births, merges, splits and retirements on (key = topic id); "
        "default <TOPICSTREAM_OUTPUT_TOPIC>.lineage",
    )
    group_id: str | None = Field(
        None,
        description="The learner's consumer group (run), default <TOPICSTREAM_REDIS_PREFIX>-learner: learners of "
        "different prefixes never share partitions (each learner must read all of them)",
    )
    replica_group_id: str | None = Field(
        None,
        description="The replicas' consumer group (replica), default <TOPICSTREAM_GROUP_ID>-replicas, or "
        "<TOPICSTREAM_REDIS_PREFIX>-replicas; never the learner's (refused: a replica in the learner's group takes "
        "partitions the learner then never learns)",
    )

    # The model.
    algorithm: str = Field("scvb0", description="Kernel: scvb0, ohdp or pf")
    topics: int = Field(100, ge=1, le=10_000, description="Number of topics K (the truncation for ohdp)")
    kernel_params: dict[str, Any] = Field(
        default_factory=dict, description='Extra kernel hyperparameters as JSON, e.g. {"alpha": 0.05}'
    )
    vocab_size: int = Field(65_536, ge=16, le=5_000_000, description="Vocabulary capacity W (bounded)")
    stop_words_file: Path | None = Field(
        None,
        description="A UTF-8 file of more stop words, one or more per line, dropped besides scikit-learn's English "
        "ones (e.g. der, die, und for German wires); give the learner and the replicas the same file",
    )
    keep_words_file: Path | None = Field(
        None,
        description="A UTF-8 file of words never dropped as stop words, one or more per line, whatever list holds "
        "them (stopwords-iso's lists are broad: German jahr, menschen, Russian россия, война); give the learner "
        "and the replicas the same file",
    )
    stop_words_languages: str | None = Field(
        None,
        description="Languages (ISO 639-1 codes, comma-separated, e.g. de,fr,es) whose articles, by their language "
        "field (de-AT counts as de), lose that language's stop words (stopwords-iso) instead of the English ones; "
        "other articles keep the English list; give the learner and the replicas the same list",
    )
    duplicate_window: int = Field(
        100_000,
        ge=0,
        description="How many of the latest texts learned the learner remembers: an article whose text (its words "
        "and counts) is one of them gets its mixture without being learned again (a story syndicated under many "
        "ids would otherwise take the topics over); 0 learns every copy",
    )
    vocab_admit_count: float = Field(
        2.0, gt=0, description="Articles that must use a new word before it gets a slot (an article counts once)"
    )
    topic_hygiene: bool | None = Field(
        None,
        description="Merge duplicate topics and give freed slots to new ones with a snapshot "
        "(docs/topic-hygiene.md); default on, with each kernel's hygiene_defaults (pf: merges only)",
    )
    topic_hygiene_every_s: float = Field(
        60.0,
        gt=0,
        description="Topic hygiene is planned with a snapshot at most this often, seconds (on the snapshot "
        "writer's copy: one to three seconds of a core at K = 100, W = 65,536; the moves are made at the next "
        "snapshot, or, with held-out moves as in the online HDP's default, the whole plan at the one after)",
    )
    topic_hygiene_splits: int | None = Field(
        None,
        ge=0,
        le=16,
        description="Muddled topics topic hygiene may split per pass, into free slots (docs/topic-hygiene.md, "
        '"split"). Unset: each kernel\'s own number, ohdp 2 (it has no births); scvb0 0 (on the corpora measured so '
        "far splits did not beat births; its background slot is tried all the same, so that a desk it took can "
        "leave); pf none (it has no split move)",
    )
    topic_hygiene_near_merges: int = Field(
        0,
        ge=0,
        le=16,
        description="Pairs of near or co-occurring topics topic hygiene may try to merge per pass, each kept "
        "when document completion on the articles learned after the snapshot drops by under 0.01 nats per token of "
        'the pair (docs/topic-hygiene.md, "Near pairs"; 0: none — on 20 Newsgroups and BBC the merges cost '
        "0.002-0.007 nats per word of held-out likelihood; make run tries 4, so that one desk learned as two "
        "topics is joined)",
    )
    seed: int = Field(0, ge=0, description="Random seed of the kernel")

    # Batching and snapshots.
    batch_size: int = Field(500, ge=1, le=100_000, description="Most messages taken per consumer poll")
    batch_timeout_s: float = Field(
        0.05,
        gt=0,
        le=10,
        description="Longest wait for a batch to fill, seconds (a backlog fills batches at once; a quiet stream "
        "should not wait; a stop waits for it, so at most 10)",
    )
    max_unacked_batches: int = Field(
        20,
        ge=1,
        description="Published batches that may wait for the broker's acknowledgements; at this many the worker "
        "reads no more input until some are acknowledged (an output topic that stops acknowledging must not fill "
        "memory)",
    )
    snapshot_every_batches: int = Field(
        1000,
        ge=1,
        description="Snapshot N^Φ to Redis every N batches (a bound for tests and tiny models; a quiet stream makes "
        "batches of a few articles, so a small N would snapshot many times a second) ...",
    )
    snapshot_every_s: float = Field(30.0, gt=0, description="... or every T seconds, whichever comes first")
    snapshot_keep: int = Field(3, ge=1, description="Snapshot versions kept in Redis")
    snapshot_ttl_s: int = Field(
        120,
        ge=60,
        description="Expiry of a superseded snapshot, seconds: long enough for a replica to finish loading it; Redis "
        "holds up to TOPICSTREAM_SNAPSHOT_KEEP plus the versions written in this time",
    )
    redis_prefix: str = Field("topicstream", description="Prefix of every Redis key")
    lease_ttl_s: float = Field(
        10.0,
        ge=1.0,
        le=300.0,
        description="Lease of the one active learner per Redis prefix: a standby takes over this long after the "
        "active one stops renewing it",
    )

    # Input and output.
    max_article_bytes: int = Field(1_000_000, ge=64, description="Larger messages are dead-lettered")
    dlq_max_bytes: int = Field(
        524_288,
        ge=0,
        le=900_000,
        description="Dead letters carry at most this many bytes of the original value (the rest is cut, and "
        "headers say so); keep it under the dead-letter topic's max.message.bytes",
    )
    top_topics_threshold: float = Field(0.1, ge=0, le=1, description="Least weight for a topic in top_topics")
    top_topics_max: int = Field(3, ge=1, description="Most entries in top_topics")
    learner_publish: bool = Field(
        True,
        description="The learner publishes mixtures; false when replicas run (they publish, see deploy/README.md)",
    )

    # Operations.
    metrics_port: int = Field(9100, ge=0, le=65535, description="Port of /metrics (0 disables)")
    metrics_host: str = Field("0.0.0.0", min_length=1, description="Address /metrics binds to, e.g. 127.0.0.1")
    api_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Port of a replica's HTTP inference API, POST /v1/mixtures and GET /v1/model (0 disables; "
        "README, HTTP inference)",
    )
    api_only: bool = Field(
        False,
        description="A replica that only answers HTTP (needs TOPICSTREAM_API_PORT): it reads no Kafka topic, so any "
        "number of them can run, beyond the input's partitions",
    )
    api_host: str = Field("0.0.0.0", min_length=1, description="Address the HTTP inference API binds to")
    api_threads: int = Field(4, ge=1, le=64, description="Requests the HTTP inference API answers at once")
    api_max_bytes: int = Field(
        4_000_000, ge=1024, description="Largest request body of the HTTP inference API (larger: 413)"
    )
    max_poll_interval_ms: int = Field(300_000, ge=1000, le=86_400_000, description="Kafka max.poll.interval.ms")
    session_timeout_ms: int = Field(45_000, ge=1000, le=3_600_000, description="Kafka session.timeout.ms")
    fetch_wait_ms: int = Field(
        500,
        ge=1,
        le=30_000,  # well under librdkafka's socket.timeout.ms (60 s): a broker that holds the whole wait
        description="Kafka fetch.wait.max.ms of every consumer: how long the broker may hold a fetch that finds no "
        "new data. Kafka answers as soon as data arrives; Tansu holds such a fetch the whole wait (latency), and "
        "answers a wait shorter than its growing in-memory log takes to read with no records at all (README, "
        "Latency and throughput)",
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")

    # Feeds (topicstream feeds).
    feeds: str | None = Field(
        None, description="RSS/Atom feed URLs for topicstream feeds, separated by spaces or commas"
    )
    feed_interval_s: float = Field(300.0, gt=0, description="Seconds between two fetches of one feed")
    feed_timeout_s: float = Field(10.0, gt=0, description="Longest wait for one feed's answer, seconds")
    feed_backoff_max_s: float = Field(3600.0, gt=0, description="Longest wait before retrying a failing feed, seconds")
    feed_seen_max: int = Field(1_000_000, ge=1, description="Article ids remembered to skip repeats (newest kept)")
    feed_seen_days: float = Field(
        30.0, gt=0, description="Days an article id is remembered (> an entry's life in a feed)"
    )

    @field_validator("kafka_config", mode="before")
    @classmethod
    def _config_values_as_strings(cls, v: Any) -> Any:
        """librdkafka takes every value as a string: ``{"message.max.bytes": 10000000}`` and ``true`` are written as
        JSON numbers and booleans, and mean "10000000" and "true"."""
        if not isinstance(v, dict):
            return v
        scalar = (bool, int, float)
        return {
            k: (str(x).lower() if isinstance(x, bool) else str(x)) if isinstance(x, scalar) else x for k, x in v.items()
        }

    @field_validator("kafka_bootstrap")
    @classmethod
    def _check_bootstrap(cls, v: str) -> str:
        for part in v.split(","):
            host, sep, port = part.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected host:port[,host:port], got {v!r}")
        return v

    @field_validator("redis_url")
    @classmethod
    def _check_redis(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("expected redis://[:password@]host:port/db, rediss://... or unix://...")
        from redis.connection import parse_url

        try:
            parse_url(v)  # what the client will do with it: a bad port, say, is a settings error, not a traceback
        except ValueError as e:
            raise ValueError(f"{e} (expected redis://[:password@]host:port/db)") from None
        return v

    @field_validator("algorithm")
    @classmethod
    def _check_algorithm(cls, v: str) -> str:
        from kernels.registry import ALGORITHM_NAMES  # names only: numba is not imported

        if v not in ALGORITHM_NAMES:
            raise ValueError(f"unknown algorithm {v!r}; choose one of {', '.join(sorted(ALGORITHM_NAMES))}")
        return v

    @field_validator("stop_words_file", "keep_words_file")
    @classmethod
    def _readable(cls, v: Path | None) -> Path | None:
        if v is not None:
            try:
                v.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise ValueError(f"cannot read {v}: {e}") from None
        return v

    @field_validator("stop_words_languages")
    @classmethod
    def _check_languages(cls, v: str | None) -> str | None:
        from .text import language_key, language_stop_words

        codes = sorted({key for code in (v or "").split(",") if (key := language_key(code))})  # de-AT is de
        for code in codes:
            language_stop_words(code)  # a ValueError names the languages there are
        return ",".join(codes) or None

    def tokenizer(self) -> Tokenizer:
        """The tokenizer of the learner and the replicas: English stop words, those of ``stop_words_file``, and
        each of ``stop_words_languages``' for its articles, less the words of ``keep_words_file``."""
        from .text import Tokenizer, read_stop_words

        return Tokenizer(
            extra_stop_words=read_stop_words(self.stop_words_file) if self.stop_words_file else (),
            languages=self.stop_words_languages.split(",") if self.stop_words_languages else (),
            keep_words=read_stop_words(self.keep_words_file) if self.keep_words_file else (),
        )

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, v: str) -> str:
        if v.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError(f"expected DEBUG, INFO, WARNING or ERROR, got {v!r}")
        return v.upper()

    @model_validator(mode="after")
    def _check_topics_differ(self) -> Settings:
        names = {
            "TOPICSTREAM_INPUT_TOPIC": self.input_topic,
            "TOPICSTREAM_OUTPUT_TOPIC": self.output_topic,
            "TOPICSTREAM_DLQ_TOPIC": self.dlq_topic,
            "TOPICSTREAM_LINEAGE_TOPIC": self.lineage_topic_name(),
        }
        for topic in dict.fromkeys(names.values()):
            clash = [var for var, name in names.items() if name == topic]
            if len(clash) > 1:
                raise ValueError(
                    f"{' and '.join(clash)} both name {topic!r}: the input, output, dead-letter and lineage topics "
                    "must differ"
                )
        return self

    @model_validator(mode="after")
    def _check_groups_differ(self) -> Settings:
        if self.replica_group() == self.learner_group():
            raise ValueError(
                f"TOPICSTREAM_REPLICA_GROUP_ID and TOPICSTREAM_GROUP_ID both name {self.learner_group()!r}: a replica "
                "in the learner's consumer group takes partitions the learner then never learns"
            )
        return self

    def lineage_topic_name(self) -> str:
        """Where lineage events go (:mod:`service.lineage`): the setting, or the output topic + ``.lineage``."""
        return self.lineage_topic or f"{self.output_topic}.lineage"

    def learner_group(self) -> str:
        """The learner's consumer group: one per prefix (one model), whatever else reads the input topic."""
        return self.group_id or f"{self.redis_prefix}-learner"

    def replica_group(self) -> str:
        """The replicas' consumer group: the replicas of one prefix share the partitions. Never the learner's, also
        when ``group_id`` names it (one setting for both roles, e.g. in a shared ``.env`` or ConfigMap): a replica
        in the learner's group took partitions the learner then never learned (200 of 300 articles lost, in a
        test)."""
        if self.replica_group_id:
            return self.replica_group_id
        return f"{self.group_id}-replicas" if self.group_id else f"{self.redis_prefix}-replicas"


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (and ``.env``), with ``overrides`` (e.g. CLI flags) on top.

    Raises :class:`SettingsError` listing every bad value as ``TOPICSTREAM_NAME: problem``.
    """
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except SourceError as e:  # a complex value (JSON) that does not parse, before validation
        field = re.search(r'field "(\w+)"', str(e))
        name = "TOPICSTREAM_" + field[1].upper() if field else "settings"
        why = f"{e.__cause__}" if e.__cause__ is not None else str(e)  # the value is not shown: it may hold secrets
        raise SettingsError(f"invalid settings:\n  {name}: not valid JSON: {why}") from None
    except ValidationError as e:
        from .redact import redact_config, redact_url  # secrets never reach a message

        lines = []
        for err in e.errors(include_url=False):
            loc = [str(p) for p in err["loc"]]
            if not loc:  # a check of several settings: its message names them; its input is every setting
                lines.append(str(err["msg"]).removeprefix("Value error, "))
                continue
            name = "TOPICSTREAM_" + "_".join(loc).upper()
            got = err.get("input")
            if loc[:1] == ["kafka_config"]:
                got = redact_config(got) if isinstance(got, dict) else "***"
            elif isinstance(got, str) and "://" in got:
                got = redact_url(got)
            msg = err["msg"]
            if isinstance(err.get("input"), str) and "://" in err["input"]:
                msg = msg.replace(err["input"], redact_url(err["input"]))
            lines.append(f"{name}: {msg} (got {got!r})")
        raise SettingsError("invalid settings:\n  " + "\n  ".join(lines)) from None


# ------------------------------------------------------------------------------------------ the README's table
_TABLE_HEAD = "| variable | default | meaning |\n|---|---|---|\n"


def _default_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, dict):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def settings_table() -> str:
    """The settings table of the README (Markdown), generated from :class:`Settings`' fields.

    ``tests/test_settings.py`` fails when the README's table differs; ``python -m service.settings README.md``
    rewrites it in place.
    """
    rows = []
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        meaning = (field.description or "").replace("|", "\\|")
        rows.append(f"| `TOPICSTREAM_{name.upper()}` | {_default_text(default)} | {meaning} |\n")
    return _TABLE_HEAD + "".join(rows)


def write_settings_table(readme: Path) -> bool:
    """Replace the settings table in ``readme`` by :func:`settings_table`; return whether the file changed."""
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(_TABLE_HEAD) + r"(?:\|[^\n]*\n)*")
    if not pattern.search(text):
        raise ValueError(f"{readme} has no settings table starting with {_TABLE_HEAD.splitlines()[0]!r}")
    new = pattern.sub(lambda _m: settings_table(), text, count=1)
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":  # python -m service.settings README.md
    for arg in sys.argv[1:]:
        print(f"{arg}: {'updated' if write_settings_table(Path(arg)) else 'up to date'}")
