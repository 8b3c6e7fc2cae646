"""``topicstream eval`` end to end on a real corpus slice, and the scorers against hand-computed values."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from evaluation import (
    build_vocabulary,
    document_completion,
    encode,
    fold_in,
    heldout_loglik_per_word,
    load_articles,
    nmi,
    npmi_coherence,
    npmi_per_topic,
    prepare_corpus,
    primary_label,
    split_articles,
    top_word_ids,
)
from evaluation.command import OUTPUT_FIELDS
from kernels import Batch
from service.cli import app

CONTRACT_KEYS = {
    "algorithm",
    "topics",
    "train_docs",
    "train_tokens",
    "train_seconds",
    "tokens_per_second",
    "heldout_loglik_per_word",
    "nmi",
    "npmi_coherence",
    "topics_used",
    "peak_rss_mb",
    "top_words",
}


def _docs(*docs: dict[int, int]) -> Batch:
    return Batch.from_docs([(list(d), list(d.values())) for d in docs])


# ------------------------------------------------------------------------------------------- end to end
@pytest.mark.data
def test_eval_json_on_real_corpus_slice(shared_data: Path) -> None:
    path = shared_data / "news_stream_reuters21578.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    args = ["eval", "--algorithm", "scvb0", "--train", str(path), "--max-docs", "600"]
    args += ["--test-fraction", "0.25", "--topics", "10", "--batch-size", "50", "--seed", "1"]
    args += ["--vocab-size", "2000", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # exactly one JSON object on stdout: progress goes to stderr
    assert set(out) >= CONTRACT_KEYS
    assert out["algorithm"] == "scvb0" and out["topics"] == 10
    assert out["train_docs"] == 450 and out["train_tokens"] > 0
    floats = ("train_seconds", "tokens_per_second", "heldout_loglik_per_word", "npmi_coherence")
    floats += ("peak_rss_mb",)
    for key in floats:
        assert isinstance(out[key], float) and math.isfinite(out[key]), key
    assert out["train_seconds"] > 0 and out["peak_rss_mb"] > 0
    assert out["heldout_loglik_per_word"] < 0
    assert out["nmi"] is not None and 0.0 <= out["nmi"] <= 1.0
    assert -1.0 <= out["npmi_coherence"] <= 1.0
    assert 1 <= out["topics_used"] <= 10
    assert len(out["top_words"]) == out["topics_used"]
    assert all(len(ws) == 10 and all(isinstance(w, str) for w in ws) for ws in out["top_words"])


@pytest.mark.data
def test_eval_table_and_errors(shared_data: Path, tmp_path: Path) -> None:
    path = shared_data / "bbc.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    # A labelled test file apart from the training file; the human-readable table.
    rows = load_articles(path, max_docs=300)
    train, test = split_articles(rows, 0.3, seed=0)
    for name, part in (("train.jsonl", train), ("test.jsonl", test)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    args = ["eval", "--train", str(tmp_path / "train.jsonl"), "--test", str(tmp_path / "test.jsonl")]
    result = CliRunner().invoke(app, [*args, "--topics", "5", "--param", "alpha=0.2"])
    assert result.exit_code == 0, result.output
    assert "heldout_loglik_per_word" in result.stdout and "top words" in result.stdout
    bad = CliRunner().invoke(app, [*args, "--algorithm", "nope", "--json"])
    assert bad.exit_code != 0
    bad_param = CliRunner().invoke(app, [*args, "--param", "no_such_setting=1", "--json"])
    assert bad_param.exit_code != 0 and bad_param.stdout == ""


def test_eval_names_the_line_it_cannot_read(tmp_path: Path) -> None:
    """A line that is not JSON, or not an object, is a usage error naming the file and line (exit 2), not a
    traceback; so is a training file that is not the gzip its name says."""
    for i, line in enumerate(["not json", "[1, 2]"]):
        path = tmp_path / f"bad{i}.jsonl"
        path.write_text('{"id": "a", "text": "fine"}\n' + line + "\n")
        result = CliRunner().invoke(app, ["eval", "--train", str(path), "--json"])
        assert result.exit_code == 2, result.output
        unboxed = re.sub(r"[\s│]", "", result.output)  # the error box folds a long path over its lines
        assert f"bad{i}.jsonl:2" in unboxed and result.stdout == ""
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\xe9"}\n')
    result = CliRunner().invoke(app, ["eval", "--train", str(broken), "--json"])
    assert result.exit_code == 2 and "not UTF-8" in " ".join(result.output.replace("│", " ").split())
    with pytest.raises(ValueError, match=r"broken\.jsonl:2: not UTF-8"):  # the file and line, as rich may wrap them
        load_articles(broken)
    for empty in ("", "\n  \n"):
        (tmp_path / "empty.jsonl").write_text(empty)
        result = CliRunner().invoke(app, ["eval", "--train", str(tmp_path / "empty.jsonl"), "--json"])
        assert result.exit_code == 2 and "holds no article" in result.output


def test_eval_reads_gzip_by_its_bytes_and_skips_a_byte_order_mark(tmp_path: Path) -> None:
    """A gzip file without the .gz suffix was a codec error; a plain one named .gz was "not a gzip file"; a BOM
    (as some editors write) made line 1 "not JSON"."""
    import gzip

    rows = [{"id": str(i), "text": f"words of article {i}"} for i in range(5)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "zipped.jsonl").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "plain.jsonl.gz").write_text(text)
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    for name in ("zipped.jsonl", "plain.jsonl.gz", "bom.jsonl"):
        assert load_articles(tmp_path / name) == rows


def test_eval_json_has_no_nan_when_a_score_has_no_value(tmp_path: Path) -> None:
    """No test document has two in-vocabulary tokens, so the held-out log-likelihood has no value: stdout is still
    one strict JSON object (null, not the NaN that ``json.dumps`` writes and JSON parsers refuse)."""
    words = ["market", "shares", "goal", "match", "film", "actor", "music", "album"]
    rng = np.random.default_rng(0)
    train = [{"id": str(i), "text": " ".join(rng.choice(words, 12))} for i in range(40)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (tmp_path / "test.jsonl").write_text('{"id": "t1", "text": "space"}\n{"id": "t2", "text": "qqqzzz"}\n')
    args = ["eval", "--train", str(tmp_path / "train.jsonl"), "--test", str(tmp_path / "test.jsonl")]
    result = CliRunner().invoke(app, [*args, "--topics", "3", "--json"])
    assert result.exit_code == 0, result.output

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    out = json.loads(result.stdout, parse_constant=refuse)
    assert out["heldout_loglik_per_word"] is None
    assert set(out) >= CONTRACT_KEYS
    # docs/architecture.md's table of the keys is made from OUTPUT_FIELDS: it names every key, in order
    assert list(out) == list(OUTPUT_FIELDS) and set(list(OUTPUT_FIELDS)[: len(CONTRACT_KEYS)]) == CONTRACT_KEYS


# ------------------------------------------------------------------------------------------- scorers
def test_loglik_of_known_phi_and_theta() -> None:
    phi = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    theta = np.array([[1.0, 0.0], [0.5, 0.5]])
    held_out = _docs({0: 2}, {2: 1})  # doc 0: word 0 twice (p = .5), doc 1: word 2 once (p = .5·.5)
    expected = (2 * math.log(0.5) + math.log(0.25)) / 3
    assert heldout_loglik_per_word(theta, phi, held_out) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError):
        heldout_loglik_per_word(theta[:1], phi, held_out)


def test_npmi_hand_computed() -> None:
    # 4 documents over 5 words.
    ref = _docs({0: 1, 1: 3, 2: 1}, {0: 2, 1: 1, 3: 1}, {2: 1, 3: 1}, {4: 1})
    # words 0 and 1 always together (p = 1/2 each and jointly): NPMI = 1
    # words 0 and 4 never together: NPMI = −1 (the limit, no smoothing)
    # words 2 and 3: p = 1/2 each, jointly 1/4: independent, NPMI = 0
    # words 0 and 2: p = 1/2 each, jointly 1/4 → 0 as well
    assert npmi_per_topic([[0, 1], [0, 4], [2, 3]], ref, 5) == pytest.approx([1.0, -1.0, 0.0], abs=1e-12)
    # a 3-word topic averages its 3 pairs: (1 + 0 + 0) / 3
    assert npmi_coherence([[0, 1, 2]], ref, 5) == pytest.approx(1 / 3, abs=1e-12)
    # p_i = 1/4, p_j = 1/2, p_ij = 1/4: log(2) / log(4) = 1/2
    ref2 = _docs({0: 1, 1: 1}, {1: 1}, {2: 1}, {2: 1})
    assert npmi_per_topic([[0, 1]], ref2, 3) == pytest.approx([0.5], abs=1e-12)
    # no reference document holds a word: no coherence to measure (it was −1)
    assert math.isnan(npmi_coherence([[0, 1]], _docs({}, {}), 3))


@pytest.mark.data
def test_eval_nmi_without_the_background_topic_is_the_dominant_topic_the_outputs_name(shared_data: Path) -> None:
    """With SCVB0's background slot the background is nearly every BBC article's largest share, so NMI over argmax θ
    scores the background (near 0), not the topics; the outputs never name it, and ``nmi_without_background``
    scores what they name. Without a background topic the two are the same number."""
    path = shared_data / "bbc.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    args = ["eval", "--algorithm", "scvb0", "--train", str(path), "--max-docs", "800", "--test-fraction", "0.25"]
    args += ["--topics", "10", "--batch-size", "50", "--seed", "1", "--vocab-size", "3000", "--json"]
    slot = json.loads(CliRunner().invoke(app, [*args, "--param", "background=0.3"]).stdout)
    assert slot["background_topic"] == 0
    assert slot["nmi"] < 0.1 and slot["nmi_without_background"] > 0.4, slot
    plain = json.loads(CliRunner().invoke(app, args).stdout)
    assert plain["background_topic"] is None and plain["nmi_without_background"] == plain["nmi"] > 0.4


def test_nmi_and_labels() -> None:
    theta = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.3, 0.7], [0.5, 0.5]])
    assert nmi(["a", "a", "b", "b", None], theta) == pytest.approx(1.0)
    assert nmi([None] * 5, theta) is None
    assert nmi(["a", "a", "a", None, None], theta) is None  # one label: 1 or 0 whatever the topics, so none
    assert nmi(["a", None, None, None, None], theta) is None
    assert nmi(["a", "b", "a", "b", None], theta) == pytest.approx(0.0, abs=1e-12)
    # a background topic (0) that every document leans on most: the argmax over the others finds the labels
    leaning = np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.7, 0.1, 0.2], [0.6, 0.1, 0.3]])
    assert nmi(["a", "a", "b", "b"], leaning) == pytest.approx(0.0, abs=1e-12)
    assert nmi(["a", "a", "b", "b"], leaning, leave_out=0) == pytest.approx(1.0)
    assert primary_label("grain;wheat") == "grain"
    assert primary_label(None) is None and primary_label("") is None


def test_document_completion_split() -> None:
    test = _docs({0: 3, 5: 2}, {1: 1}, {2: 1, 3: 1, 4: 2})
    obs, held, kept = document_completion(test, seed=3)
    assert kept.tolist() == [0, 2]  # the one-token document is skipped
    for row, d in enumerate(kept):
        ids, cnts = test.doc(int(d))
        total = dict(zip(ids.tolist(), cnts.tolist(), strict=True))
        merged: dict[int, float] = {}
        for part in (obs, held):
            for w, c in zip(*part.doc(row), strict=True):
                merged[int(w)] = merged.get(int(w), 0.0) + float(c)
        assert merged == total
        assert obs.doc(row)[1].sum() == sum(total.values()) // 2
    again = document_completion(test, seed=3)
    assert np.array_equal(again[0].word_ids, obs.word_ids) and np.array_equal(again[0].counts, obs.counts)


def test_vocabulary_encode_and_top_words() -> None:
    toks = [["b", "a", "a", "c"], ["a", "b", "d"], ["b", "e", "e", "e"]]
    vocab = build_vocabulary(toks, vocab_size=10)
    assert vocab == ["a", "b"]  # c, d, e have doc. freq. 1; a and b have 3 tokens each: ties by the word
    assert build_vocabulary([*toks, ["e"]], vocab_size=1) == ["e"]  # now e: doc. freq. 2, 4 tokens
    batch = encode([["b", "a", "zzz", "b"]], {w: i for i, w in enumerate(vocab)})
    assert batch.word_ids.tolist() == [0, 1] and batch.counts.tolist() == [1.0, 2.0]
    phi = np.array([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]])
    assert top_word_ids(phi, 2).tolist() == [[1, 2], [0, 2]]


def test_fold_in_recovers_the_generating_topic() -> None:
    phi = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]]) + 1e-6
    phi /= phi.sum(axis=1, keepdims=True)
    theta = fold_in(phi, _docs({0: 5, 1: 5}, {2: 3, 3: 1, 0: 4}, {}), alpha=0.1)
    assert theta.shape == (3, 2)
    assert np.allclose(theta.sum(axis=1), 1.0)
    assert theta[0, 0] > 0.98
    assert theta[1, 0] == pytest.approx(theta[1, 1], abs=0.05)
    assert theta[2].tolist() == [0.5, 0.5]


def test_a_test_article_that_repeats_a_training_article_is_not_scored() -> None:
    """News files repeat stories; a repeat in the test part would score the model on text it trained on."""
    train = [{"id": str(i), "text": f"markets rally bank rates cut story{'x' * (i % 5)}"} for i in range(20)]
    fresh = {"id": "t1", "text": "football striker goal markets"}
    repeat = {"id": "t2", "title": "", "text": train[3]["text"], "label": "repeat"}
    corpus = prepare_corpus(train, [fresh, repeat], vocab_size=100, shuffle=False)
    assert corpus.test.n_docs == 1 and corpus.test_labels == [None]


def test_max_docs_is_a_seeded_sample_in_file_order_not_the_first_lines(tmp_path: Path) -> None:
    """Corpus files are often sorted by label: the first 100 lines of this one are all "a"."""
    path = tmp_path / "sorted.jsonl"
    lines = (json.dumps({"id": str(i), "text": "x", "label": "ab"[i >= 500]}) for i in range(1000))
    path.write_text("".join(line + "\n" for line in lines))
    rows = load_articles(path, max_docs=100)
    ids = [int(r["id"]) for r in rows]
    assert len(ids) == 100 == len(set(ids)) and ids == sorted(ids)
    assert 30 <= sum(r["label"] == "b" for r in rows) <= 70
    assert rows == load_articles(path, max_docs=100) != load_articles(path, max_docs=100, seed=1)
    assert len(load_articles(path, max_docs=5000)) == 1000


def test_eval_trains_the_particle_filter_on_fewer_documents_than_its_initial_sample(tmp_path: Path) -> None:
    """180 training documents, init_docs 200: the filter buffered them all and eval scored a uniform model
    (−log W exactly, every topic the same top words). ``flush`` runs the initial Gibbs sample."""
    rng = np.random.default_rng(1)
    desks = [["market", "shares", "stocks", "bank", "rates"], ["goal", "match", "striker", "league", "cup"]]
    rows = [{"id": str(i), "text": " ".join(rng.choice(desks[i % 2], 20))} for i in range(225)]
    (tmp_path / "small.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["eval", "--train", str(tmp_path / "small.jsonl"), "--algorithm", "pf", "--topics", "2", "--json"]
    out = json.loads(CliRunner().invoke(app, args).stdout)
    assert out["train_docs"] < 200
    assert out["heldout_loglik_per_word"] > -math.log(out["vocab_size"]) + 0.3
    assert {tuple(sorted(w[:5])) for w in out["top_words"]} == {tuple(sorted(d)) for d in desks}


def test_eval_tells_the_online_hdp_its_corpus_size_unless_given(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    rows = [{"id": str(i), "text": " ".join(rng.choice(words, 10))} for i in range(30)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["eval", "--train", str(tmp_path / "t.jsonl"), "--algorithm", "ohdp", "--topics", "5", "--json"]
    out = json.loads(CliRunner().invoke(app, args).stdout)
    assert out["params"]["window"] == out["train_docs"]
    given = json.loads(CliRunner().invoke(app, [*args, "--param", "window=77"]).stdout)
    assert given["params"]["window"] == 77
