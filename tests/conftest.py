"""Shared fixtures. ``shared_data``: the corpora directory ($TOPICSTREAM_SHARED_DATA or ../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """Where the shared corpora live: $TOPICSTREAM_SHARED_DATA, else ../shared/data beside the repo."""
    env = os.environ.get("TOPICSTREAM_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared corpora directory; skips the test (with the path tried) when it is absent."""
    d = shared_data_dir()
    if not d.is_dir():
        pytest.skip(f"shared corpora not found at {d} (set TOPICSTREAM_SHARED_DATA to their directory)")
    return d
