"""Hostile input for the learner: every kind of message a bad day on a news platform brings, from a fixed seed.

Each case is ``(key, value, good)``: ``key`` is unique and equals the article id of a good case, so the test can
compare sets (ids in = ids out ∪ dead letters); ``good`` says whether the case is a valid article by the input
contract (README.md, "Events"), decided by how it was built, not by running the decoder.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator

__all__ = ["Case", "hostile_cases"]

Case = tuple[bytes, bytes | None, bool]

_WORDS = [
    "markets",
    "rally",
    "bank",
    "rates",
    "election",
    "vote",
    "football",
    "striker",
    "oil",
    "opec",
    "storm",
    "flood",
    "court",
    "judge",
]
_RTL = "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \u202ereversed\u202c"


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _good(key: str, **fields: object) -> bytes:
    return json.dumps({"id": key, **fields}).encode()


def hostile_cases(n: int, seed: int, max_bytes: int) -> Iterator[Case]:
    """``n`` cases cycling through the kinds below, in a seeded random order of kinds."""
    rng = random.Random(seed)
    deep = 10_000

    def kinds(key: str) -> list[Callable[[], tuple[bytes | None, bool]]]:
        k = key.encode()
        return [
            lambda: (_good(key, text=_text(rng, rng.randint(5, 80))), True),
            lambda: (bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))) + b"\xff", False),  # not UTF-8
            lambda: (b"\xef\xbb\xbf" + _good(key, text=_text(rng, 20)), True),  # BOM
            lambda: (b'{"id":"' + k + b'","text":"x","deep":' + b"[" * deep + b"]" * deep + b"}", False),
            lambda: (b'{"id":"' + k + b'","text":' + b"[" * deep + b"]" * deep + b"}", False),
            lambda: (b"{" + b'"a":{' * deep + b"}" * deep + b"}", False),
            lambda: (b'{"id":"' + k + b'","text":NaN}', False),  # text must be a string
            lambda: (b'{"id":"' + k + b'","text":"ok","score":NaN,"big":1e999}', True),  # unknown fields ignored
            lambda: (b'{"id":"other","id":"' + k + b'","text":"duplicate keys, the last wins"}', True),
            lambda: (b'{"id":"' + k + b'","text":"raw\x00nul\x01ctrl"}', False),  # unescaped control characters
            lambda: (_good(key, text="escaped \u0000 nul \u0007 bell " + _text(rng, 5)), True),
            lambda: (_good(key, text=_RTL + " " + _text(rng, 5), title=_RTL), True),
            lambda: (_good(key, text="oil"), True),  # one word
            lambda: (_good(key, text=_text(rng, 100_000)[: max_bytes - 200]), True),  # just under the limit
            lambda: (_good(key, text="x" * max_bytes), False),  # just over the limit
            lambda: (None, False),  # tombstone
            lambda: (b"", False),
            lambda: (b'{"id":"' + k + b'","text":"unterminated', False),
            lambda: (b'["a list", "not an object"]', False),
            lambda: (_good(key, text=123), False),
            lambda: (_good(key, text="", title=""), False),
            lambda: (_good(key, text="ok", published_at="not a date"), False),
            lambda: (b'{"id":"' + k + b'","text":"lone \\ud800 surrogate"}', False),
            lambda: (_good(key, text=_text(rng, 10), title="t" * 20_000, url="http://x/" + "u" * 20_000), True),
        ]

    order: list[int] = []
    for i in range(n):
        if not order:
            order = list(range(len(kinds("k"))))
            rng.shuffle(order)
        key = f"h{seed}-{i}"
        value, good = kinds(key)[order.pop()]()
        yield key.encode(), value, good
