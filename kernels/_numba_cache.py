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

import contextlib
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

__all__ = ["compile_apart", "ensure_numba_cache", "uncache_after_fault"]

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
#: The most seconds the child may take: compiling the online HDP took 7–14 s alone and 30–44 s with four compiling at
#: once on a 2-core machine; well under the 300 s without a turn of the batch loop after which ``/healthz`` fails
#: (a hung child then leaves time to compile here).
COMPILE_TIMEOUT_S = 120.0
#: The child's program: ``python -c`` puts its working directory first on its path, before ``PYTHONPATH``, so the
#: directory that holds this ``kernels`` package goes before both (a review: a child started in a checkout of other
#: kernels imported those, wrote another cache, and this process compiled in place after all).
_CHILD_CODE = (
    "import ctypes, json, signal, sys\n"
    "sys.path.insert(0, sys.argv[3])\n"
    "if sys.platform == 'linux':  # die with the parent (PR_SET_PDEATHSIG), not linger stopped or orphaned\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "from kernels.registry import kernel_class\n"
    "kernel_class(sys.argv[1]).warm_up(**json.loads(sys.argv[2]))\n"
)


def _cached(entry_point: str) -> bool:
    """Whether this process would load ``entry_point`` ("module:function") from numba's cache: its index is fresh by
    numba's own test (this numba's version, the source file's stamp: a kernel edited since left an index that
    numba ignores, and the process compiled in place, 16 % slower, a helper's runs), names at least one entry, and
    every data file it names reads back. An index or data file that does not read back (truncated, garbled) is
    flushed, so that the child writes it anew instead of this process failing on it. True where numba does not say
    (another version's internals, caching off): then nothing is compiled apart."""
    module, name = entry_point.split(":")
    try:
        cache_file = getattr(importlib.import_module(module), name)._cache._cache_file
        load_index, load_data, flush = cache_file._load_index, cache_file._load_data, cache_file.flush
    except AttributeError:
        return True
    try:
        overloads = load_index()  # {} where there is none, or it is stale, or another numba's
        for data_name in overloads.values():
            load_data(data_name)
    except FileNotFoundError:  # a data file the index names is gone
        return False
    except Exception as e:  # unpickling bytes on disk raises many kinds
        log.warning("numba's cache of %s does not read back (%r): compiling it again", entry_point, e)
        with contextlib.suppress(OSError):
            flush()
        return False
    return bool(overloads)


def compile_apart(algorithm: str, params: Mapping[str, Any], entry_points: Sequence[str]) -> bool:
    """Compile kernel ``algorithm`` with ``params`` in a child process (its ``warm_up``) when numba's cache lacks
    one of its ``entry_points``, so that this process loads them from the cache (see the module docstring).
    Returns whether the child compiled them; False (this process compiles, as before) inside the child, with the
    JIT off, with parameters that are not JSON, or when the child failed, took over :data:`COMPILE_TIMEOUT_S` or
    wrote no cache (said). The child imports this very ``kernels`` package (its directory first on its path)."""
    from numba.core import config

    jit_off = bool(getattr(config, "DISABLE_JIT", False))
    if not entry_points or os.environ.get(_CHILD) or jit_off or all(map(_cached, entry_points)):
        return False
    ours = str(Path(__file__).resolve().parents[1])  # the directory that holds this kernels package
    try:
        args = [sys.executable, "-c", _CHILD_CODE, algorithm, json.dumps(dict(params)), ours]
    except TypeError:  # parameters only Python holds (numpy scalars from a caller): compiled here
        return False
    env = {**os.environ, _CHILD: "1"}  # NUMBA_CACHE_DIR with it (ensure_numba_cache sets it)
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("compiling the %s kernel in a child process failed (%s): compiling it here", algorithm, e)
        return False
    if done.returncode != 0 or not all(map(_cached, entry_points)):
        why = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}, no cache written"]
        log.warning("compiling the %s kernel in a child process failed (%s): compiling it here", algorithm, why[0])
        return False
    return True


def uncache_after_fault(error: BaseException) -> bool:
    """Whether ``error`` came from numba's cache (a frame in ``numba/core/caching.py``: a full or read-only disk while
    saving, a truncated or garbled index or data file while loading). If so, every numba function of ``kernels``
    and ``service`` stops using the cache in this process, which compiles (slower, but it starts), said with the
    directory to clear; a file that did not load is flushed, so the next start writes it anew. Before, such a file
    stopped every start with an ``UnpicklingError`` or ``EOFError`` (a crash loop; in Kubernetes the cache's
    ``emptyDir`` outlives the container)."""
    tb, from_cache = error.__traceback__, False
    while tb is not None and not from_cache:
        from_cache = tb.tb_frame.f_code.co_filename.endswith(os.path.join("numba", "core", "caching.py"))
        tb = tb.tb_next
    if not from_cache:
        return False
    from numba.core import config
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("kernels", "service"):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Dispatcher):
                dispatcher: Any = value  # its cache is numba's internals
                if not isinstance(error, OSError):  # a file that did not load: the next start compiles it anew
                    with contextlib.suppress(OSError, AttributeError):
                        dispatcher._cache.flush()
                dispatcher._cache = NullCache()
    log.warning(
        "numba's cache failed (%s: %s): compiling without it in this process; clear %s if it persists",
        type(error).__name__,
        error,
        getattr(config, "CACHE_DIR", None) or "the __pycache__ directories beside the kernels",
    )
    return True
