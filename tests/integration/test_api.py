"""The replicas' HTTP inference API (service/api.py) on a real replica: the learner's snapshot in a real Redis, the
replica's batch loop on a real broker beside the API, and the answers judged against the outputs the loop published
for the same articles."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from typer.testing import CliRunner

from service.api import MAX_ARTICLES, MAX_JSON_VALUES, ApiServer, InferenceApi
from service.cli import app
from service.kafka import ensure_topics
from service.learner import Learner
from service.replica import Replica
from service.schemas import TopicEvent
from service.settings import Settings

from .helpers import env_for, good_articles, produce, read_all, run_until, sample

pytestmark = pytest.mark.integration


def call(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request on a connection of its own: status, headers (lower-case names), body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def without_time(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "processed_at"}


@pytest.fixture
def replica(settings: Settings) -> Iterator[tuple[Replica, ApiServer, Settings]]:
    """A replica (its own output topic) with the API on a free port, no snapshot yet; its loop is not running."""
    rs = settings.model_copy(update={"output_topic": settings.output_topic + "-replica", "api_max_bytes": 400_000})
    ensure_topics(rs, {rs.output_topic: 1})
    rep = Replica(rs)
    server = ApiServer(InferenceApi(lambda: rep.served, rep.tokenizer, rs, rep.metrics), "127.0.0.1", 0, 4, 400_000)
    try:
        yield rep, server, rs
    finally:
        server.close()


def test_the_api_answers_what_the_stream_publishes_and_refuses_bad_requests_clearly(
    settings: Settings, replica: tuple[Replica, ApiServer, Settings]
) -> None:
    rep, server, rs = replica
    port = server.port
    articles = good_articles(60, seed=11)

    # Before the first snapshot: 503, and when to ask again.
    status, headers, body = call(port, "POST", "/v1/mixtures", articles[0])
    assert status == 503 and headers["retry-after"] == "5" and json.loads(body)["error"]["reason"] == "no_model"

    produce(settings, articles)
    learner = Learner(settings)
    run_until(learner, len(articles))
    stop = threading.Event()
    loop = threading.Thread(target=rep.run, args=(stop,), daemon=True)
    loop.start()
    try:
        published = {m.key().decode(): json.loads(m.value()) for m in read_all(rs, rs.output_topic, len(articles))}
    finally:
        stop.set()
        loop.join(30)
    version = rep.version
    assert version == learner.version >= 1 and len(published) == len(articles)

    # One article: the output event the replica published for it, with the same headers.
    status, headers, body = call(port, "POST", "/v1/mixtures", articles[3])
    answer = json.loads(body)
    TopicEvent.model_validate(answer)
    wanted = published[json.loads(articles[3])["id"]]
    assert status == 200 and without_time(answer) == without_time(wanted)
    assert headers["topicstream-model-version"] == str(version) and headers["topicstream-algorithm"] == "scvb0"
    assert headers["topicstream-topics"] == ",".join(str(t["topic"]) for t in wanted["top_topics"])

    # Several at once, in order; one that is no article gets its reason, as a dead letter would.
    batch = [json.loads(a) for a in articles[:5]]
    batch.insert(2, {"id": "no-text"})
    batch.insert(4, ["not", "an", "object"])
    status, _, body = call(port, "POST", "/v1/mixtures", json.dumps(batch).encode())
    answers = json.loads(body)
    assert status == 200 and len(answers) == 7
    assert [without_time(a) for i, a in enumerate(answers) if i not in (2, 4)] == [
        without_time(published[a["id"]]) for a in batch if isinstance(a, dict) and a["id"] != "no-text"
    ]
    assert answers[2]["id"] == "no-text" and answers[2]["error"]["reason"] == "invalid"
    assert answers[4] == {"id": None, "error": {"reason": "not_object", "detail": answers[4]["error"]["detail"]}}

    # The model served.
    status, _, body = call(port, "GET", "/v1/model")
    assert status == 200 and json.loads(body)["version"] == version and json.loads(body)["topics"] == rs.topics

    # Bad requests: each a status and a reason, and the server goes on.
    refusals = [
        (call(port, "POST", "/v1/mixtures", b'{"id": "x", "text": '), 400, "not_json"),
        (call(port, "POST", "/v1/mixtures", b"\xff\xfe"), 400, "not_utf8"),
        (call(port, "POST", "/v1/mixtures", b"42"), 400, "not_object"),
        (call(port, "POST", "/v1/mixtures", b'{"id": ""}'), 422, "invalid"),
        (call(port, "POST", "/v1/mixtures", json.dumps([batch[0]] * (MAX_ARTICLES + 1)).encode()), 413, "too_many"),
        # Counted before it is parsed (parsing holds the GIL the batch loop needs): this one would be a 400.
        (call(port, "POST", "/v1/mixtures", b"[" * (MAX_JSON_VALUES + 1)), 413, "too_many"),
        (call(port, "GET", "/v1/mixtures"), 405, "method"),
        (call(port, "POST", "/v2/anything", b"{}"), 404, "not_found"),
    ]
    for (status, _, body), wanted_status, reason in refusals:
        assert (status, json.loads(body)["error"]["reason"]) == (wanted_status, reason)
    status, _, _ = call(port, "POST", "/v1/mixtures", b"[" + b" " * 500_000 + b"]")  # over api_max_bytes
    assert status == 413
    assert sample(rep.metrics, "topicstream_api_requests_total", status="200") == 3
    assert sample(rep.metrics, "topicstream_api_requests_total", status="400") == 3
    assert sample(rep.metrics, "topicstream_api_requests_total", status="503") == 1

    # Many clients at once get the answers one client gets alone.
    alone = [without_time(json.loads(call(port, "POST", "/v1/mixtures", a)[2])) for a in articles[:20]]
    with ThreadPoolExecutor(8) as pool:
        together = list(
            pool.map(lambda a: without_time(json.loads(call(port, "POST", "/v1/mixtures", a)[2])), articles[:20] * 4)
        )
    assert together == alone * 4


def test_the_api_lists_the_topics_and_says_which_carries_a_saved_id_after_a_merge(
    settings: Settings, replica: tuple[Replica, ApiServer, Settings]
) -> None:
    """``GET /v1/topics`` and ``GET /v1/topics/ID`` from the snapshot served: the topics as ``topicstream topics
    --json`` has them; after topic hygiene merged id 1 into 0 and retired id 2, a product team's saved id 1 answers
    with topic 0 (status merged) and id 2 with 410, while the ids that replaced them in their slots are live."""
    from kernels.hygiene import Event

    rep, server, rs = replica
    port = server.port
    s = settings.model_copy(update={"batch_size": 20})
    produce(s, good_articles(80, seed=41))
    learner = Learner(s)
    learner.subscribe()
    learner.names.set(0, "Oil prices")
    moves: list[list[Event]] = [[]]
    for planned in moves:
        learner._planned = planned
        done = 0
        while done < 40:
            done += learner.step(limit=40 - done)
        learner.flush()
        learner.checkpoint()
        learner.writer.wait_idle(30)
        assert rep.reload() and rep.follower.swap() is not None and rep.version == learner.version
        summary = rep.store.summary()
        assert summary is not None and summary["version"] == rep.version
        status, _, body = call(port, "GET", "/v1/topics?all")
        listed = json.loads(body)
        assert status == 200 and listed["version"] == rep.version and listed["algorithm"] == "scvb0"
        # The summary's topics without the drift (which the snapshot does not hold), the most prevalent first.
        wanted = sorted(summary["topics"], key=lambda t: -t["prevalence"])
        assert listed["topics"] == [{k: v for k, v in t.items() if k != "drift"} for t in wanted]
        assert [t.get("name") for t in listed["topics"] if t["topic"] == 0] == ["Oil prices"]
        if len(moves) == 1:  # merge 1 into 0, and retire the most prevalent other topic (a seen one: an event)
            gone = next(t for t in listed["topics"] if t["topic"] not in (0, 1))
            retired = gone["topic"]
            moves.append([Event("merge", (1,), 0, 0.9), Event("retire", (gone["slot"],), None, gone["prevalence"])])
    fresh = {t["topic"] for t in listed["topics"]} - set(range(rs.topics))
    assert len(fresh) == 2 and {1, retired}.isdisjoint(t["topic"] for t in listed["topics"])

    status, _, body = call(port, "GET", "/v1/topics/0")
    assert status == 200 and json.loads(body)["status"] == "live" and json.loads(body)["topic"]["topic"] == 0
    status, _, body = call(port, "GET", "/v1/topics/1")
    merged = json.loads(body)
    assert status == 200 and (merged["requested"], merged["status"], merged["topic"]["topic"]) == (1, "merged", 0)
    for topic in fresh:
        status, _, body = call(port, "GET", f"/v1/topics/{topic}")
        assert status == 200 and json.loads(body)["status"] == "live"
    answers = [
        (call(port, "GET", f"/v1/topics/{retired}"), 410, "ended"),
        (call(port, "GET", f"/v1/topics/{max(fresh) + 1}"), 404, "no_topic"),
        (call(port, "GET", "/v1/topics/oil"), 404, "not_found"),
        (call(port, "GET", "/v1/topics?all=maybe"), 400, "invalid"),
        (call(port, "POST", "/v1/topics/0", b"{}"), 405, "method"),
    ]
    for (status, _, body), wanted_status, reason in answers:
        assert (status, json.loads(body)["error"]["reason"]) == (wanted_status, reason)
    # HEAD: a GET's status and headers, no body; the other methods are refused naming both.
    status, headers, body = call(port, "HEAD", "/v1/topics/1")
    assert status == 200 and body == b"" and int(headers["content-length"]) == len(call(port, "GET", "/v1/topics/1")[2])
    assert call(port, "POST", "/v1/topics/0", b"{}")[1]["allow"] == "GET, HEAD"
    # Without ?all, the empty slots are left out, as `topicstream topics` leaves them out.
    shown = json.loads(call(port, "GET", "/v1/topics")[2])["topics"]
    assert [t["topic"] for t in shown] == [t["topic"] for t in listed["topics"] if t["prevalence"] >= 1e-4]


def test_a_taken_api_port_is_one_line_and_exit_2(settings: Settings) -> None:
    """``topicstream replica --api-port`` on a port another process holds: exit 2 naming the port, no traceback."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**env_for(settings), "TOPICSTREAM_API_HOST": "127.0.0.1", "TOPICSTREAM_METRICS_PORT": "0"}
        result = CliRunner().invoke(app, ["replica", "--api-port", str(port)], env=env)
    assert result.exit_code == 2, result.output
    assert f"cannot serve the HTTP API on 127.0.0.1:{port}" in result.output and "Traceback" not in result.output


def test_closing_the_server_frees_its_port_and_raises_nothing_on_its_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """``close`` closes the sockets under the server thread's select(): it used to end with a traceback
    (OSError: Bad file descriptor) at every replica's exit."""
    import socket

    from service.metrics import Metrics
    from service.text import Tokenizer

    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    api = InferenceApi(lambda: None, Tokenizer(), Settings(), Metrics("replica"))
    for _ in range(20):  # the select() it interrupts is a matter of timing
        server = ApiServer(api, "127.0.0.1", 0, 2, 4096)
        assert call(server.port, "GET", "/v1/model")[0] == 503
        server.close()
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", server.port))
    assert raised == []


def test_an_api_only_replica_follows_the_snapshots_and_reads_no_kafka(settings: Settings) -> None:
    """``replica --api-only``: the HTTP API on the learner's snapshots in Redis, no consumer group (any number of
    them, beyond the input's partitions): 503 until the first snapshot, then the newest one, followed."""
    from service.api import ApiOnlyReplica
    from service.dev.localstack import free_port
    from service.metrics import Metrics

    s = settings.model_copy(update={"api_port": free_port(), "api_host": "127.0.0.1", "api_only": True})
    # No broker at all: the replica must not need one.
    rs = s.model_copy(update={"kafka_bootstrap": "127.0.0.1:9"})
    metrics = Metrics("replica")
    rep = ApiOnlyReplica(rs, metrics)
    stop = threading.Event()
    thread = threading.Thread(target=rep.run, args=(stop,), daemon=True)
    thread.start()
    article = good_articles(1, seed=21)[0]
    try:
        assert call(s.api_port, "POST", "/v1/mixtures", article)[0] == 503
        produce(settings, good_articles(40, seed=22))
        learner = Learner(settings)
        run_until(learner, 40)

        def version() -> int:
            status, _, body = call(s.api_port, "GET", "/v1/model")
            return json.loads(body)["version"] if status == 200 else 0

        deadline = time.monotonic() + 30
        while version() < learner.version and time.monotonic() < deadline:
            time.sleep(0.2)
        assert version() == learner.version
        status, headers, body = call(s.api_port, "POST", "/v1/mixtures", article)
        assert status == 200 and headers["topicstream-model-version"] == str(learner.version)
        assert json.loads(body)["id"] == json.loads(article)["id"]
        assert time.time() - sample(metrics, "topicstream_loop_heartbeat_timestamp_seconds") < 5  # /healthz: alive
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


def test_api_only_without_a_port_is_one_line_and_exit_2(settings: Settings) -> None:
    result = CliRunner().invoke(app, ["replica", "--api-only"], env={**env_for(settings), "TOPICSTREAM_API_PORT": "0"})
    assert result.exit_code == 2 and "TOPICSTREAM_API_ONLY needs TOPICSTREAM_API_PORT" in result.output


def test_the_openapi_document_is_generated_and_names_what_is_served() -> None:
    """``GET /v1/openapi.json``, also before the first snapshot: the event schemas are the pydantic models' own,
    and every path and method it documents is one the server answers (and no other)."""
    from service.metrics import Metrics
    from service.schemas import Article, TopicEvent
    from service.text import Tokenizer

    server = ApiServer(InferenceApi(lambda: None, Tokenizer(), Settings(), Metrics("replica")), "127.0.0.1", 0, 2, 4096)
    try:
        status, _, body = call(server.port, "GET", "/v1/openapi.json")
        doc = json.loads(body)
        assert status == 200 and doc["openapi"] == "3.1.0"
        schemas, ref = doc["components"]["schemas"], "#/components/schemas/{model}"
        for model in (Article, TopicEvent):
            generated = model.model_json_schema(ref_template=ref)
            generated.pop("$defs", None)
            if model is Article:  # what its validator reads beyond RFC 3339 (RSS dates, Unix time) is said by hand
                assert {"type": "number"} in schemas["Article"]["properties"].pop("published_at")["anyOf"]
                generated["properties"].pop("published_at")
            assert schemas[model.__name__] == generated
        for path, methods in doc["paths"].items():
            for method in methods:
                asked, body = path.replace("{topic}", "3"), b"{}" if method == "post" else None
                assert call(server.port, method.upper(), asked, body)[0] not in (404, 405)
        assert call(server.port, "GET", "/v1/undocumented")[0] == 404
    finally:
        server.close()
