"""``/metrics`` and ``/healthz`` on one port: what a Prometheus scrape and a liveness probe ask of a process.

``/metrics`` is prometheus_client's exposition of the process's registry. A process whose batch loop
hangs (a kernel call or a write that never returns) still answers it from the server's own thread, so a probe on
``/metrics`` cannot tell it from a healthy one. ``/healthz`` answers 503 once the loop's heartbeat
(``topicstream_loop_heartbeat_timestamp_seconds``, set at the end of every turn, quiet or not, and after each
piece of a batch too large for one kernel call) is older than :data:`STALE_S` on the monotonic clock (a step of
the wall clock moves the gauge's age, not the loop's), the same line as the ``TopicstreamLoopStalled`` alert, and
200 otherwise: also for a standby learner (it has no loop until it takes the lease) and for a process without a
heartbeat (``feeds``). A Kubernetes liveness probe on it restarts a hung process instead of waiting for a person.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

__all__ = ["STALE_S", "health", "serve"]

#: A loop that has not turned for this long is stalled (as the alert ``TopicstreamLoopStalled`` says).
STALE_S = 300.0


def health(registry: CollectorRegistry, beat_age: float | None = None) -> tuple[bool, str]:
    """Whether the process whose series ``registry`` holds is alive, and why, in a line. ``beat_age``: seconds
    since the loop's last turn on the monotonic clock (:meth:`service.metrics.Metrics.beat_age`); without it,
    the heartbeat gauge's age on the wall clock."""
    if (registry.get_sample_value("topicstream_learner_standby") or 0.0) >= 1.0:
        return True, "standby: waiting for the active learner's lease"
    beat = registry.get_sample_value("topicstream_loop_heartbeat_timestamp_seconds")
    if beat is None:
        return True, "no batch loop"
    age = time.time() - beat if beat_age is None else beat_age
    if age > STALE_S:
        return False, f"the batch loop has not turned for {age:.0f} s (limit {STALE_S:.0f} s)"
    return True, f"the batch loop turned {max(0.0, age):.0f} s ago"


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes and scrapes every few seconds are not worth a log line."""


def serve(
    registry: CollectorRegistry, port: int, addr: str = "0.0.0.0", beat_age: Callable[[], float] | None = None
) -> None:
    """Serve ``/healthz`` and, on every other path, ``/metrics`` of ``registry`` on a daemon thread; OSError when
    the port is taken. ``beat_age``: as :func:`health` takes it, asked at each probe."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            ok, why = health(registry, None if beat_age is None else beat_age())
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [why.encode() + b"\n"]
        return metrics_app(environ, start_response)

    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]  # "::" is IPv6, as Prometheus allows
    server: type[ThreadingWSGIServer] = type("Server", (ThreadingWSGIServer,), {"address_family": family})
    httpd: ThreadingWSGIServer = make_server(addr, port, app, server, handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
