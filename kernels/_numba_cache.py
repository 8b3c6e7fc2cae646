"""A place for numba's on-disk cache when numba has none (a read-only install with no writable home).

The kernels compile with ``cache=True``. numba looks for a writable cache directory when a function is decorated,
that is at import: ``NUMBA_CACHE_DIR`` if set, else ``__pycache__`` beside the module, else the user's cache
directory (``~/.cache/numba``). Where none is writable (a package installed read-only for a service user without a
home, ``docker run --read-only``) the import raised ``RuntimeError: cannot cache function ...: no locator available``
and ``topicstream run``, ``replica`` and ``eval`` stopped with a traceback. :func:`ensure_numba_cache` checks the same
places first, without importing numba, and only where all of them fail points numba at a private directory under
the system's temporary directory, with a warning that names it.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["ensure_numba_cache"]

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
