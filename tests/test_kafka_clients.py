"""The Kafka clients without a broker: their configuration (librdkafka checks it when a client is created, before
it connects), their log lines, and commands that start where no broker answers."""

from __future__ import annotations

import logging
import time

import pytest
import typer
from typer.testing import CliRunner

from service import kafka
from service.cli import app
from service.cli_errors import unreachable_is_fatal
from service.dev.localstack import free_port
from service.kafka import OncePerWindow, make_consumer
from service.settings import Settings


def test_max_poll_interval_alone_in_kafka_config_makes_a_consumer() -> None:
    """The tip for brokers whose group joins wait on max.poll.interval.ms: set it in TOPICSTREAM_KAFKA_CONFIG. The
    session timeout (45 s by default) follows it down; librdkafka refuses a session longer than the poll interval
    (the consumer could not be created at all)."""
    s = Settings(kafka_config={"max.poll.interval.ms": "6000"})
    consumer = make_consumer(s, "g")
    consumer.close()
    s = Settings(kafka_config={"max.poll.interval.ms": "6000", "session.timeout.ms": "45000"})
    with pytest.raises(typer.Exit) as e, unreachable_is_fatal(s):
        make_consumer(s, "g")  # both set by hand: the operator's own contradiction, named as such
    assert e.value.exit_code == 2


def test_a_configuration_librdkafka_refuses_is_exit_2_naming_kafka_config(capsys: pytest.CaptureFixture[str]) -> None:
    """Not "cannot reach the broker" (exit 3, blaming TOPICSTREAM_KAFKA_BOOTSTRAP) as before."""
    s = Settings(kafka_config={"no.such.key": "1"})
    with pytest.raises(typer.Exit) as e, unreachable_is_fatal(s):
        make_consumer(s, "g")
    assert e.value.exit_code == 2
    line = capsys.readouterr().err.strip()
    assert (
        line == 'Kafka client configuration: No such configuration property: "no.such.key" (TOPICSTREAM_KAFKA_CONFIG)'
    )


def test_repeated_log_lines_go_through_once_a_window_then_say_how_many_were_held() -> None:
    f = OncePerWindow(window_s=0.2)

    def line(port: int, after_ms: int) -> logging.LogRecord:
        msg = "127.0.0.1:%d/bootstrap: Connect failed: Connection refused (after %dms in state CONNECT)"
        return logging.LogRecord("librdkafka", logging.ERROR, "", 0, msg, (port, after_ms), None)

    passed = [f.filter(line(9092, i)) for i in range(50)]
    assert passed == [True] + [False] * 49  # the numbers differ, the kind is the same
    assert f.filter(logging.LogRecord("librdkafka", logging.ERROR, "", 0, "another kind", None, None))
    time.sleep(0.25)
    record = line(9092, 7)
    assert f.filter(record)
    assert record.getMessage().endswith("(after 7ms in state CONNECT) (49 more like it in the last minute)")


@pytest.mark.parametrize(
    "command", [["replica", "--metrics-port", "0"], ["run", "--no-create-topics", "--metrics-port", "0"], ["produce"]]
)
def test_a_service_started_where_no_broker_answers_says_so_in_one_line(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Exit 3 naming the bootstrap (they retried quietly for ever before; ``run`` with topic creation did not).
    librdkafka's own connection failure comes at most once, through logging: the admin clients of the start-up
    checks wrote it straight to stderr, about 20 times a second (578 lines in the 30 s the check waits)."""
    monkeypatch.setattr(kafka, "CONNECT_TIMEOUT_S", 2.0)
    where = f"127.0.0.1:{free_port()}"  # nobody listens there
    result = CliRunner().invoke(app, [*command, "--bootstrap", where], input="")
    assert result.exit_code == 3, result.output
    assert f"Kafka at {where}:" in result.output and "TOPICSTREAM_KAFKA_BOOTSTRAP" in result.output
    assert "Traceback" not in result.output
    assert f"Connect to ipv4#{where}" not in capfd.readouterr().err  # nothing written past logging (other
    # tests' clients may still be writing there, about their own addresses)
    assert result.output.count("Connect to") <= 1


def test_the_consumers_fetch_wait_is_a_setting_that_kafka_config_can_still_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka's 500 ms by default: with the 50 ms the consumers once asked for, a learner on the local broker
    (Tansu) stopped reading for good once that broker's in-memory log took longer than the wait to read (README,
    "Latency and throughput"). The tests, whose logs stay small, ask for 50 ms."""
    confs: list[dict[str, object]] = []
    monkeypatch.setattr(kafka, "_Consumer", confs.append)
    make_consumer(Settings(), "g")
    make_consumer(Settings(fetch_wait_ms=50), "g")
    make_consumer(Settings(fetch_wait_ms=50, kafka_config={"fetch.wait.max.ms": "700"}), "g")
    assert [c["fetch.wait.max.ms"] for c in confs] == [500, 50, "700"]
