"""From article text to word ids: a tokenizer and an open-but-bounded vocabulary.

News never stops inventing words (names, places, typos, URLs). A vocabulary that admits every new word is a
memory leak, and one frozen at start-up cannot follow the news. :class:`Vocabulary` keeps at most ``capacity``
words, each in a fixed *slot* (the word id the kernels see), and recycles slots by frequency:

* every slot carries an exponentially decayed count of its word (half-life ``half_life_tokens`` tokens);
* a word not in the vocabulary is counted in a bounded candidate table by the documents that use it, once per
  document whatever its count there, so one article alone, however long, cannot push its words in (at most
  ``max_candidates`` entries; when it overflows, the weaker half is dropped, of equal counts the words seen
  longest ago, so one-off words are forgotten and recurring ones survive — a lossy heavy-hitter sketch);
* a candidate whose count reaches ``admit_count`` takes a free slot, or — when none is free — the slot of the
  weakest word, provided the candidate's count is higher (LFU eviction with ageing). The evicted slots are
  returned to the caller, who must reset the kernel's statistics for them (``TopicModel.reset_words``) so the
  new word does not inherit the old one's topics.

Memory is therefore ``O(capacity + max_candidates)`` strings and numbers, whatever the length of the stream, and
every slot always holds a real word, so topics are shown as readable words. Tokens of words that are neither in
the vocabulary nor admitted in this batch are out-of-vocabulary (dropped and counted).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import json
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from kernels import Batch

__all__ = [
    "INVISIBLE",
    "EncodedBatch",
    "FlatBags",
    "Tokenizer",
    "Vocabulary",
    "language_key",
    "language_stop_words",
    "read_stop_words",
]

# Runs of letters (any script), no digits or underscores: "split on non-letters" as in seed 003.
_WORD = re.compile(r"[^\W\d_]+")
# The same split for pure-ASCII text, three times faster: every ASCII non-letter becomes a space.
_ASCII_NON_LETTERS = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isalpha()})
# Seed of the words' hashes (any fixed value: hashes never leave the process).
_HASH_SEED = 0x70F1C5


def _hash_words(words: Any) -> NDArray[np.uint64]:
    """64-bit hashes of a polars string Series (in polars, outside the GIL). Equal words have equal hashes;
    every user checks the words behind a match, so a collision costs time, never correctness."""
    return np.asarray(words.hash(_HASH_SEED).to_numpy(), dtype=np.uint64)


#: The version of what :func:`_words` does to a text before it splits it (part of :meth:`Tokenizer.fingerprint`):
#: 1, NFKC with the characters below dropped and "İ" lower-cased to "i"; bump it when that changes.
NORMALISATION = 1
#: Characters that are part of no word's spelling: the soft hyphen (German CMS output breaks
#: "Wirt\u00adschafts\u00adpolitik" with it), zero-width space, (non-)joiners, word joiner, a byte-order mark.
INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\ufeff"
_DROP_INVISIBLE = str.maketrans("", "", INVISIBLE)
#: What lower-casing makes of "İ" (Turkish capital dotted I): "i" and a combining dot, which "istanbul" lacks.
_DOTTED_I = "i\u0307"


def _words(text: str) -> list[str]:
    """Lower-cased runs of letters, after NFKC normalisation and without :data:`INVISIBLE` characters, so that one
    word is one word however it was typed: composed or decomposed "café", full-width "ａｐｐｌｅ", the "ﬁ" ligature,
    a soft hyphen inside it, "İstanbul" (each was two words, or pieces). Only a text with a character that this
    can change is normalised (:func:`_normalising`): most news has none, and NFKC doubled the tokenizer's time."""
    if text.isascii():
        return text.lower().translate(_ASCII_NON_LETTERS).split()
    if _normalising().python.search(text):
        text = unicodedata.normalize("NFKC", text).translate(_DROP_INVISIBLE).lower().replace(_DOTTED_I, "i")
    else:
        text = text.lower()
    return _unicode_words().findall(text)


class _CharClass(NamedTuple):
    """One set of characters as a Python and as a Rust (polars) regular expression."""

    python: re.Pattern[str]
    rust: str


@functools.cache
def _normalising() -> _CharClass:
    """The characters at which normalising can change a text's words: combining marks (NFKC composes them) and
    the Hangul jamo that compose, :data:`INVISIBLE`, "İ", and every character whose NFKC form differs from it where
    either holds a letter ("ﬁ", "ａ", "㎏"; not "…" or a no-break space, whose forms are no letters either). Every
    second character of a canonical decomposition is in it, so no two characters outside it compose. Built once,
    on the first text that is not ASCII (0.3 s)."""
    word = {"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Mn", "Mc", "Me", "Pc"}

    def lettered(s: str) -> bool:
        return any(unicodedata.category(ch) in word for ch in s)

    codes = []
    for c in range(sys.maxunicode + 1):
        ch = chr(c)
        category = unicodedata.category(ch)
        if category == "Cs":
            continue
        form = unicodedata.normalize("NFKC", ch)
        if (
            category[0] == "M"
            or ch in INVISIBLE
            or ch == "\u0130"
            or 0x1160 <= c <= 0x11FF
            or (form != ch and (lettered(ch) or lettered(form)))
        ):
            codes.append(c)
    python, rust = [], []
    for _, run in itertools.groupby(enumerate(codes), key=lambda ic: ic[1] - ic[0]):
        block = [c for _, c in run]
        lo, hi = block[0], block[-1]
        python.append(re.escape(chr(lo)) + (f"-{re.escape(chr(hi))}" if hi > lo else ""))
        rust.append(f"\\x{{{lo:X}}}" + (f"-\\x{{{hi:X}}}" if hi > lo else ""))
    return _CharClass(re.compile(f"[{''.join(python)}]"), f"[{''.join(rust)}]")


@functools.cache
def _unicode_words() -> re.Pattern[str]:
    r"""Runs of what the Rust regex behind :meth:`Tokenizer.count_many` (polars) takes for ``[^\W\d_]``: letters,
    letter numbers, combining marks, connector punctuation but ``_``, and the zero-width (non-)joiner. Python's
    own ``[^\W\d_]`` leaves combining marks out, so "हिन्दी", "İstanbul" (lower-cased with a combining dot) or a
    decomposed "é" would split into pieces that an article's words never are; it also keeps other numbers (³),
    which Rust does not. Built once, on the first text that is not ASCII (0.1 s)."""
    kinds = ("Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Mn", "Mc", "Me", "Pc")
    codes = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in kinds and c != ord("_")]
    codes += [0x200C, 0x200D]
    ranges: list[str] = []
    for _, run in itertools.groupby(enumerate(sorted(codes)), key=lambda ic: ic[1] - ic[0]):
        block = [c for _, c in run]
        ranges.append(re.escape(chr(block[0])) + (f"-{re.escape(chr(block[-1]))}" if len(block) > 1 else ""))
    return re.compile(f"[{''.join(ranges)}]+")


def read_stop_words(path: Path) -> frozenset[str]:
    """The words of a stop-word file (UTF-8, one or more per line), spelt as the tokenizer spells words: "Über"
    in the file drops "über" and "über" from articles alike."""
    return frozenset(chain.from_iterable(_words(line) for line in path.read_text(encoding="utf-8").splitlines()))


def language_key(tag: str | None) -> str | None:
    """The language of an article's ``language`` field as a lower-case primary subtag: "de-AT", "DE" and
    "de_CH" are all "de" (None when there is none)."""
    if not tag:
        return None
    return re.split(r"[-_]", tag.strip(), maxsplit=1)[0].lower() or None


#: Languages written without spaces between words: the tokenizer does not segment them (README, "Events"), so
#: their stop words would change nothing.
UNSEGMENTED = frozenset({"zh", "ja", "th"})
#: Typos of stopwords-iso's Greek list: the INCREMENT sign (U+2206) for a capital delta, which the tokenizer takes
#: for a separator ("∆εν" made "εν"), and a medial sigma where a word ends (no article spells "αυτοσ").
_GREEK_TYPOS = (re.compile("\u2206"), "δ"), (re.compile("σ\\b"), "ς")


def language_stop_words(code: str) -> frozenset[str]:
    """The stop words of the language ``code`` (ISO 639-1, e.g. "de"; English excepted, see :class:`Tokenizer`)
    from stopwords-iso (the ``stopwordsiso`` package: 57 languages besides English), spelt as the tokenizer spells
    words. An entry the tokenizer splits ("aujourd'hui", "хотел бы") gives only its pieces that are entries
    themselves: "хотел" (wanted) alone is no stop word. A ValueError names the languages it has when it lacks
    ``code``."""
    import stopwordsiso

    if code == "en":
        raise ValueError("English stop words are built in (scikit-learn's list): do not list en")
    if code in UNSEGMENTED:
        raise ValueError(
            f"{code!r} text is written without spaces and not split into words (README, Events): segment it before "
            "it is produced; its stop words would change nothing"
        )
    if not stopwordsiso.has_lang(code):
        have = ", ".join(sorted(set(stopwordsiso.langs()) - {"en"} - UNSEGMENTED))
        raise ValueError(f"no stop words for language {code!r}; stopwords-iso has {have}")
    entries = [str(w) for w in stopwordsiso.stopwords(code)]
    if code == "el":
        for typo, fix in _GREEK_TYPOS:
            entries = [typo.sub(fix, w) for w in entries]
    spelt = [_words(w) for w in entries]
    whole = {pieces[0] for pieces in spelt if len(pieces) == 1}
    return frozenset(whole | {p for pieces in spelt if len(pieces) > 1 for p in pieces if p in whole})


class Tokenizer:
    """Normalises (NFKC, invisible characters dropped), lower-cases, splits on non-letters, drops stop words and
    words outside ``[min_length, max_length]``.

    This is seed 003's preprocessing (English stop words from scikit-learn). ``extra_stop_words`` are dropped
    from every text; ``keep_words`` from no text, whatever list holds them (stopwords-iso's are broad: German
    "jahr", "menschen", Russian "россия", "война"). With ``languages`` (ISO 639-1 codes, English excepted), a
    text whose language (the article's ``language`` field, :func:`language_key`) is one of them loses that
    language's stop words (:func:`language_stop_words`) instead of the English ones: a German article keeps "war"
    (a noun in English, "was" in German) only when it is not marked "de". Texts without a language, or in another
    one, lose the English ones.

    >>> Tokenizer()("The Fed raised rates; the FED's chair spoke.")
    ['fed', 'raised', 'rates', 'fed', 'chair', 'spoke']
    >>> Tokenizer(languages=["de"])("Die Regierung und der Krieg war lang", language="de-AT")
    ['regierung', 'krieg']
    """

    def __init__(
        self,
        stop_words: Iterable[str] | None = None,
        min_length: int = 3,
        max_length: int = 30,
        extra_stop_words: Iterable[str] = (),
        languages: Iterable[str] = (),
        keep_words: Iterable[str] = (),
    ) -> None:
        if min_length < 1 or max_length < min_length:
            raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")
        if stop_words is None:
            # scikit-learn's list; imported here, not at module level, so commands that never tokenize start fast
            from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

            stop_words = ENGLISH_STOP_WORDS
        extra, keep = frozenset(extra_stop_words), frozenset(keep_words)
        self.stop_words = (frozenset(stop_words) | extra) - keep
        #: Each listed language's stop words (with ``extra_stop_words``, without ``keep_words``), by its code.
        codes = sorted({key for code in languages if (key := language_key(code))})  # "DE" is "de"
        self.language_stop_words = {code: (language_stop_words(code) | extra) - keep for code in codes}
        self._stop_series: Any = None  # the English list as a polars list literal, made on first use
        self._stop_table: Any = None  # (language, word) pairs as a polars frame, made on first use
        self.min_length = min_length
        self.max_length = max_length

    def fingerprint(self) -> str:
        """What makes this tokenizer's words: its normalisation (:data:`NORMALISATION`), stop words (and each
        language's, when it has any) and lengths, hashed. The learner keeps it in every snapshot; a replica whose
        own differs reads other words than the model learned (another stop-word file or languages, an older
        version during a rolling upgrade) and says so."""
        spec: list[Any] = [NORMALISATION, sorted(self.stop_words), self.min_length, self.max_length]
        if self.language_stop_words:
            spec.append({code: sorted(words) for code, words in self.language_stop_words.items()})
        return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]

    def stop_words_for(self, language: str | None) -> frozenset[str]:
        """The stop words of a text in ``language`` (an article's ``language`` field, or None)."""
        return self.language_stop_words.get(language_key(language) or "", self.stop_words)

    def __call__(self, text: str, language: str | None = None) -> list[str]:
        stop, lo, hi = self.stop_words_for(language), self.min_length, self.max_length
        return [w for w in _words(text) if lo <= len(w) <= hi and w not in stop]

    def _language_column(self, languages: Sequence[str | None] | None) -> list[str] | None:
        """Each text's key into :meth:`_stops`: its listed language, or "" for the English list; None when every
        text takes the English list (the faster filter, :meth:`count_many`)."""
        if languages is None or not self.language_stop_words:
            return None
        listed = self.language_stop_words
        keys = [key if (key := language_key(tag)) in listed else "" for tag in languages]
        return keys if any(keys) else None

    def _stops(self) -> Any:
        """The stop words as a polars frame of (language key, word) rows; "" holds the English list."""
        import polars as pl

        if self._stop_table is None:
            lists = {"": self.stop_words, **self.language_stop_words}
            self._stop_table = pl.DataFrame(
                {
                    "lang": [code for code, words in lists.items() for _ in words],
                    "w": [w for words in lists.values() for w in sorted(words)],
                },
                schema={"lang": pl.String, "w": pl.String},
            ).lazy()
        return self._stop_table

    def count_many(self, texts: Sequence[str], languages: Sequence[str | None] | None = None) -> FlatBags:
        """The bags of words of many texts at once, in polars (Rust, multi-threaded, without the GIL: the
        learner's kernel runs meanwhile). Same words, counts and order as :meth:`count` on each text (in any
        script, combining marks included: :func:`_unicode_words`), except for a few symbols the Rust regex takes
        for letters (circled letters such as ``Ⓐ``) and letters newer than this Python's Unicode tables (CJK
        Extension H, U+31350…, is Unicode 15, Python 3.11 has 14: letters to polars, nothing to :meth:`count`;
        ``tests/test_ingest_properties.py`` leaves both out); measured identical on every article of BBC News,
        Reuters-21578 and 20 Newsgroups. ``languages``: each text's language (:meth:`stop_words_for`).
        """
        import polars as pl

        from .hashindex import count_runs

        if not texts:
            return FlatBags(np.zeros(0, dtype=np.int64), [], np.zeros(0), 0)
        lang = self._language_column(languages)
        frame = {"doc": np.arange(len(texts), dtype=np.int64), "w": list(texts)}
        tokens = (
            pl.DataFrame(frame if lang is None else {**frame, "lang": lang})
            .lazy()
            .with_columns(
                pl.when(pl.col("w").str.contains(_normalising().rust))  # as _words decides
                .then(
                    pl.col("w")
                    .str.normalize("NFKC")
                    .str.replace_all(f"[{INVISIBLE}]", "")
                    .str.to_lowercase()
                    .str.replace_all(_DOTTED_I, "i", literal=True)
                )
                .otherwise(pl.col("w").str.to_lowercase())
                .str.extract_all(_WORD.pattern)
            )
            .explode("w")
            .drop_nulls()
            .filter(pl.col("w").str.len_chars().is_between(self.min_length, self.max_length))
        )
        if lang is None:  # one list for every text: a set lookup, no join
            if self._stop_series is None:
                self._stop_series = pl.Series(sorted(self.stop_words), dtype=pl.String).implode()
            rows = tokens.filter(~pl.col("w").is_in(self._stop_series)).collect()
        else:
            rows = tokens.join(self._stops(), on=["lang", "w"], how="anti", maintain_order="left").collect()
        # Count (doc, word) pairs by the words' hashes in numba: a stable polars group-by on strings costs more
        # than the tokenizing itself. Every row's word is then checked against its group's first word, so
        # colliding hashes can never merge two words (if they ever did, the batch is counted by the strings).
        doc, words = rows["doc"].to_numpy().astype(np.int64, copy=False), rows["w"]
        hashes = _hash_words(words)
        group, first, counts = count_runs(doc, hashes)
        firsts = words.gather(first)
        if not (words == firsts.gather(group)).all():
            bags = rows.group_by(["doc", "w"], maintain_order=True).len()
            return FlatBags(
                bags["doc"].to_numpy().astype(np.int64, copy=False),
                bags["w"],
                bags["len"].to_numpy().astype(np.float64),
                len(texts),
            )
        # the words stay a polars column: Vocabulary.encode looks them up by these hashes
        return FlatBags(doc[first], firsts, counts, len(texts), hashes[first])

    def count(self, text: str, language: str | None = None) -> Counter[str]:
        """Word counts of ``text`` (the bag of words a kernel sees), in ``language`` (:meth:`stop_words_for`).

        Counts first and filters the distinct words afterwards: the hot path of the learner.
        """
        counts = Counter(_words(text))
        keys = list(counts)
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        for i in np.flatnonzero((lengths < self.min_length) | (lengths > self.max_length)).tolist():
            del counts[keys[i]]
        for w in self.stop_words_for(language).intersection(counts):
            del counts[w]
        return counts


@dataclass(frozen=True)
class FlatBags:
    """The bags of words of a batch of documents, flat: row i says document ``doc[i]`` holds ``words[i]``
    ``counts[i]`` times. Rows are sorted by document, and within a document by the word's first occurrence
    (the order of :meth:`Tokenizer.count`), so results do not depend on how the bags were computed.

    ``words`` is a list of strings, or a polars string Series (from :meth:`Tokenizer.count_many`), which
    :meth:`Vocabulary.encode` looks up without making a Python string of every row.
    """

    doc: NDArray[np.int64]
    words: Any
    counts: NDArray[np.float64]
    n_docs: int
    #: The words' 64-bit hashes (:func:`_hash_words`) when the tokenizer computed them, else ``None``.
    hashes: NDArray[np.uint64] | None = None

    def word_hashes(self) -> NDArray[np.uint64]:
        """Each row's word as a 64-bit hash (:func:`_hash_words`): the tokenizer's, or computed now."""
        if self.hashes is not None:
            return self.hashes
        import polars as pl

        words = self.words if not isinstance(self.words, list) else pl.Series(self.words, dtype=pl.String)
        return _hash_words(words)

    def words_at(self, rows: NDArray[np.int64]) -> list[str]:
        """The words of the given rows, as Python strings."""
        if isinstance(self.words, list):
            return [self.words[i] for i in rows.tolist()]
        return list(self.words.gather(rows).to_list())

    @classmethod
    def from_counters(cls, bags: Sequence[Counter[str]]) -> FlatBags:
        lengths = np.fromiter(map(len, bags), dtype=np.int64, count=len(bags))
        total = int(lengths.sum())
        words = list(chain.from_iterable(bags))
        counts = np.fromiter(chain.from_iterable(d.values() for d in bags), dtype=np.float64, count=total)
        return cls(np.repeat(np.arange(len(bags)), lengths), words, counts, len(bags))


@dataclass(frozen=True)
class EncodedBatch:
    """Output of :meth:`Vocabulary.encode`.

    Attributes
    ----------
    batch : the documents as word ids (a document may end up empty).
    recycled : slots given to new words in this call; reset them in the kernel *before* training on ``batch``.
    oov_tokens : tokens dropped because their word has no slot.
    """

    batch: Batch
    recycled: NDArray[np.int64]
    oov_tokens: int


class Vocabulary:
    """Open but bounded word ↔ id map (see the module docstring for the policy).

    Parameters
    ----------
    capacity : number of slots (the kernels' ``n_words``).
    admit_count : documents that must use a new word before it gets a slot (each counts once).
    max_candidates : bound on the candidate table; default ``max(16, capacity // 2)``.
    half_life_tokens : tokens after which a count has halved; default ``20 * capacity``.

    >>> v = Vocabulary(capacity=2, admit_count=1)
    >>> enc = v.encode([Counter({"rates": 2, "bank": 1})])
    >>> sorted(v.words()), enc.oov_tokens
    (['bank', 'rates'], 0)
    """

    def __init__(
        self,
        capacity: int,
        *,
        admit_count: float = 2.0,
        max_candidates: int | None = None,
        half_life_tokens: float | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"vocabulary capacity must be >= 1, got {capacity}")
        if admit_count <= 0:
            raise ValueError(f"admit_count must be > 0, got {admit_count}")
        self.capacity = int(capacity)
        self.admit_count = float(admit_count)
        self.max_candidates = int(max_candidates if max_candidates is not None else max(16, capacity // 2))
        self.half_life_tokens = float(half_life_tokens if half_life_tokens is not None else 20 * capacity)
        if self.max_candidates < 1 or self.half_life_tokens <= 0:
            raise ValueError("max_candidates and half_life_tokens must be positive")
        self._slots: list[str | None] = [None] * self.capacity
        self._index: dict[str, int] = {}
        self._counts = np.zeros(self.capacity, dtype=np.float64)
        self._candidates: dict[str, float] = {}
        # Free slots, smallest id first (a heap keeps admission order deterministic).
        self._free = list(range(self.capacity))
        self.n_recycled = 0
        self._lookup = _HashedLookup(self.capacity)

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def id_of(self, word: str) -> int | None:
        return self._index.get(word)

    def word(self, slot: int) -> str | None:
        return self._slots[slot]

    def words(self) -> list[str]:
        """The words currently held (slot order)."""
        return [w for w in self._slots if w is not None]

    def slot_words(self) -> list[str]:
        """Slot → word, ``""`` for empty slots (length ``capacity``)."""
        return [w or "" for w in self._slots]

    @property
    def n_candidates(self) -> int:
        return len(self._candidates)

    # ------------------------------------------------------------------ encoding
    def encode(
        self, docs: Sequence[Counter[str]] | FlatBags, *, learn: bool = True, counted: NDArray[np.bool_] | None = None
    ) -> EncodedBatch:
        """Map bags of words to ids; with ``learn`` (the learner), update counts and admit new words first.

        Replicas and evaluation use ``learn=False``: the vocabulary is then read-only. ``counted`` (one flag a
        document; default all): the documents whose words count when learning; the others (the learner's copies of
        texts it learned lately) are only mapped, so a flood of one story cannot push other words out of their slots.
        """
        flat = docs if isinstance(docs, FlatBags) else FlatBags.from_counters(docs)
        index = self._index
        n_docs, words, cnts = flat.n_docs, flat.words, flat.counts
        if isinstance(words, list):
            ids = np.fromiter(map(index.get, words, repeat(-1)), dtype=np.int64, count=len(words))
        else:
            ids = self._lookup.ids(words, flat, index)
        rows_counted = None if counted is None or counted.all() else counted[flat.doc]
        # Python loops only over the (rare, once the vocabulary is warm) words without a slot.
        unknown = np.flatnonzero(ids < 0)
        recycled: list[int] = []
        if learn:
            self._decay(float(cnts.sum() if rows_counted is None else cnts[rows_counted].sum()))
            if unknown.size:
                unknown_words = flat.words_at(unknown)
                new_words: dict[str, float] = {}
                counting = unknown_words if rows_counted is None else flat.words_at(unknown[rows_counted[unknown]])
                for w in counting:  # one entry per (document, word): a word counts once per document
                    new_words[w] = new_words.get(w, 0.0) + 1.0
                recycled = self._admit(new_words)
                if recycled:  # rows of words that lost their slots to new words just now: out of vocabulary
                    ids[np.isin(ids, recycled)] = -1  # (before, the new word got their tokens)
                ids[unknown] = np.fromiter(map(index.get, unknown_words, repeat(-1)), dtype=np.int64)
        keep = ids >= 0
        oov = float(cnts[~keep].sum())
        id_arr, cnt_arr = ids[keep], cnts[keep]
        indptr = np.zeros(n_docs + 1, dtype=np.int64)
        if n_docs:
            np.cumsum(np.bincount(flat.doc[keep], minlength=n_docs), out=indptr[1:])
        if learn and id_arr.size:
            learned = keep if rows_counted is None else keep & rows_counted
            self._counts += np.bincount(ids[learned], weights=cnts[learned], minlength=self.capacity)
        return EncodedBatch(Batch(indptr, id_arr, cnt_arr), np.asarray(recycled, dtype=np.int64), round(oov))

    def _decay(self, n_tokens: float) -> None:
        if n_tokens <= 0:
            return
        factor = 0.5 ** (n_tokens / self.half_life_tokens)
        self._counts *= factor

    def _admit(self, unknown: dict[str, float]) -> list[int]:
        """Count unknown words as candidates, give slots to those that qualify; return recycled slots."""
        cand = self._candidates
        for w, c in unknown.items():
            cand[w] = cand.pop(w, 0.0) + c  # the table's order is the order words were last seen, oldest first
        ready = sorted(((c, w) for w, c in cand.items() if c >= self.admit_count), key=lambda cw: (-cw[0], cw[1]))
        recycled: list[int] = []
        if ready:
            n_free = min(len(self._free), len(ready))
            for c, w in ready[:n_free]:
                self._assign(heapq.heappop(self._free), w, c)
            rest = ready[n_free:]
            if rest:
                recycled = self._evict_for(rest)
        if len(cand) > self.max_candidates:
            # The larger counts stay, and of equal counts (most are 1) the words seen last. Before, ties went by
            # spelling: a new name early in the alphabet was dropped at every clean-out and never got a slot.
            words = list(cand.items())
            keep = heapq.nlargest(self.max_candidates // 2, range(len(words)), key=lambda i: (words[i][1], i))
            self._candidates = dict(words[i] for i in sorted(keep))
        return recycled

    def _evict_for(self, ready: list[tuple[float, str]]) -> list[int]:
        """Give the weakest slots to the strongest candidates that beat them (both lists sorted)."""
        n = min(len(ready), self.capacity)
        weakest = np.argpartition(self._counts, n - 1)[:n] if n < self.capacity else np.arange(self.capacity)
        weakest = weakest[np.lexsort((weakest, self._counts[weakest]))]
        recycled: list[int] = []
        for (c, w), slot in zip(ready, weakest.tolist(), strict=False):
            if c <= self._counts[slot]:
                break
            old = self._slots[slot]
            if old is not None:
                del self._index[old]
            self._assign(slot, w, c)
            recycled.append(slot)
        self.n_recycled += len(recycled)
        return recycled

    def _assign(self, slot: int, word: str, count: float) -> None:
        self._lookup.changed(slot)
        self._slots[slot] = word
        self._index[word] = slot
        self._counts[slot] = count
        self._candidates.pop(word, None)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """JSON-compatible settings and lists plus the count array."""
        return {
            "params": {
                "capacity": self.capacity,
                "admit_count": self.admit_count,
                "max_candidates": self.max_candidates,
                "half_life_tokens": self.half_life_tokens,
            },
            "slots": list(self._slots),
            "counts": self._counts.copy(),
            # two parallel sequences, not a {word: count} object: stored as arrays, not as a JSON object
            "candidates": {
                "words": list(self._candidates),
                "counts": np.fromiter(self._candidates.values(), dtype=np.float64, count=len(self._candidates)),
            },
            "n_recycled": self.n_recycled,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Vocabulary:
        v = cls(**state["params"])
        slots = list(state["slots"])
        if len(slots) != v.capacity:
            raise ValueError(f"vocabulary state has {len(slots)} slots, capacity is {v.capacity}")
        v._slots = [s if s else None for s in slots]
        v._index = {w: i for i, w in enumerate(v._slots) if w is not None}
        v._counts = np.asarray(state["counts"], dtype=np.float64).copy()
        cand = state["candidates"]
        if set(cand) == {"words", "counts"} and not isinstance(cand["counts"], int | float):
            pairs = zip(cand["words"], np.asarray(cand["counts"], dtype=np.float64).tolist(), strict=True)
        else:  # snapshots of earlier versions: a {word: count} object
            pairs = cand.items()
        v._candidates = {str(k): float(c) for k, c in pairs}
        v._free = [i for i, w in enumerate(v._slots) if w is None]
        heapq.heapify(v._free)
        v.n_recycled = int(state.get("n_recycled", 0))
        return v


class _HashedLookup:
    """Word → slot look-ups for a whole batch by 64-bit hashes (computed in polars, outside the GIL) in a hash
    index (numba, outside the GIL), for :meth:`Vocabulary.encode`.

    Per-row Python dictionary look-ups cost the batch loop ~16 µs an article on BBC News with an idle second core,
    and several times that while the kernel thread streams N^Φ through the shared cache, all of it holding the
    GIL; a polars hash join hashed the whole vocabulary again for every batch (~50 µs an article in batches of 50).
    Here the vocabulary's words are hashed once into a :mod:`service.hashindex`, rebuilt only after many slots
    have changed. Every hit is checked word for word (a polars string comparison), so a hash collision can never
    give a word another word's slot. Between rebuilds the index may be stale, and the rows it could answer
    wrongly are looked up again in the dictionary: rows it finds no slot for (the word may have been admitted
    since), and rows whose slot was given to another word since (the word may have been evicted). So the answer
    is always the dictionary's.
    """

    def __init__(self, capacity: int) -> None:
        #: Changed slots after which the index is rebuilt (rebuilding costs ~10 ms at 65,536 words).
        self.rebuild_after = max(1, min(2048, capacity // 32))
        self._table: NDArray[np.int64] | None = None  # hash index over _hashes
        self._hashes = np.zeros(0, dtype=np.uint64)  # the hash of each indexed word
        self._slots = np.zeros(0, dtype=np.int64)  # its slot
        self._words: Any = None  # the words (a polars Series)
        self._changed: set[int] = set()

    def changed(self, slot: int) -> None:
        if self._table is not None:
            self._changed.add(slot)
            if len(self._changed) > self.rebuild_after:
                self._table, self._changed = None, set()

    def _build(self, index: dict[str, int]) -> NDArray[np.int64]:
        import polars as pl

        from .hashindex import build_index

        self._words = pl.Series(list(index), dtype=pl.String)
        self._hashes = _hash_words(self._words)
        self._slots = np.fromiter(index.values(), dtype=np.int64, count=len(index))
        self._table = build_index(self._hashes)
        return self._table

    def ids(self, words: Any, flat: FlatBags, index: dict[str, int]) -> NDArray[np.int64]:
        from .hashindex import find_all

        table = self._table if self._table is not None else self._build(index)
        ids = np.full(len(words), -1, dtype=np.int64)
        if self._hashes.size:
            hashes = flat.hashes if flat.hashes is not None else _hash_words(words)
            pos = find_all(table, self._hashes, hashes)
            hit = pos >= 0
            hit &= (words == self._words.gather(np.where(hit, pos, 0))).to_numpy()
            ids[hit] = self._slots[pos[hit]]
        suspect = ids < 0
        if self._changed:
            suspect |= np.isin(ids, np.fromiter(self._changed, dtype=np.int64, count=len(self._changed)))
        rows = np.flatnonzero(suspect)
        if rows.size:
            ids[rows] = np.fromiter(map(index.get, flat.words_at(rows), repeat(-1)), dtype=np.int64, count=rows.size)
        return ids
