"""Secrets never reach a log line (``service.redact``). With a real password-protected Redis: see
tests/integration/test_snapshot_faults.py."""

from __future__ import annotations

import pytest

from service.redact import MASK, redact_config, redact_url, scrub


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:s3cret@redis:6379/0", "redis://***@redis:6379/0"),
        ("rediss://app:s3cret@cache.example.com:6380/2", "rediss://***@cache.example.com:6380/2"),
        ("redis://app@redis:6379/0", "redis://***@redis:6379/0"),  # user info alone is hidden too
        ("redis://:p%40ss@redis/0", "redis://***@redis/0"),
        ("redis://redis:6379/0?password=s3cret&db=1", "redis://redis:6379/0?password=***&db=1"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("unix:///tmp/redis.sock?db=0", "unix:///tmp/redis.sock?db=0"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_url_never_raises_on_garbage() -> None:
    garbled = "redis://:s3cret@[::1"  # urlsplit: "Invalid IPv6 URL"
    assert "s3cret" not in redact_url(garbled)
    assert redact_url("not a url") == "not a url"


@pytest.mark.parametrize(
    "name",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.jaas.config",
    ],
)
def test_redact_config_masks_secret_settings_by_name(name: str) -> None:
    cfg = {"bootstrap.servers": "kafka:9093", name: "principal=svc secret=x"}
    assert redact_config(cfg) == {"bootstrap.servers": "kafka:9093", name: MASK}
    assert cfg[name] == "principal=svc secret=x"  # a copy: the config itself is untouched


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", "svc"),
        ("ssl.certificate.pem", "-----BEGIN CERTIFICATE-----..."),
    ],
)
def test_redact_config_keeps_other_settings(name: str, value: str) -> None:
    assert redact_config({name: value}) == {name: value}


def test_redact_config_masks_the_credentials_of_url_values() -> None:
    cfg = {"schema.registry.url": "https://u:regpass@registry:8081"}
    assert redact_config(cfg) == {"schema.registry.url": "https://***@registry:8081"}


def test_scrub_removes_the_password_and_the_url_from_any_message() -> None:
    url = "redis://:p%40ss w0rd@redis:6379/0"
    message = f"Error connecting to {url} with password p@ss w0rd (or p%40ss w0rd)"
    out = scrub(message, url)
    assert "p@ss" not in out and "p%40ss" not in out and "w0rd" not in out
    assert "redis:6379" in out
    assert scrub("nothing to hide", "redis://localhost/0") == "nothing to hide"


@pytest.mark.parametrize("url", ["redis://:hunter2@host:notaport/0", "http://:hunter2@host/0"])
def test_a_malformed_redis_url_is_reported_without_its_password(url: str) -> None:
    from service.snapshot import connect

    with pytest.raises(ValueError, match=r"invalid Redis URL \w+://\*\*\*@host") as caught:
        connect(url)
    assert "hunter2" not in str(caught.value)
