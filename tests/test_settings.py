"""Settings are validated at start-up with one clear line per bad value."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.settings import Settings, SettingsError, load_settings


def test_environment_is_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICSTREAM_KAFKA_BOOTSTRAP", "k1:9092,k2:9093")
    monkeypatch.setenv("TOPICSTREAM_TOPICS", "42")
    monkeypatch.setenv("TOPICSTREAM_KERNEL_PARAMS", '{"alpha": 0.05}')
    s = load_settings()
    assert s.kafka_bootstrap == "k1:9092,k2:9093" and s.topics == 42 and s.kernel_params == {"alpha": 0.05}
    assert load_settings(topics=7).topics == 7  # flags override the environment
    assert s.learner_group() == "topicstream-learner" and s.replica_group() == "topicstream-replicas"


def test_kafka_config_takes_json_numbers_and_booleans_as_librdkafka_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``{"message.max.bytes": 10000000}`` is what a person writes (and what large articles need); it was
    refused with "Input should be a valid string"."""
    monkeypatch.setenv("TOPICSTREAM_KAFKA_CONFIG", '{"message.max.bytes": 10000000, "enable.idempotence": true}')
    s = load_settings()
    assert s.kafka_config == {"message.max.bytes": "10000000", "enable.idempotence": "true"}


def test_every_bad_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICSTREAM_KAFKA_BOOTSTRAP", "no-port")
    monkeypatch.setenv("TOPICSTREAM_TOPICS", "0")
    monkeypatch.setenv("TOPICSTREAM_ALGORITHM", "lsa")
    monkeypatch.setenv("TOPICSTREAM_REDIS_URL", "http://x")
    with pytest.raises(SettingsError) as e:
        load_settings()
    msg = str(e.value)
    for name in (
        "TOPICSTREAM_KAFKA_BOOTSTRAP",
        "TOPICSTREAM_TOPICS",
        "TOPICSTREAM_ALGORITHM",
        "TOPICSTREAM_REDIS_URL",
    ):
        assert name in msg
    assert "scvb0" in msg  # the message lists the valid algorithms


def test_an_empty_variable_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker-compose passes ``TOPICSTREAM_KERNEL_PARAMS`` through; set but empty in the shell, it stopped every
    process ("not valid JSON") in a restart loop."""
    for name in (
        "TOPICSTREAM_KERNEL_PARAMS",
        "TOPICSTREAM_KAFKA_CONFIG",
        "TOPICSTREAM_TOPICS",
        "TOPICSTREAM_LINEAGE_TOPIC",
    ):
        monkeypatch.setenv(name, "")
    s = load_settings()
    assert s.kernel_params == {} and s.kafka_config == {} and s.topics == Settings().topics
    assert s.lineage_topic_name() == f"{s.output_topic}.lineage"


def test_a_value_librdkafka_or_a_stop_cannot_take_is_named_as_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka's range error blamed TOPICSTREAM_KAFKA_CONFIG; a batch wait of an hour held SIGTERM for it."""
    monkeypatch.setenv("TOPICSTREAM_MAX_POLL_INTERVAL_MS", "100000000")
    monkeypatch.setenv("TOPICSTREAM_BATCH_TIMEOUT_S", "3600")
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert "TOPICSTREAM_MAX_POLL_INTERVAL_MS" in str(e.value) and "TOPICSTREAM_BATCH_TIMEOUT_S" in str(e.value)


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_a_time_that_is_not_finite_is_a_bad_setting(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """ "inf" passed ``gt=0`` and crashed ``feeds`` later (a socket timeout, a wait); it is refused at the start."""
    monkeypatch.setenv("TOPICSTREAM_FEED_TIMEOUT_S", value)
    monkeypatch.setenv("TOPICSTREAM_FEED_INTERVAL_S", value)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert "TOPICSTREAM_FEED_TIMEOUT_S" in str(e.value) and "TOPICSTREAM_FEED_INTERVAL_S" in str(e.value)


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("TOPICSTREAM_KAFKA_CONFIG", '{"sasl.password": "hunter2",', "Expecting property name"),
        ("TOPICSTREAM_KERNEL_PARAMS", "{bad", "Expecting property name"),
        ("TOPICSTREAM_KAFKA_CONFIG", "notjson", "Expecting value"),
    ],
)
def test_json_that_does_not_parse_is_named_without_its_value(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, why: str
) -> None:
    """The README asks for hand-written JSON in these two: a typo is a one-line refusal naming the variable (it
    was a 150-line traceback), and the value, which may hold a password, is not echoed."""
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert str(e.value).startswith(f"invalid settings:\n  {name}: not valid JSON: ")
    assert str(e.value).count("\n") == 1
    assert why in str(e.value) and "hunter2" not in str(e.value) and value not in str(e.value)


def test_topics_must_differ_and_the_message_names_them_without_the_other_settings() -> None:
    """A check of several settings once printed every setting as its input, passwords included."""
    with pytest.raises(SettingsError, match="must differ") as e:
        load_settings(
            output_topic="articles.dlq",
            redis_url="redis://:hunter2@cache:6379/0",
            kafka_config={"sasl.password": "s3cret"},
        )
    msg = str(e.value)
    assert "TOPICSTREAM_OUTPUT_TOPIC and TOPICSTREAM_DLQ_TOPIC both name 'articles.dlq'" in msg
    assert "hunter2" not in msg and "s3cret" not in msg


def test_cli_exits_2_with_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICSTREAM_TOPICS", "-3")
    result = CliRunner().invoke(app, ["run"])
    assert result.exit_code == 2
    assert "TOPICSTREAM_TOPICS" in result.output


@pytest.mark.parametrize(
    ("flag", "bad", "name"),
    [
        ("--bootstrap", "no-port", "TOPICSTREAM_KAFKA_BOOTSTRAP"),
        ("--redis-url", "http://x", "TOPICSTREAM_REDIS_URL"),
        ("--metrics-port", "99999", "TOPICSTREAM_METRICS_PORT"),
        ("--algorithm", "lsa", "TOPICSTREAM_ALGORITHM"),
        ("--topics", "0", "TOPICSTREAM_TOPICS"),
        ("--interval", "-1", "TOPICSTREAM_FEED_INTERVAL_S"),
        ("--timeout", "0", "TOPICSTREAM_FEED_TIMEOUT_S"),
    ],
)
def test_every_flag_overrides_its_setting(flag: str, bad: str, name: str) -> None:
    """In every command that takes the flag (but ``eval``, whose --algorithm and --topics are its own: it reads
    no settings), a value the setting refuses stops the command before it connects to anything, naming the
    setting."""
    import typer.main

    commands = typer.main.get_command(app).commands.items()  # type: ignore[attr-defined]
    taking = [c for c, command in commands if c != "eval" and any(flag in p.opts for p in command.params)]
    assert taking
    for command in taking:
        topic = ["1"] if command == "subscribe" else []  # subscribe checks its topic before the settings
        result = CliRunner().invoke(app, [command, *topic, flag, bad])
        assert result.exit_code == 2 and name in result.output, (command, result.output)


def test_unreachable_redis_is_one_clear_line_and_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.dev.localstack import free_port

    monkeypatch.setenv("TOPICSTREAM_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    result = CliRunner().invoke(app, ["topics"])
    assert result.exit_code == 3
    assert "cannot reach Redis" in result.output and "TOPICSTREAM_REDIS_URL" in result.output


def test_validating_settings_does_not_import_numba() -> None:
    """Nor does loading the CLI: `topicstream topics` never runs a kernel."""
    import subprocess
    import sys

    code = (
        "import sys; from service.settings import load_settings; s = load_settings(algorithm='pf'); "
        "import service.compat, service.cli; print(s.algorithm, 'numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["pf", "False"]


def test_the_registry_names_every_kernel() -> None:
    from kernels import ALGORITHMS
    from kernels.registry import ALGORITHM_NAMES, kernel_class

    assert set(ALGORITHM_NAMES) == set(ALGORITHMS)
    for name in ALGORITHM_NAMES:
        assert kernel_class(name) is ALGORITHMS[name] and ALGORITHMS[name].algorithm == name
    with pytest.raises(KeyError, match="choose one of scvb0, ohdp, pf"):
        kernel_class("lsa")


def test_the_readme_settings_table_is_generated_from_the_code() -> None:
    from service.settings import Settings, settings_table

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = settings_table()
    assert table in readme, "README.md's settings table is stale: python -m service.settings README.md"
    assert table.count("\n") == len(Settings.model_fields) + 2


def test_metrics_host_is_a_setting() -> None:
    assert load_settings().metrics_host == "0.0.0.0"
    assert load_settings(metrics_host="127.0.0.1").metrics_host == "127.0.0.1"
    with pytest.raises(SettingsError, match="TOPICSTREAM_METRICS_HOST"):
        load_settings(metrics_host="")


@pytest.mark.parametrize("command", ["run", "replica"])
def test_bad_kernel_params_exit_2_with_one_line_each(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    monkeypatch.setenv("TOPICSTREAM_KERNEL_PARAMS", '{"alpa": 0.1, "phi_kappa": 3}')
    result = CliRunner().invoke(app, [command])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        "invalid settings:",
        "  TOPICSTREAM_KERNEL_PARAMS: unknown parameter 'alpa' for scvb0; did you mean 'alpha'?",
        "  TOPICSTREAM_KERNEL_PARAMS: phi_kappa must be in (0.0, 1.0], got 3",
    ]


def test_a_model_that_cannot_fit_exits_2_before_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICSTREAM_VOCAB_SIZE", "5000000")
    monkeypatch.setenv("TOPICSTREAM_TOPICS", "1000")
    result = CliRunner().invoke(app, ["run"])  # no broker: it would exit 3 if it got that far
    assert result.exit_code == 2
    assert "TOPICSTREAM_VOCAB_SIZE × TOPICSTREAM_TOPICS" in result.output and "proto-max-bulk-len" in result.output
    assert "Traceback" not in result.output


def test_eval_checks_its_params_before_reading_articles(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text("")
    result = CliRunner().invoke(app, ["eval", "--train", str(train), "--param", "alpa=0.1"])
    assert result.exit_code == 2
    assert "--param: unknown parameter 'alpa' for scvb0; did you mean 'alpha'?" in result.output


def test_a_bad_setting_never_prints_a_secret() -> None:
    """A wrong Redis URL or a bad librdkafka value is named, but its password is masked in the message."""
    for overrides in (
        {"redis_url": "http://:hunter2@cache:6379/0"},
        {"redis_url": "redis://:hunter2@cache:63x9/0"},  # a port the client cannot read: a settings error too
        {"kafka_config": {"sasl.password": ["hunter2"], "sasl.username": "svc"}},  # a list: no librdkafka value
    ):
        with pytest.raises(SettingsError) as e:
            load_settings(**overrides)
        assert "hunter2" not in str(e.value)
        assert "TOPICSTREAM_" in str(e.value)


def test_consumer_groups_follow_the_prefix_unless_named() -> None:
    """Two learners on two prefixes (two models) must not split the input's partitions between them."""
    assert Settings().learner_group() == "topicstream-learner" and Settings().replica_group() == "topicstream-replicas"
    other = Settings(redis_prefix="desk-b")
    assert other.learner_group() == "desk-b-learner" and other.replica_group() == "desk-b-replicas"
    named = Settings(redis_prefix="desk-b", group_id="mine")
    # One setting read by both roles (a shared .env): the replicas must not join the learner's group.
    assert named.learner_group() == "mine" and named.replica_group() == "mine-replicas"
    exact = Settings(group_id="mine", replica_group_id="theirs")  # a name an ACL gives, say
    assert exact.learner_group() == "mine" and exact.replica_group() == "theirs"
    with pytest.raises(SettingsError, match="TOPICSTREAM_REPLICA_GROUP_ID and TOPICSTREAM_GROUP_ID both name 'g'"):
        load_settings(group_id="g", replica_group_id="g")
    with pytest.raises(SettingsError, match="both name 'desk-b-learner'"):
        load_settings(redis_prefix="desk-b", replica_group_id="desk-b-learner")


def test_stop_word_languages_are_read_by_the_service_tokenizer_or_named_when_unknown() -> None:
    s = load_settings(stop_words_languages=" de, FR,de ")
    assert s.stop_words_languages == "de,fr"
    tok = s.tokenizer()
    assert tok("der Krieg und the war", language="de") == ["krieg", "the"]
    assert tok("der Krieg und the war") == ["der", "krieg", "und", "war"]
    none = load_settings(stop_words_languages=" , ")
    assert none.stop_words_languages is None
    assert none.tokenizer().fingerprint() == load_settings().tokenizer().fingerprint()
    with pytest.raises(SettingsError, match=r"TOPICSTREAM_STOP_WORDS_LANGUAGES: .*no stop words for language 'xx'"):
        load_settings(stop_words_languages="de,xx")
    assert load_settings(stop_words_languages="de-AT, fr_CA").stop_words_languages == "de,fr"  # as articles say


def test_a_keep_words_file_gives_words_back_from_every_list(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("Jahr said\n", encoding="utf-8")
    tok = load_settings(keep_words_file=str(tmp_path / "keep.txt"), stop_words_languages="de").tokenizer()
    assert tok("das Jahr", language="de") == ["jahr"] and tok("he said") == ["said"]
    with pytest.raises(SettingsError, match=r"TOPICSTREAM_KEEP_WORDS_FILE: .*cannot read"):
        load_settings(keep_words_file=str(tmp_path / "missing.txt"))


def test_a_stop_word_file_is_read_by_the_service_tokenizer_or_named_when_unreadable(tmp_path: Path) -> None:
    (tmp_path / "de.txt").write_text("der und\n", encoding="utf-8")
    tok = load_settings(stop_words_file=str(tmp_path / "de.txt")).tokenizer()
    assert tok("der Präsident und the Koalition") == ["präsident", "koalition"]
    (tmp_path / "latin1.txt").write_bytes(b"\xfcber\n")
    for bad in (tmp_path / "missing.txt", tmp_path / "latin1.txt"):
        with pytest.raises(SettingsError, match=r"TOPICSTREAM_STOP_WORDS_FILE: .*cannot read"):
            load_settings(stop_words_file=str(bad))
