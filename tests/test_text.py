"""Tokenizer and the open-but-bounded vocabulary."""

from __future__ import annotations

import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from service.text import Tokenizer, Vocabulary


def test_tokenizer_is_seed_003_preprocessing() -> None:
    tok = Tokenizer()
    assert tok("The ECB's Lagarde: rates UP 0.25% — Zürich markets re-open!") == [
        "ecb",
        "lagarde",
        "rates",
        "zürich",
        "markets",
        "open",
    ]
    assert tok.count("bank bank banks") == Counter({"bank": 2, "banks": 1})
    assert Tokenizer(stop_words=[], min_length=1)("a b") == ["a", "b"]
    with pytest.raises(ValueError):
        Tokenizer(min_length=5, max_length=2)


def test_words_get_stable_slots_and_unknown_words_are_oov_until_admitted() -> None:
    v = Vocabulary(capacity=4, admit_count=2, half_life_tokens=1e9)
    e1 = v.encode([Counter({"fed": 1, "rates": 3}), Counter({"rates": 1, "flood": 500})])
    assert "rates" in v and "fed" not in v  # fed used by one article: a candidate only
    assert "flood" not in v  # however often one article repeats a word, it counts once
    assert e1.oov_tokens == 501 and e1.batch.counts.tolist() == [3.0, 1.0]
    slot = v.id_of("rates")
    e2 = v.encode([Counter({"fed": 1, "rates": 1})])
    assert v.id_of("rates") == slot and "fed" in v and e2.oov_tokens == 0
    ro = v.encode([Counter({"brand_new": 5})], learn=False)
    assert ro.oov_tokens == 5 and "brand_new" not in v


def test_full_vocabulary_recycles_the_weakest_slot_for_a_stronger_word() -> None:
    v = Vocabulary(capacity=3, admit_count=1, half_life_tokens=1e9)
    v.encode([Counter({"a": 5, "b": 5, "c": 1})])
    weak = v.id_of("c")
    enc = v.encode([Counter({"d": 1})] * 3)  # used by 3 articles: more than c's count
    assert enc.recycled.tolist() == [weak]
    assert v.word(weak) == "d" and "c" not in v and len(v) == 3
    assert enc.batch.word_ids.tolist() == [weak] * 3
    # A newcomer weaker than every held word is not admitted.
    enc = v.encode([Counter({"e": 1})])
    assert enc.recycled.size == 0 and "e" not in v


def test_memory_stays_bounded_when_ten_times_capacity_distinct_words_stream_through() -> None:
    capacity = 500
    v = Vocabulary(capacity=capacity, admit_count=2)
    rng = np.random.default_rng(0)
    common = [f"common{i}" for i in range(50)]

    def batch(start: int) -> list[Counter[str]]:
        docs = []
        for d in range(20):
            words = Counter({w: 2 for w in rng.choice(common, 10)})
            for i in range(50):  # 500 never-seen-before words per batch, each in two articles (admissible)
                words[f"new{start + (d // 2) * 50 + i}"] = 2
            docs.append(words)
        return docs

    v.encode(batch(0))
    tracemalloc.start()
    v.encode(batch(10**7))
    base, _ = tracemalloc.get_traced_memory()
    seen = 0
    for b in range(1, 11):  # 10 × 500 × ... = 10× capacity distinct new words
        v.encode(batch(b * 100_000))
        seen += 500
        assert len(v) <= capacity and v.n_candidates <= v.max_candidates
    end, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seen >= 10 * capacity
    assert end - base < 0.1 * 1e6, f"vocabulary memory grew by {(end - base) / 1e6:.2f} MB"
    assert all(f"common{i}" in v for i in range(50)), "frequent words must survive the churn"
    assert v.n_recycled > 0


@pytest.mark.parametrize("name", ["abbotsford", "zelenskyy"])
def test_a_new_name_gets_a_slot_however_it_is_spelt(name: str) -> None:
    """Every batch brings more one-off words (typos, rare names) than the candidate table holds, so the table is
    cleaned out at every batch; a new name used in one article of each batch must still survive a clean-out and
    get a slot at its next use. Before, the clean-out kept the words seen once by their spelling, the
    alphabetically last half: a simulated news stream gave "zelenskyy" a slot after 400 articles, "abbotsford"
    after 2,800; here "abbotsford" never got one."""
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))

    def one_off(n: int) -> list[str]:
        return ["".join(w) for w in rng.choice(letters, size=(n, 9))]

    v = Vocabulary(capacity=4096, admit_count=2.0, max_candidates=256)
    uses = 0
    while name not in v and uses < 30:
        uses += 1
        docs = [Counter(one_off(20)) for _ in range(20)]  # 400 one-off words a batch: 256 at most are kept
        docs[int(rng.integers(20))][name] += 1  # the name, in any one of the batch's articles
        v.encode(docs)
    assert name in v, f"no slot after {uses} uses"


def test_one_long_article_cannot_evict_the_vocabulary() -> None:
    """A hostile article repeating 2,500 made-up words five times each (over 100 KB) into a warm, full vocabulary
    of 2,000 slots gets none of its words in: a new word counts once per article and needs ``admit_count``
    articles. Its 12,500 tokens still age the slots, so words already waiting as candidates may take a few (56
    here, 3 %; 106 while the candidate table's clean-out kept words by their spelling; 67 while a word evicted in a
    batch still gave that batch's tokens to the word that took its slot, which made newly admitted words look
    stronger); counted by tokens, its own words took 798 slots."""
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(4000)]
    v = Vocabulary(capacity=2000, admit_count=2)
    for _ in range(60):  # a warm vocabulary on Zipf-distributed articles
        v.encode([Counter(rng.choice(words, 300, p=_zipf(len(words)))) for _ in range(20)])
    assert len(v) == 2000
    hostile = Counter({f"zq{i:04d}x": 5 for i in range(2500)})
    enc = v.encode([hostile])
    assert not any(w in v for w in hostile)
    assert enc.recycled.size < 0.08 * v.capacity
    assert all(v.word(int(s)) in words for s in enc.recycled)
    # The same words in a second article are words the news uses: they may now take the weakest slots.
    assert v.encode([hostile]).recycled.size > 0


def _zipf(n: int) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1)
    return p / p.sum()


def test_state_round_trip_is_exact() -> None:
    v = Vocabulary(capacity=8, admit_count=1)
    v.encode([Counter({"x": 2, "y": 1}), Counter({"z": 4})])
    v.encode([Counter({f"w{i}": i + 1 for i in range(12)})])
    w = Vocabulary.from_state(v.state_dict())
    assert w.slot_words() == v.slot_words()
    docs = [Counter({"x": 1, "w11": 2, "fresh": 3, "fresh2": 3})]
    a, b = v.encode(docs), w.encode(docs)
    assert a.recycled.tolist() == b.recycled.tolist()
    assert a.batch.word_ids.tolist() == b.batch.word_ids.tolist()
    assert v.slot_words() == w.slot_words()


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Vocabulary(capacity=0)
    with pytest.raises(ValueError, match="admit_count"):
        Vocabulary(capacity=10, admit_count=0)


TEXTS = [
    "The Fed raised rates; the FED's chair spoke. Rates, rates!",
    "Zürich: Müller's café reopened — naïve prices, £5 coffee, 2026 plans",
    "",
    "a an the of",  # nothing but stop words and short words
    "Ελληνικά και русский текст,日本語のテキスト and English words",
    "x" * 31 + " longwordthatisfine " + "y" * 30,
]


def test_batch_tokenizer_gives_the_same_bags_in_the_same_order() -> None:
    """count_many (polars, outside the GIL) against count (Python, one text at a time): words, counts and the
    order of first occurrence, which the vocabulary's admission order and so the results depend on."""
    tok = Tokenizer()
    flat = tok.count_many(TEXTS)
    assert flat.n_docs == len(TEXTS)
    for d, text in enumerate(TEXTS):
        rows = np.flatnonzero(flat.doc == d)
        assert list(zip(flat.words_at(rows), flat.counts[rows], strict=True)) == list(tok.count(text).items())
    assert tok.count_many([]).n_docs == 0


@pytest.mark.parametrize(
    "text",
    [
        "हिन्दी समाचार: सरकार ने बजट पेश किया",  # Devanagari vowel signs are combining marks
        "İstanbul'da seçim",  # lower-cased, İ is i plus a combining dot
        "cafe\u0301 re\u0301sume\u0301 nai\u0308ve",  # decomposed accents (NFD)
        "x³ abc³def ½ab",  # other numbers are not letters
        "ΟΔΥΣΣΕΥΣ Ελλάδα",  # final sigma
        "日本語のニュース 東京",
        "مرحبا بالعالم",
        "a\u200db\u200cc under_score a‿b",  # joiners and connector punctuation
    ],
)
def test_the_python_tokenizer_splits_every_script_like_the_batch_tokenizer(text: str) -> None:
    """A subscription's words (``Tokenizer.__call__``) and the articles' (``count_many``, polars) are the same
    words in every script: Python's own letter class split words at combining marks."""
    tok = Tokenizer(stop_words=(), min_length=1)
    flat = tok.count_many([text])
    words = flat.words_at(np.arange(len(flat.counts)))
    assert Counter(tok(text)) == Counter(dict(zip(words, flat.counts.tolist(), strict=True)))


def test_vocabulary_encodes_flat_bags_exactly_like_counters() -> None:
    tok = Tokenizer()
    a, b = Vocabulary(64, admit_count=1), Vocabulary(64, admit_count=1)
    for _ in range(3):
        ea = a.encode([tok.count(t) for t in TEXTS])
        eb = b.encode(tok.count_many(TEXTS))
        for x, y in [(ea.batch.indptr, eb.batch.indptr), (ea.batch.word_ids, eb.batch.word_ids)]:
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(ea.batch.counts, eb.batch.counts)
        np.testing.assert_array_equal(ea.recycled, eb.recycled)
        assert ea.oov_tokens == eb.oov_tokens
    assert a.slot_words() == b.slot_words()


@pytest.mark.parametrize("rebuild_after", [1, 7, 2048])
def test_vocabulary_hashed_lookup_answers_like_the_dictionary_through_evictions(rebuild_after: int) -> None:
    """A stream whose words keep changing, in a vocabulary too small for them: admissions and evictions in
    almost every batch, so the hashed array (rebuilt after ``rebuild_after`` changed slots) is stale most of the
    time; every batch must encode exactly as per-row dictionary look-ups do."""
    from service import text

    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghij"))
    tok = Tokenizer(stop_words=())
    a, b = Vocabulary(40, admit_count=2), Vocabulary(40, admit_count=2)
    b._lookup.rebuild_after = rebuild_after
    assert isinstance(b._lookup, text._HashedLookup)
    for step in range(40):
        shift = step * 3  # the word distribution drifts: old words fade, new ones arrive
        texts = [
            " ".join(
                "".join(letters[rng.integers(0, 10, 3)]) + str(shift + rng.zipf(1.5) % 60) for _ in range(30)
            ).translate(str.maketrans("0123456789", "klmnopqrst"))
            for _ in range(8)
        ]
        ea = a.encode([tok.count(t) for t in texts])
        flat = tok.count_many(texts)
        assert flat.hashes is not None  # the hashed path, not the string fallback
        eb = b.encode(flat)
        np.testing.assert_array_equal(ea.batch.indptr, eb.batch.indptr)
        np.testing.assert_array_equal(ea.batch.word_ids, eb.batch.word_ids)
        np.testing.assert_array_equal(ea.batch.counts, eb.batch.counts)
        np.testing.assert_array_equal(ea.recycled, eb.recycled)
        assert ea.oov_tokens == eb.oov_tokens
    assert a.slot_words() == b.slot_words()
    assert a.n_recycled == b.n_recycled > 50  # the stream really evicted


def test_vocabulary_hashed_lookup_never_answers_with_an_evicted_words_old_slot() -> None:
    tok = Tokenizer(stop_words=())
    a = [f"alpha{c}" for c in "abcdefghijklmno"]  # exactly fills the vocabulary
    heavy = ["bravoa", "bravob", "bravoc"]
    dict_path, frame_path = Vocabulary(15, admit_count=1), Vocabulary(15, admit_count=1)
    frame_path._lookup.rebuild_after = 4
    for texts in ([" ".join(a)], [" ".join(a)], [" ".join(heavy)] * 5, [" ".join(a)]):
        ea, eb = dict_path.encode([tok.count(t) for t in texts]), frame_path.encode(tok.count_many(texts))
        np.testing.assert_array_equal(ea.batch.word_ids, eb.batch.word_ids)
        np.testing.assert_array_equal(ea.recycled, eb.recycled)
        assert ea.oov_tokens == eb.oov_tokens
    assert dict_path.n_recycled == 3  # three alpha words were evicted, then came back as unknown words
    assert dict_path.slot_words() == frame_path.slot_words()


@pytest.mark.data
def test_batch_tokenizer_matches_on_a_real_corpus(shared_data) -> None:  # type: ignore[no-untyped-def]
    import gzip
    import json

    with gzip.open(shared_data / "bbc.jsonl.gz", "rt", encoding="utf-8") as f:
        texts = [f"{d.get('title') or ''}\n{d.get('text') or ''}" for d in map(json.loads, f)][:500]
    tok = Tokenizer()
    flat = tok.count_many(texts)
    got: list[list[tuple[str, float]]] = [[] for _ in texts]
    for d, w, c in zip(flat.doc.tolist(), flat.words, flat.counts.tolist(), strict=True):
        got[d].append((w, c))
    assert got == [list(tok.count(t).items()) for t in texts]


@pytest.mark.parametrize("low_bits_equal", [False, True])
def test_hash_index_finds_the_first_equal_key_or_none(low_bits_equal: bool) -> None:
    """Against a dictionary: duplicates (the first is found), absent keys (−1), and keys that share all their
    low bits (every one lands in the same bucket: long probe runs)."""
    from service.hashindex import build_index, find_all

    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2)
    if low_bits_equal:
        keys = (keys >> np.uint64(40)) << np.uint64(40)
    keys[100:200] = keys[:100]  # duplicates
    queries = np.concatenate(
        [keys, keys + np.uint64(1), rng.integers(0, 2**63, 500, dtype=np.uint64) * np.uint64(2) + np.uint64(1)]
    )
    first: dict[int, int] = {}
    for i, k in enumerate(keys.tolist()):
        first.setdefault(k, i)
    expected = [first.get(q, -1) for q in queries.tolist()]
    assert find_all(build_index(keys), keys, queries).tolist() == expected
    assert find_all(build_index(keys[:0]), keys[:0], queries).tolist() == [-1] * queries.size


def test_colliding_word_hashes_never_merge_or_confuse_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a hash that puts most words in three buckets, bags and vocabulary look-ups must still be exactly
    those of the string path (the hashes only speed things up; words are compared behind every match)."""
    from service import text

    monkeypatch.setattr(text, "_hash_words", lambda words: np.asarray(words.str.len_chars().to_numpy() % 3, np.uint64))
    rng = np.random.default_rng(2)
    vocab_words = ["".join(rng.choice(list("abcdefgh"), rng.integers(3, 7))) for _ in range(60)]
    tok = Tokenizer(stop_words=())
    a, b = Vocabulary(25, admit_count=2), Vocabulary(25, admit_count=2)
    for _ in range(15):
        texts = [" ".join(rng.choice(vocab_words, 40)) for _ in range(6)]
        flat = tok.count_many(texts)
        assert flat.hashes is None  # the colliding rows sent this batch down the string path
        bags = [tok.count(t) for t in texts]
        assert [
            list(zip(flat.words_at(np.flatnonzero(flat.doc == d)), flat.counts[flat.doc == d], strict=True))
            for d in range(6)
        ] == [list(c.items()) for c in bags]
        ea, eb = a.encode(bags), b.encode(flat)
        np.testing.assert_array_equal(ea.batch.word_ids, eb.batch.word_ids)
        np.testing.assert_array_equal(ea.recycled, eb.recycled)
    assert a.slot_words() == b.slot_words()


@pytest.mark.parametrize(
    ("spellings", "word"),
    [
        (["café", "cafe\u0301"], "café"),  # composed and decomposed (NFC, NFD)
        (["apple", "ａｐｐｌｅ", "ＡＰＰＬＥ"], "apple"),  # full-width
        (["finance", "ﬁnance"], "finance"),  # a ligature
        (["wirtschaftspolitik", "Wirt\u00adschafts\u00adpolitik"], "wirtschaftspolitik"),  # soft hyphens
        (["inflation", "infla\u200dtion", "infla\u200btion", "\ufeffinflation"], "inflation"),  # zero-width
        (["istanbul", "İSTANBUL", "İstanbul"], "istanbul"),  # Turkish capital dotted I
    ],
)
def test_one_word_however_it_is_typed_is_one_word(spellings: list[str], word: str) -> None:
    """Each spelling took a vocabulary slot of its own (or split into pieces: "wirt", "schafts", "politik")."""
    tok = Tokenizer(stop_words=())
    text = " ".join(spellings)
    assert tok(text) == [word] * len(spellings)
    assert tok.count_many([text]).words.to_list() == [word]


def test_a_stop_word_file_adds_to_the_english_list(tmp_path: Path) -> None:
    from service.text import read_stop_words

    path = tmp_path / "de.txt"
    path.write_text("der die das\nund\n\nÜber\n", encoding="utf-8")
    tok = Tokenizer(extra_stop_words=read_stop_words(path))
    text = "Der Präsident und die Koalition über the Haushalt"
    assert tok(text) == ["präsident", "koalition", "haushalt"]
    assert tok.count_many([text]).words.to_list() == ["präsident", "koalition", "haushalt"]


def test_an_article_in_a_listed_language_loses_that_languages_stop_words_and_keeps_the_english_ones() -> None:
    """German wires fill topics with "der die und" unless German stop words go; but a union of every language's
    list would take "war" and "will" out of English news. So the article's ``language`` picks the list: German
    stop words for an article marked "de" (or "de-AT", "DE"), the English ones for every other article."""
    from service.text import language_stop_words

    tok = Tokenizer(languages=["de", "fr"])
    german = "Der Krieg war lang, und die Regierung will über the Haushalt sprechen"
    english = "The war will end, the government said, und der Rest"
    assert tok(german, language="de-AT") == ["krieg", "regierung", "the", "haushalt", "sprechen"]
    assert tok(english) == tok(english, language="en") == ["war", "end", "government", "said", "und", "der", "rest"]
    assert tok(english, language="es") == tok(english)  # a language not listed: the English list
    assert {"der", "die", "und", "war", "über"} <= tok.stop_words_for("DE") == language_stop_words("de")
    texts, languages = [german, english, "Le gouvernement et la guerre", german], ["de", None, "fr_CA", "pt"]
    flat = tok.count_many(texts, languages)
    for d, (text, language) in enumerate(zip(texts, languages, strict=True)):
        rows = np.flatnonzero(flat.doc == d)
        assert dict(zip(flat.words_at(rows), flat.counts[rows], strict=True)) == tok.count(text, language)
        assert flat.words_at(rows) == list(dict.fromkeys(tok(text, language)))  # in order of first occurrence
    unmarked = tok.count_many(texts)  # no languages given: the English list for every text
    assert {"der", "und", "war", "über"} <= set(unmarked.words_at(np.flatnonzero(unmarked.doc == 0)))


def test_the_languages_are_part_of_the_fingerprint_and_checked() -> None:
    """A replica with other languages reads other words than its learner (the fingerprint tells); without
    languages the fingerprint is the one snapshots of earlier versions hold."""
    from service.text import language_key

    assert Tokenizer(languages=[]).fingerprint() == Tokenizer().fingerprint()
    fingerprints = {Tokenizer(languages=codes).fingerprint() for codes in ([], ["de"], ["fr"], ["de", "fr"])}
    assert len(fingerprints) == 4
    assert Tokenizer(languages=["fr", "de"]).fingerprint() == Tokenizer(languages=["de", "FR", "de"]).fingerprint()
    with pytest.raises(ValueError, match=r"no stop words for language 'xx'; stopwords-iso has .*\bde\b"):
        Tokenizer(languages=["xx"])
    with pytest.raises(ValueError, match="English stop words are built in"):
        Tokenizer(languages=["en"])
    assert [language_key(t) for t in ("de-AT", " DE ", "de_CH", "", None, "-")] == ["de", "de", "de", None, None, None]


def test_the_language_lists_are_spelt_as_articles_are_and_words_can_be_kept() -> None:
    """stopwords-iso's lists as the tokenizer reads them: an entry it splits gave pieces that became stop words on
    their own ("хотел бы" made "хотел", wanted, one); the Greek list's INCREMENT signs for capital deltas made
    "∆εν" "εν" and pieces such as "ιου", and its final medial sigmas ("αυτοσ") matched no article. The lists are
    broad (German "jahr", "menschen"; Russian "россия", "война"): ``keep_words`` gives words back, in every list;
    Chinese, Japanese and Thai, which the tokenizer does not segment, are refused."""
    from service.text import language_stop_words

    russian, greek = language_stop_words("ru"), language_stop_words("el")
    assert "хотел" not in russian and "бы" in russian
    assert {"δεν", "αυτος", "ηδη"} <= greek and not {"ιου", "αυτοσ"} & greek
    assert not any("\u2206" in w for w in greek)
    assert {"jahr", "menschen"} <= language_stop_words("de") and {"россия", "война"} <= russian
    tok = Tokenizer(languages=["de", "ru"], keep_words=["jahr", "война", "said"])
    assert tok("Im Jahr der Menschen", language="de") == ["jahr"]
    assert tok("война и мир", language="ru") == ["война"]
    assert tok("he said so") == ["said"]
    assert tok.fingerprint() != Tokenizer(languages=["de", "ru"]).fingerprint()
    for unsegmented in ("zh", "ja", "th"):
        with pytest.raises(ValueError, match="without spaces and not split into words"):
            language_stop_words(unsegmented)


def test_a_text_is_normalised_whenever_normalising_could_change_its_words() -> None:
    """The tokenizer normalises (NFKC, invisible characters, dotted I) only a text holding a character of
    ``_normalising()``, to spare most news the cost; for every other character, normalising a text around it must
    change no word (checked for each assigned character but surrogates and private use)."""
    import sys
    import unicodedata

    from service.text import _normalising, _unicode_words, _words

    inside = _normalising().python
    for c in range(0x80, sys.maxunicode + 1):
        ch = chr(c)
        if unicodedata.category(ch) in ("Cs", "Co", "Cn") or inside.match(ch):
            continue
        text = f"ab{ch}cd x{ch}"
        full = _unicode_words().findall(unicodedata.normalize("NFKC", text).lower())
        assert _words(text) == full, (hex(c), _words(text), full)
