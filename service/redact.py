"""Keep secrets out of logs, error messages and metrics.

``TOPICSTREAM_REDIS_URL`` may carry a password (``redis://:pw@host:6379/0``, ``rediss://user:pw@host/0``, or
``?password=pw``) and ``TOPICSTREAM_KAFKA_CONFIG`` may carry SASL passwords, TLS key passphrases and private keys.
Anything that prints one of those goes through :func:`redact_url` / :func:`redact_config` first, and an error
message that might echo one goes through :func:`scrub`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["MASK", "redact_config", "redact_url", "scrub"]

MASK = "***"

# librdkafka (and Java-client) settings whose values are secrets: sasl.password, ssl.key.password,
# ssl.keystore.password, sasl.oauthbearer.client.secret, ssl.key.pem (a private key), sasl.oauthbearer.config
# (may embed credentials), sasl.jaas.config, ...; also any query parameter of a URL named like one.
_SECRET_NAME = re.compile(r"pass(word|phrase)?|secret|token|credential|jaas|key\.pem|oauthbearer\.config", re.I)
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")  # the fallback for strings urlsplit cannot take apart


def _is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_url(url: str) -> str:
    """``url`` with its user info and any password-like query parameter replaced by ``***``.

    ``redis://:pw@host:6379/0`` → ``redis://***@host:6379/0``; a URL without credentials comes back unchanged.
    Never raises: a string that is not a URL comes back with anything between ``://`` and ``@`` masked.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return _USERINFO.sub(MASK + "@", url)
    out = url  # edited in place, so that everything else stays exactly as written
    if "@" in parts.netloc:
        out = out.replace(parts.netloc, MASK + "@" + parts.netloc.rpartition("@")[2], 1)
    if parts.query:
        pairs = [p.split("=", 1) for p in parts.query.split("&")]
        query = "&".join(f"{p[0]}={MASK}" if len(p) == 2 and _is_secret_name(p[0]) else "=".join(p) for p in pairs)
        out = out.replace("?" + parts.query, "?" + query, 1)
    return out


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a librdkafka-style config with secret values (passwords, keys, tokens) replaced by ``***``;
    any other string value that is a URL has its credentials masked too."""
    out: dict[str, Any] = {}
    for name, value in config.items():
        if _is_secret_name(str(name)):
            out[name] = MASK
        elif isinstance(value, str) and "://" in value:
            out[name] = redact_url(value)
        else:
            out[name] = value
    return out


def _secrets_of(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        found = [parts.password, unquote(parts.password or "")]  # as written and as redis-py decodes it
        found += [v for k, v in parse_qsl(parts.query) if _is_secret_name(k)]
    except ValueError:
        match = _USERINFO.search(url)
        found = [match.group(0)[:-1]] if match else []
    return [s for s in found if s]


def scrub(text: str, *urls: str) -> str:
    """``text`` (e.g. an exception message) with every credential found in ``urls`` replaced by ``***``,
    and each of the ``urls`` themselves by its redacted form."""
    for url in urls:
        if url:
            text = text.replace(url, redact_url(url))
            for secret in sorted(_secrets_of(url), key=len, reverse=True):
                text = text.replace(secret, MASK)
    return text
