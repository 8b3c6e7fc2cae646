"""Settings are validated at start-up with one clear line per bad value."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.settings import SettingsError, load_settings


def test_environment_is_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICSTREAM_KAFKA_BOOTSTRAP", "k1:9092,k2:9093")
    monkeypatch.setenv("TOPICSTREAM_TOPICS", "42")
    monkeypatch.setenv("TOPICSTREAM_KERNEL_PARAMS", '{"alpha": 0.05}')
    s = load_settings()
    assert s.kafka_bootstrap == "k1:9092,k2:9093" and s.topics == 42 and s.kernel_params == {"alpha": 0.05}
    assert load_settings(topics=7).topics == 7  # flags override the environment
    assert s.learner_group() == "topicstream-learner" and s.replica_group() == "topicstream-replicas"


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


def test_topics_must_differ() -> None:
    with pytest.raises(SettingsError, match="must differ"):
        load_settings(output_topic="articles")


def test_cli_exits_2_with_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICSTREAM_TOPICS", "-3")
    result = CliRunner().invoke(app, ["run"])
    assert result.exit_code == 2
    assert "TOPICSTREAM_TOPICS" in result.output


def test_unreachable_redis_is_one_clear_line_and_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.localstack import free_port

    monkeypatch.setenv("TOPICSTREAM_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    result = CliRunner().invoke(app, ["topics"])
    assert result.exit_code == 3
    assert "cannot reach Redis" in result.output and "TOPICSTREAM_REDIS_URL" in result.output
