"""numba's on-disk cache: a place for it when numba has none (a read-only install with no writable home), and
kernels compiled in a child process so that this one loads them from it.

The kernels compile with ``cache=True``. numba looks for a writable cache directory when a function is decorated,
that is at import: ``NUMBA_CACHE_DIR`` if set, else ``__pycache__`` beside the module, else the user's cache
directory (``~/.cache/numba``). Where none is writable (a package installed read-only for a service user without a
home, ``docker run --read-only``) the import raised ``RuntimeError: cannot cache function ...: no locator available``
and ``topicstream run``, ``replica`` and ``eval`` stopped with a traceback. :func:`ensure_numba_cache` checks the same
places first, without importing numba, and only where all of them fail points numba at a private directory under
the system's temporary directory, with a warning that names it.

:func:`compile_apart`: a process that compiles a kernel runs it slower than one that loads the same kernel from the
cache. When numba compiles a function, it compiles each function it calls into a library of its own too, and the
caller's calls then go to those libraries' copies (the symbols are resolved process-wide); a process that loads the
caller from the cache has only the copies linked into the caller's own code, and calls those. The online HDP ran
about 13 % slower in a process that compiled it (BBC, T = 150, one pass, six paired runs on an idle 2-core
machine: 582 k against 669 k tokens/s; same page faults, same garbage-collected objects, one thread). So where the
cache lacks a kernel's entry points, it is compiled in a child process first, and this process loads it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["compile_apart", "ensure_numba_cache"]

log = logging.getLogger(__name__)


def _writable(path: Path) -> bool:
    """numba's own test (``_CacheLocator.ensure_cache_path``): the directory can be made and a file written in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _user_cache_dir(environ: MutableMapping[str, str]) -> Path | None:
    """numba's user-wide cache directory (``numba.misc.appdirs.user_cache_dir``) on Linux and macOS; None where
    there is no home to put it in (no ``HOME``, and a user id without a passwd entry: ``docker run --user 12345``)."""
    base = "~/Library/Caches" if sys.platform == "darwin" else environ.get("XDG_CACHE_HOME") or "~/.cache"
    expanded = os.path.expanduser(base)  # leaves "~" where it finds no home (pathlib raises instead)
    return None if expanded.startswith("~") else Path(expanded) / "numba"


def _private_dir() -> str:
    """``topicstream-numba-<uid>`` in the temporary directory, if it is this user's alone (another user could plant
    cache files in a shared /tmp, and numba loads them); else a fresh one (compiled again at each start)."""
    uid = os.getuid()
    path = Path(tempfile.gettempdir()) / f"topicstream-numba-{uid}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
        if path.is_dir() and not path.is_symlink() and st.st_uid == uid and st.st_mode & 0o077 == 0:
            return str(path)
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="topicstream-numba-")


def ensure_numba_cache(source_dir: Path, environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Point numba at a private cache directory where it could cache none of ``source_dir``'s functions.

    Returns the directory chosen, or None where numba has a place of its own (nothing is changed then). Call it
    before the modules in ``source_dir`` that use ``njit(cache=True)`` are imported.
    """
    chosen = environ.get("NUMBA_CACHE_DIR")
    if chosen and _writable(Path(chosen)):
        return None
    user = _user_cache_dir(environ)
    if _writable(source_dir / "__pycache__") or (user is not None and _writable(user)):
        return None
    if not hasattr(os, "getuid"):  # Windows: numba's own error stands
        return None
    fallback = _private_dir()
    environ["NUMBA_CACHE_DIR"] = fallback
    config = sys.modules.get("numba.core.config") if environ is os.environ else None
    if config is not None:  # numba read the environment when it was imported
        config.CACHE_DIR = fallback  # type: ignore[attr-defined]
    log.warning(
        "numba can write its cache neither beside %s nor in %s%s: compiled kernels are cached in %s "
        "(set NUMBA_CACHE_DIR to a writable directory to choose)",
        source_dir,
        user or "a home directory (there is none)",
        f" nor in NUMBA_CACHE_DIR={chosen}" if chosen else "",
        fallback,
    )
    return fallback


#: Set in the child that :func:`compile_apart` starts: it compiles in place.
_CHILD = "TOPICSTREAM_COMPILING_APART"
#: The most seconds the child may take (compiling the online HDP takes about 10 s on a loaded 2-core machine).
COMPILE_TIMEOUT_S = 600.0
_CHILD_CODE = (
    "import json, sys\n"
    "from kernels.registry import kernel_class\n"
    "kernel_class(sys.argv[1]).warm_up(**json.loads(sys.argv[2]))\n"
)


def _cached(entry_point: str) -> bool:
    """Whether numba's cache holds an index for ``entry_point`` ("module:function"); True where numba does not say
    (another version's internals, caching off): then nothing is compiled apart."""
    module, name = entry_point.split(":")
    try:
        dispatcher = getattr(importlib.import_module(module), name)
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:
        return True


def compile_apart(algorithm: str, params: Mapping[str, Any], entry_points: Sequence[str]) -> bool:
    """Compile kernel ``algorithm`` with ``params`` in a child process (its ``warm_up``) when numba's cache lacks
    one of its ``entry_points``, so that this process loads them from the cache (see the module docstring).
    Returns whether the child compiled them; False (this process compiles, as before) inside the child, with the
    JIT off, with parameters that are not JSON, or when the child failed or could not write the cache (said)."""
    from numba.core import config

    jit_off = bool(getattr(config, "DISABLE_JIT", False))
    if not entry_points or os.environ.get(_CHILD) or jit_off or all(map(_cached, entry_points)):
        return False
    try:
        args = [sys.executable, "-c", _CHILD_CODE, algorithm, json.dumps(dict(params))]
    except TypeError:  # parameters only Python holds (numpy scalars from a caller): compiled here
        return False
    env = {**os.environ, _CHILD: "1"}  # NUMBA_CACHE_DIR with it (ensure_numba_cache sets it there too)
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("compiling the %s kernel in a child process failed (%s): compiling it here", algorithm, e)
        return False
    if done.returncode != 0 or not all(map(_cached, entry_points)):
        why = done.stderr.strip().splitlines()[-1:] or ["it wrote no cache"]
        log.warning("compiling the %s kernel in a child process failed (%s): compiling it here", algorithm, why[0])
        return False
    return True
