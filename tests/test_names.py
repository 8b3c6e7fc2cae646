"""``TopicNames.check``: what a topic name may hold (``topicstream label``). The Redis side is tested with a real
Redis in ``tests/integration/test_follow.py``."""

from __future__ import annotations

import pytest

from service.names import MAX_NAME, TopicNames


@pytest.mark.parametrize("name", ["\x1b[31mred", "csi \x9b2J", "del\x7f", "nul\x00"])
def test_control_characters_are_refused_c1_included(name: str) -> None:
    """A name is printed by ``topicstream topics``: C0, DEL and C1 controls (CSI, U+009B, starts a terminal escape
    sequence as ESC [ does) are refused."""
    with pytest.raises(ValueError, match="control characters"):
        TopicNames.check(1, name)


def test_names_are_tidied_and_bounded() -> None:
    assert TopicNames.check(3, "  Zürich\tlocal\nnews ") == "Zürich local news"
    assert TopicNames.check(0, "x" * MAX_NAME) == "x" * MAX_NAME
    with pytest.raises(ValueError, match="at most"):
        TopicNames.check(0, "x" * (MAX_NAME + 1))
    with pytest.raises(ValueError, match=">= 0"):
        TopicNames.check(-1, "Oil")
