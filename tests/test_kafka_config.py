"""The Kafka clients' configuration as built from the settings (no broker: librdkafka checks a configuration when
a client is created, before it connects)."""

from __future__ import annotations

import pytest
import typer

from service.cli_errors import unreachable_is_fatal
from service.kafka import make_consumer
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
