"""The replicas' HTTP inference API: an article's topics on request, from the model the replica serves.

For what cannot wait for the stream or is not in it: a newsroom tool tagging a draft before it is published, a
backfill of an archive, a one-off check. ``POST /v1/mixtures`` takes an input event (README, "Events"), or a JSON
array of up to :data:`MAX_ARTICLES` of them, each validated as the input topic's messages are
(:func:`service.schemas.decode_article`), and answers with the output event the replica would publish for it
(:func:`service.pipeline.output_records`: the same JSON; the same ``topicstream-*`` headers for one article), or a
JSON array of them in the same order, where an article that is no valid event is ``{"id": …, "error": {"reason",
"detail"}}`` (``id`` when it had a readable one) with the reason a dead letter would carry. ``GET /v1/model``
answers which model is served, ``GET /v1/topics`` its topics (:func:`topics_answer`), ``GET /v1/topics/ID`` one
of them by its stable id, or the one that carries it since a merge (:func:`topic_answer`: a product team's
saved topic id, checked), ``GET /v1/openapi.json`` the API itself (:func:`openapi_document`). Nothing is learned
and nothing goes to Kafka.

Status codes: 200; 400 a body that is not a JSON object or array, or a bad query parameter; 404 another path, or a
topic id never given out; 405 another method; 410 a topic id that ended; 413 a body
over ``TOPICSTREAM_API_MAX_BYTES`` (waitress answers it, in plain text, before the body is read, and closes the
connection), an array of more than :data:`MAX_ARTICLES` or of more than :data:`MAX_JSON_VALUES` values; 422 one
article that is no valid event; 500 an error of the service's own (logged); 503 no snapshot served yet (with
``Retry-After``). Every answer of the application is JSON.

It is served by waitress (a thread pool of ``TOPICSTREAM_API_THREADS``, at most :data:`MAX_CONNECTIONS`
connections, idle ones closed after :data:`IDLE_TIMEOUT_S`) beside the batch loop, or alone (:class:`ApiOnlyReplica`:
no Kafka, any number of such replicas). A request takes the snapshot served when it starts
(:attr:`service.follower.SnapshotFollower.served`, swapped as one reference), so one answer is all of one version;
the tokenizer, the vocabulary and the model are read-only in a replica, so requests and the loop run at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson
import pydantic_core

from .pipeline import Headers, output_records, tokenize, topic_entry
from .schemas import BOM, Article, Rejection, decode_article

if TYPE_CHECKING:
    from .follower import Served
    from .metrics import Metrics
    from .settings import Settings
    from .text import Tokenizer

__all__ = ["MAX_ARTICLES", "ApiOnlyReplica", "ApiServer", "InferenceApi", "openapi_document", "serve_api"]

log = logging.getLogger(__name__)

#: The most articles one request may hold.
MAX_ARTICLES = 100
#: The most JSON values an array may hold, counted as its commas and brackets (those inside strings too: an upper
#: bound): 100 articles of prose have a few tens of thousands; text as dense in commas as a table can reach it.
MAX_JSON_VALUES = 200_000
#: The most connections open at once (waitress's ``connection_limit``: more wait in the listen backlog).
MAX_CONNECTIONS = 100
#: An idle connection is closed after this many seconds (waitress's ``channel_timeout``).
IDLE_TIMEOUT_S = 30
#: What a 503 before the first snapshot tells the client to wait, seconds (a replica polls Redis every 2 s).
RETRY_AFTER_S = 5

StartResponse = Callable[..., Any]

#: Rejections of a body that is no JSON object at all (400); an object that is no valid article is 422.
_NOT_AN_EVENT = ("not_json", "not_utf8", "not_object")

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    410: "Gone",
    413: "Content Too Large",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


#: The paths served and the method each takes (``/v1/topics/ID`` as ``/v1/topics/{topic}``).
_METHODS = {
    "/v1/mixtures": "POST",
    "/v1/model": "GET",
    "/v1/topics": "GET",
    "/v1/topics/{topic}": "GET",
    "/v1/openapi.json": "GET",
}
_ROUTES = [f"{method} {path}" for path, method in _METHODS.items()]
_ONE_TOPIC = "/v1/topics/"


def openapi_document() -> dict[str, Any]:
    """The API as an OpenAPI 3.1 document (``GET /v1/openapi.json``): the article and output event schemas are
    generated from the pydantic models that check them (:mod:`service.schemas`), so they cannot drift apart."""
    from . import __version__
    from .schemas import Article, TopicEvent

    ref = "#/components/schemas/{model}"
    article, event = Article.model_json_schema(ref_template=ref), TopicEvent.model_json_schema(ref_template=ref)
    # What the validator reads beyond RFC 3339 (Article._read_time), which the generated schema cannot say.
    article["properties"]["published_at"] = {
        "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}],
        "description": "RFC 3339 (no zone: UTC), an RFC 2822 date as RSS writes it, Unix seconds or milliseconds, "
        "or empty",
    }
    schemas: dict[str, Any] = {**article.pop("$defs", {}), **event.pop("$defs", {}), "Article": article}
    schemas["TopicEvent"] = event
    reason = {"type": "object", "properties": {"reason": {"type": "string"}, "detail": {"type": "string"}}}
    schemas["Error"] = {"type": "object", "required": ["error"], "properties": {"error": reason}}
    schemas["ItemError"] = {
        "type": "object",
        "required": ["id", "error"],
        "properties": {"id": {"type": ["string", "null"]}, "error": reason},
    }
    schemas["Model"] = {
        "type": "object",
        "properties": {k: {"type": t} for k, t in (("algorithm", "string"), ("version", "integer"),
                                                    ("topics", "integer"), ("created_at", "number"))},
    }  # fmt: skip

    schemas["Topic"] = {
        "type": "object",
        "required": ["topic", "slot", "prevalence", "top_words", "background"],
        "properties": {
            "topic": {"type": "integer", "description": "the stable id, as in output events and their headers"},
            "slot": {"type": "integer", "description": "the index of the topic in an output's mixture"},
            "name": {"type": "string", "description": "the name given with topicstream label"},
            "prevalence": {"type": "number", "description": "the topic's share of the model's mass"},
            "top_words": {"type": "array", "items": {"type": "string"}},
            "background": {"type": "boolean", "description": "the topic of the words every article uses"},
        },
    }
    served = {"version": {"type": "integer"}, "algorithm": {"type": "string"}}
    schemas["Topics"] = {
        "type": "object",
        "properties": {**served, "topics": {"type": "array", "items": {"$ref": ref.format(model="Topic")}}},
    }
    schemas["TopicFate"] = {
        "type": "object",
        "properties": {
            "version": {"type": "integer"},
            "requested": {"type": "integer", "description": "the id asked for"},
            "status": {"enum": ["live", "merged"], "description": "merged: the topic below carries it now"},
            "topic": {"$ref": ref.format(model="Topic")},
        },
    }

    def body(schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": schema}}}

    def refer(name: str) -> dict[str, str]:
        return {"$ref": ref.format(model=name)}

    def error(description: str) -> dict[str, Any]:
        return body(refer("Error"), description)

    many = {"type": "array", "maxItems": MAX_ARTICLES, "items": refer("Article")}
    answers = {"type": "array", "items": {"oneOf": [refer("TopicEvent"), refer("ItemError")]}}
    not_yet = error("no snapshot served yet (no_model)")
    not_yet["headers"] = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
    too_large = error(
        "more than the articles or JSON values a request may hold (too_many); a body over "
        "TOPICSTREAM_API_MAX_BYTES gets a plain-text 413 from the server, and the connection closed"
    )
    too_large["content"]["text/plain"] = {"schema": {"type": "string"}}
    event_headers = {
        name: {"description": what, "schema": {"type": "string"}}
        for name, what in (
            ("topicstream-topic", "the dominant topic id, never the background (empty: no known word)"),
            ("topicstream-topics", "the ids of top_topics, comma-separated"),
            ("topicstream-model-version", "the snapshot version that answered"),
            ("topicstream-algorithm", "the kernel"),
        )
    }
    request = body({"oneOf": [refer("Article"), many]}, "an input event, or an array of them")
    mixtures = {
        "summary": "The output event of each article, as the replica would publish it; nothing is learned",
        "requestBody": {"required": True, "content": request["content"]},
        "responses": {
            "200": {
                **body({"oneOf": [refer("TopicEvent"), answers]}, "one event, or one per article in order"),
                "headers": event_headers,  # for one article; an array's answer has none
            },
            "400": error(
                "not a JSON object or array (not_json, not_utf8, not_object), or a Content-Length that is "
                "no number (invalid)"
            ),
            "413": too_large,
            "422": error("one article that is no valid event (invalid, oversize)"),
            "503": not_yet,
        },
    }
    model = {"summary": "The model served", "responses": {"200": body(refer("Model"), "the model"), "503": not_yet}}
    show_empty = {
        "name": "all",
        "in": "query",
        "required": False,
        "schema": {"type": "boolean"},
        "description": "also the empty slots (unused, or freed by topic hygiene)",
    }
    topics = {
        "summary": "The topics of the model served, the most prevalent first",
        "parameters": [show_empty],
        "responses": {"200": body(refer("Topics"), "the topics"), "400": error("a bad ?all"), "503": not_yet},
    }
    one_topic = {
        "summary": "A topic by its stable id, or the topic that carries it since a merge",
        "parameters": [{"name": "topic", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}}],
        "responses": {
            "200": body(refer("TopicFate"), "the topic, or the one that carries it (status merged)"),
            "404": error("an id never given out (no_topic), or no whole number (not_found)"),
            "410": error("an id that ended: retired, its slot re-seeded, or merged into one that ended (ended)"),
            "503": not_yet,
        },
    }
    describe = {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "topicstream replica HTTP API", "version": __version__},
        "paths": {
            "/v1/mixtures": {"post": mixtures},
            "/v1/model": {"get": model},
            "/v1/topics": {"get": topics},
            "/v1/topics/{topic}": {"get": one_topic},
            "/v1/openapi.json": {"get": describe},
        },
        "components": {"schemas": schemas},
    }


class _Answer(Exception):
    """An answer other than 200, raised where it is decided."""

    def __init__(self, status: int, reason: str, detail: str, headers: Headers | None = None) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail, self.headers = status, reason, detail, headers or []


class InferenceApi:
    """The WSGI application. ``served``: what the replica serves now (None before its first snapshot)."""

    def __init__(
        self, served: Callable[[], Served | None], tokenizer: Tokenizer, settings: Settings, metrics: Metrics
    ) -> None:
        self.served = served
        self._openapi = orjson.dumps(openapi_document())
        self.tokenizer = tokenizer
        self.settings = settings
        self.metrics = metrics
        for status in _REASONS:  # every status from 0: a rate, and an alert on 500s, have a series to read
            metrics.api_requests.labels(status=str(status))

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        t0 = time.perf_counter()
        try:
            status, body, headers = self._route(environ)
        except _Answer as a:
            status, headers = a.status, a.headers
            body = orjson.dumps({"error": {"reason": a.reason, "detail": a.detail}})
        except Exception:  # a bug of ours: logged, answered, and the server goes on
            log.exception("HTTP inference request failed")
            status, headers = 500, []
            body = orjson.dumps({"error": {"reason": "internal", "detail": "internal error (logged)"}})
        self.metrics.api_requests.labels(status=str(status)).inc()
        self.metrics.api_duration.observe(time.perf_counter() - t0)
        text = [(k, v.decode() if isinstance(v, bytes) else str(v)) for k, v in headers]
        start_response(
            f"{status} {_REASONS[status]}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *text],
        )
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    def _route(self, environ: dict[str, Any]) -> tuple[int, bytes, Headers]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
        route = "/v1/topics/{topic}" if path.startswith(_ONE_TOPIC) else path
        if route not in _METHODS:
            raise _Answer(404, "not_found", f"no such path: {path[:200]!r}; {', '.join(_ROUTES)}")
        allowed = _METHODS[route]
        if method != allowed and not (method == "HEAD" and allowed == "GET"):  # HEAD: a GET's headers (RFC 9110)
            allow = "GET, HEAD" if allowed == "GET" else allowed
            raise _Answer(405, "method", f"{path[:200]} takes {allow}", [("Allow", allow)])
        if path == "/v1/openapi.json":
            return 200, self._openapi, []
        served = self.served()
        if served is None:
            raise _Answer(
                503,
                "no_model",
                "no snapshot served yet: none written, or the first one is still loading",
                [("Retry-After", str(RETRY_AFTER_S))],
            )
        if path == "/v1/model":
            ref = served.ref
            model = {"algorithm": ref.algorithm, "version": ref.version, "topics": ref.n_topics}
            return 200, orjson.dumps({**model, "created_at": served.created_at}), []
        if path == "/v1/topics":
            return 200, orjson.dumps(topics_answer(served, _flag(environ, "all"))), []
        if route != path:
            return 200, orjson.dumps(topic_answer(served, _topic_id(path[len(_ONE_TOPIC) :]))), []
        return self._mixtures(served, _read_body(environ))

    def _mixtures(self, served: Served, body: bytes) -> tuple[int, bytes, Headers]:
        text = body[len(BOM) :] if body.startswith(BOM) else body
        if not text.lstrip().startswith(b"["):  # one article, judged as the input topic's messages are
            one = decode_article(body, self.settings.max_article_bytes)
            if isinstance(one, Rejection):
                raise _Answer(400 if one.reason in _NOT_AN_EVENT else 422, one.reason, one.detail)
            ((value, headers),) = self._infer(served, [one])
            return 200, value, headers
        # Parsing holds the GIL, and the batch loop waits meanwhile: a 4 MB array of a million empty lists took
        # 1-9 s a request beside the loop and slowed the replica's outputs tenfold. A cheap count first.
        if (values := text.count(b",") + text.count(b"[") + text.count(b"{")) > MAX_JSON_VALUES:
            many = (
                f"{values:,} commas and brackets (strings included); {MAX_JSON_VALUES:,} at most: send fewer articles"
            )
            raise _Answer(413, "too_many", many)
        try:  # pydantic's parser, as decode_article's: a nesting limit, no lone surrogates, integers of any size
            parsed = pydantic_core.from_json(text)
        except ValueError:
            why = decode_article(body, len(body) + 1)  # the reason and detail a dead letter would carry
            raise _Answer(
                400, *((why.reason, why.detail) if isinstance(why, Rejection) else ("not_json", ""))
            ) from None
        if len(parsed) > MAX_ARTICLES:
            raise _Answer(413, "too_many", f"{len(parsed)} articles, at most {MAX_ARTICLES} a request")
        decoded = [self._decode(item) for item in parsed]
        good = [a for a in decoded if isinstance(a, Article)]
        values_out = iter([value for value, _ in self._infer(served, good)])
        parts = [next(values_out) if isinstance(a, Article) else a for a in decoded]
        return 200, b"[" + b",".join(parts) + b"]", []

    def _decode(self, item: object) -> Article | bytes:
        """One element of an array: its article, or its error object (JSON)."""
        article = decode_article(pydantic_core.to_json(item), self.settings.max_article_bytes)
        if isinstance(article, Article):
            return article
        known = item.get("id") if isinstance(item, dict) else None
        error = {"reason": article.reason, "detail": article.detail}
        return orjson.dumps({"id": known if isinstance(known, str) and len(known) <= 256 else None, "error": error})

    def _infer(self, served: Served, articles: list[Article]) -> list[tuple[bytes, Headers]]:
        """The output events of ``articles`` (valid), computed as the replica's batch loop computes them."""
        if not articles:
            return []
        encoded = served.vocab.encode(tokenize(self.tokenizer, articles), learn=False)
        theta = served.model.transform(encoded.batch)
        return output_records(articles, theta, encoded.batch.doc_tokens(), served.ref, self.settings)


def topic_view(served: Served, slot: int) -> dict[str, Any]:
    """The topic in ``slot`` of the snapshot served, as ``topicstream topics --json`` gives it (without the drift,
    which the snapshot does not hold): its stable id, slot, name, prevalence, top words and background flag."""
    ref = served.ref
    words = ref.labels.top_words[slot]
    return topic_entry(ref.topic_ids[slot], slot, ref.names, served.weights[slot], words, slot == ref.background)


def topics_answer(served: Served, show_empty: bool) -> dict[str, Any]:
    """``GET /v1/topics``: the topics of the snapshot served, the most prevalent first; the empty slots (prevalence
    under :data:`service.tables.EMPTY`: unused, or freed by topic hygiene) only with ``?all=true``, as
    ``topicstream topics --all``."""
    from .tables import EMPTY

    slots = sorted(range(served.ref.n_topics), key=lambda k: -served.weights[k])
    shown = [topic_view(served, k) for k in slots if show_empty or served.weights[k] >= EMPTY]
    return {"version": served.ref.version, "algorithm": served.ref.algorithm, "topics": shown}


def topic_answer(served: Served, asked: int) -> dict[str, Any]:
    """``GET /v1/topics/ID``: the topic with stable id ``asked`` (``status`` live), or the topic that carries it
    now that topic hygiene merged it into another (``status`` merged: follow that id instead), by the lineage of the
    snapshot served (:meth:`service.lineage.Lineage.successor`). An id that ended (retired, its slot re-seeded, or
    merged into one that ended) is a 410; one never given out a 404."""
    ref, lineage = served.ref, served.lineage
    now = lineage.successor(asked) if lineage is not None else (asked if asked in ref.topic_ids else None)
    version = ref.version
    if now is not None:
        status = "live" if now == asked else "merged"
        return {
            "version": version,
            "requested": asked,
            "status": status,
            "topic": topic_view(served, ref.topic_ids.index(now)),
        }
    if asked < (lineage.next_id if lineage is not None else ref.n_topics):
        raise _Answer(
            410,
            "ended",
            f"topic {asked} ended before snapshot v{version} (retired, its slot re-seeded, or merged into a topic that "
            "ended): no article is tagged with it any more; the lineage events say what became of it",
        )
    raise _Answer(404, "no_topic", f"snapshot v{version} has no topic {asked}: no such id was ever given out")


def _topic_id(text: str) -> int:
    """The id of ``/v1/topics/ID``: a whole number (404 otherwise, as a path that names nothing)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise _Answer(404, "not_found", f"no such topic path: a topic id is a whole number, not {text[:40]!r}")
    return int(text)


def _flag(environ: dict[str, Any], name: str) -> bool:
    """A yes/no query parameter: true for ``?all``, ``?all=true`` or ``?all=1``, false without it or for ``false``
    or ``0``; 400 for another value."""
    from urllib.parse import parse_qs

    value = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).get(name, ["false"])[-1].lower()
    if value not in ("", "true", "1", "false", "0"):
        raise _Answer(400, "invalid", f"?{name}= takes true or false, not {value[:40]!r}")
    return value in ("", "true", "1")


def _read_body(environ: dict[str, Any]) -> bytes:
    """The request's body (waitress has refused one over ``max_request_body_size`` with 413 before this)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise _Answer(400, "invalid", "Content-Length is no number") from None
    stream = environ["wsgi.input"]
    return bytes(stream.read(length) if length > 0 else stream.read())


class ApiServer:
    """The waitress server on its own thread; :meth:`close` stops it."""

    def __init__(self, app: InferenceApi, host: str, port: int, threads: int, max_bytes: int) -> None:
        from waitress.server import TcpWSGIServer, create_server

        # waitress warns "Task queue depth is N" for every request that waits for a thread: a log line per
        # request under load. topicstream_api_request_duration_seconds and the clients' own timings tell it.
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
        self._sockets: dict[int, Any] = {}  # waitress's socket map: the server's and each connection's
        server = create_server(
            app,
            self._sockets,
            host=host,
            port=port,
            threads=threads,
            connection_limit=MAX_CONNECTIONS,
            channel_timeout=IDLE_TIMEOUT_S,
            max_request_body_size=max_bytes,
            ident="topicstream",
            expose_tracebacks=False,
        )
        assert isinstance(server, TcpWSGIServer) and server.socket is not None  # one host and port: one socket
        self._server = server
        #: The port it listens on (the one asked for, or the one the system gave for 0).
        self.port = int(server.socket.getsockname()[1])
        log.info("HTTP inference API on %s:%d (%s)", host, self.port, ", ".join(_ROUTES))
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="api-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self._server.run()
        except (OSError, ValueError):  # its sockets closed under its select(): close() did it
            if not self._closing.is_set():
                raise

    def close(self) -> None:
        """Close the listening socket and every connection, then let the requests being answered finish."""
        from waitress import wasyncore

        self._closing.set()
        wasyncore.close_all(self._sockets)
        self._thread.join(5)
        self._server.task_dispatcher.shutdown()


def serve_api(
    served: Callable[[], Served | None], tokenizer: Tokenizer, settings: Settings, metrics: Metrics
) -> ApiServer:
    """Serve the API on ``TOPICSTREAM_API_HOST:TOPICSTREAM_API_PORT``; OSError when the port is taken."""
    app = InferenceApi(served, tokenizer, settings, metrics)
    return ApiServer(app, settings.api_host, settings.api_port, settings.api_threads, settings.api_max_bytes)


class ApiOnlyReplica:
    """A replica that only answers HTTP (``TOPICSTREAM_API_ONLY``): it follows the learner's snapshots in Redis and
    serves the newest at once, reading no Kafka topic. Made, it listens (OSError when the port is taken; Redis
    errors when Redis cannot be reached); :meth:`run` serves until ``stop``."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        from .follower import SnapshotFollower
        from .keys import check_types
        from .snapshot import SnapshotStore

        store = SnapshotStore.from_url(settings.redis_url, prefix=settings.redis_prefix)
        store.r.ping()  # unreachable Redis at start-up: one clear line from the CLI, not a traceback later
        check_types(store.r, settings.redis_prefix)
        tokenizer = settings.tokenizer()
        self.metrics = metrics
        self.follower = SnapshotFollower(settings, store, metrics, tokenizer)
        self.server = serve_api(lambda: self.follower.served, tokenizer, settings, metrics)

    def run(self, stop: threading.Event) -> None:
        """Its heartbeat beats every second (the loop that swaps new snapshots in): ``/healthz`` fails if that
        loop hangs."""
        try:
            if not self.follower.wait_for_first(stop):
                return
            self.follower.start()
            while not stop.wait(1.0):
                self.follower.swap()
                self.metrics.beat()
        finally:
            self.follower.stop()
            self.server.close()
