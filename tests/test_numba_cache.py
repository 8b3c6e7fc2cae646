"""Where numba caches the kernels when it has no place of its own (kernels/_numba_cache.py)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernels._numba_cache import ensure_numba_cache

# Nobody, root included, can make a directory under /proc: a read-only install with no writable home.
NOWHERE = Path("/proc/topicstream-no-such-dir")


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_read_only_install_without_a_home_caches_in_a_private_directory(
    private_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """numba raised "cannot cache function ...: no locator available" on import, and ``topicstream run``,
    ``replica`` and ``eval`` stopped with a traceback."""
    environ = {"XDG_CACHE_HOME": str(NOWHERE / "cache"), "NUMBA_CACHE_DIR": str(NOWHERE / "numba")}
    with caplog.at_level(logging.WARNING, logger="kernels._numba_cache"):
        chosen = ensure_numba_cache(NOWHERE / "kernels", environ)
    expected = private_tmp / f"topicstream-numba-{os.getuid()}"
    assert chosen == environ["NUMBA_CACHE_DIR"] == str(expected)
    assert expected.stat().st_mode & 0o777 == 0o700
    assert f"compiled kernels are cached in {expected}" in caplog.text
    assert f"NUMBA_CACHE_DIR={NOWHERE / 'numba'}" in caplog.text
    # the next start takes the same directory, so the compiled code is kept
    assert ensure_numba_cache(NOWHERE / "kernels", {"XDG_CACHE_HOME": str(NOWHERE)}) == str(expected)


def test_a_shared_directory_of_that_name_is_not_trusted(private_tmp: Path) -> None:
    """numba loads what it finds in its cache: a directory another user could write to is not used."""
    planted = private_tmp / f"topicstream-numba-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    chosen = ensure_numba_cache(NOWHERE / "kernels", {"XDG_CACHE_HOME": str(NOWHERE)})
    assert chosen is not None and Path(chosen).parent == private_tmp and Path(chosen) != planted
    assert Path(chosen).stat().st_mode & 0o777 == 0o700


def test_nothing_changes_where_numba_has_a_place_of_its_own(tmp_path: Path) -> None:
    beside = {"XDG_CACHE_HOME": str(NOWHERE)}
    assert ensure_numba_cache(tmp_path / "kernels", beside) is None  # __pycache__ beside the modules
    assert beside == {"XDG_CACHE_HOME": str(NOWHERE)}
    home = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert ensure_numba_cache(NOWHERE / "kernels", home) is None  # the user's cache directory
    chosen = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "XDG_CACHE_HOME": str(NOWHERE)}
    assert ensure_numba_cache(NOWHERE / "kernels", chosen) is None  # the user's choice
    assert chosen["NUMBA_CACHE_DIR"] == str(tmp_path / "numba")


def test_no_home_at_all_is_no_place_for_numba(private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user id without a passwd entry and no HOME (``docker run --user 12345``): the check itself raised
    "Could not determine home directory" at import, in the very case it is meant for."""
    import pwd

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(uid)

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    chosen = ensure_numba_cache(NOWHERE / "kernels", {})
    assert chosen == str(private_tmp / f"topicstream-numba-{os.getuid()}")


_PROBE = """
import json
from kernels import _ohdp_numba as k
from kernels.ohdp import OnlineHDP
OnlineHDP.warm_up()
stats = k.cvb_batch.stats
print(json.dumps([sum(stats.cache_hits.values()), sum(stats.cache_misses.values()), len(k._cvb_doc.overloads)]))
"""


def test_a_kernel_the_cache_lacks_is_compiled_apart_and_loaded_from_the_cache(tmp_path: Path) -> None:
    """The online HDP ran about 13 % slower in the process that compiled it than loaded from numba's cache (the
    compiling process calls its callees' own libraries: kernels/_numba_cache.py). With an empty cache, ``warm_up``
    compiles it in a child process, and this process loads ``cvb_batch`` from the cache: a hit, no miss, and no
    library of its own for the callee ``_cvb_doc``. Before, it compiled here: a miss and a callee library.

    The process runs in a directory that holds other ``kernels`` (a checkout of another version): the child must
    compile this process's, not those (a review: ``python -c`` put the working directory first, the child imported
    the other kernels, wrote another cache, and the process compiled in place after all)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("TOPICSTREAM_COMPILING_APART", None)
    decoy = tmp_path / "elsewhere"
    (decoy / "kernels").mkdir(parents=True)
    (decoy / "kernels" / "__init__.py").write_text("raise SystemExit('other kernels imported')\n")
    ours = f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
    done = subprocess.run(
        [sys.executable, "-c", ours + _PROBE], env=env, cwd=decoy, capture_output=True, text=True, check=True
    )
    hits, misses, callee_libraries = json.loads(done.stdout.strip().splitlines()[-1])
    assert (hits, misses, callee_libraries) == (1, 0, 0), done.stderr


_BOTH = """
import json
from kernels import _ohdp_numba as k
from kernels.ohdp import OnlineHDP
from kernels.scvb0 import SCVB0
OnlineHDP.warm_up()
SCVB0.warm_up()
stats = k.cvb_batch.stats
print(json.dumps([sum(stats.cache_hits.values()), sum(stats.cache_misses.values())]))
"""


def test_a_cache_file_that_does_not_read_back_is_compiled_again_not_a_crash_at_every_start(tmp_path: Path) -> None:
    """Cache files cut short (a node that lost its page cache after numba's rename, a full disk): before, every
    start stopped in ``warm_up`` with ``UnpicklingError`` or ``EOFError`` (a crash loop; in Kubernetes the cache's
    emptyDir outlives the container; a helper's runs). Now an entry point's unreadable file is flushed and compiled
    apart again, then loaded (a hit), and any other kernel's is left aside in that process (said) and compiled."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    env.pop("TOPICSTREAM_COMPILING_APART", None)
    subprocess.run([sys.executable, "-c", _BOTH], env=env, capture_output=True, text=True, check=True)
    cut = [*tmp_path.glob("*/_ohdp_numba.cvb_batch-*.nbc"), *tmp_path.glob("*/_scvb0_numba.*.nbc")]
    assert len(cut) >= 2
    for f in cut:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    done = subprocess.run([sys.executable, "-c", _BOTH], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1, 0]  # the HDP's entry point: compiled apart again
    assert "numba's cache failed" in done.stderr and "compiling without it in this process" in done.stderr
