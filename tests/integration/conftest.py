"""The integration tests' fixtures (``endpoints``, ``settings``) are in ``tests/conftest.py``; their helpers in
``tests/integration/helpers.py`` (re-exported here for older imports)."""

from .helpers import article, committed, produce, read_all

__all__ = ["article", "committed", "produce", "read_all"]
