"""Settings against the kernel, the machine, Redis and a snapshot (service/compat.py), on real kernels."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from kernels import ALGORITHMS, TopicModel
from kernels.ohdp_stick import StickBreakingHDP
from service.compat import (
    REDIS_MAX_BULK_BYTES,
    VOCAB_BYTES_PER_SLOT,
    available_memory_bytes,
    kernel_param_problems,
    learner_peak_bytes,
    learner_state_copies,
    param_problems,
    replica_peak_bytes,
    restore_plan,
    size_problems,
    snapshot_bytes,
)
from service.settings import Settings, load_settings
from service.snapshot import pack, unpack
from service.text import Tokenizer, Vocabulary

K, W = 20, 3000


def _docs(n_words: int, n: int = 24, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.choice(n_words, 8, replace=False), rng.integers(1, 4, 8).astype(np.float64)) for _ in range(n)]


def _trained(algorithm: str | type[TopicModel], n_topics: int = K, n_words: int = W, **params: Any) -> TopicModel:
    cls = ALGORITHMS[algorithm] if isinstance(algorithm, str) else algorithm
    model = cls(n_topics=n_topics, n_words=n_words, seed=0, **{**cls._unit_test_params(), **params})
    model.partial_fit(_docs(n_words))
    return model


# ------------------------------------------------------------------------------------------------ state size
@pytest.mark.parametrize(
    ("algorithm", "params"),
    [
        ("scvb0", {}),
        ("ohdp", {}),
        (StickBreakingHDP, {}),  # not a service algorithm, but a kernel with the same contract
        ("pf", {}),
        ("pf", {"rejuvenation": "none", "n_particles": 8, "pool_factor": 3.0}),
        ("pf", {"rejuvenation": "history", "history_tokens": 5000, "history_docs": 300}),
    ],
)
def test_state_bytes_matches_a_real_packed_state(algorithm: str | type[TopicModel], params: dict[str, Any]) -> None:
    model = _trained(algorithm, **params)
    packed = len(pack(model.state_dict()))
    predicted = type(model).state_bytes(**model.get_params())
    arrays = sum(v.nbytes for v in model.state_dict()["state"].values() if isinstance(v, np.ndarray))
    assert predicted == arrays  # exactly the arrays' bytes ...
    assert abs(packed - predicted) / packed < 0.03  # ... which are all but the JSON header of the snapshot


def test_check_params_validates_like_the_constructor_without_allocating() -> None:
    cls = ALGORITHMS["scvb0"]
    cls.check_params(n_topics=10_000, n_words=5_000_000)  # 400 GB if it allocated the state
    for bad in ({"alpha": -1.0}, {"batch_size": 2.5}, {"phi_kappa": 0.0}):
        with pytest.raises(ValueError) as by_check:
            cls.check_params(n_topics=3, n_words=10, **bad)
        with pytest.raises(ValueError) as by_init:
            cls(n_topics=3, n_words=10, **bad)
        assert str(by_check.value) == str(by_init.value)
    with pytest.raises(TypeError):
        cls.check_params(n_topics=3, n_words=10, alpa=0.1)


# ------------------------------------------------------------------------------------------ kernel parameters
def test_unknown_names_get_the_closest_known_one() -> None:
    s = load_settings(algorithm="scvb0", kernel_params={"alpa": 0.1, "zzzz": 1})
    problems = kernel_param_problems(s)
    assert len(problems) == 2
    assert problems[0] == "TOPICSTREAM_KERNEL_PARAMS: unknown parameter 'alpa' for scvb0; did you mean 'alpha'?"
    assert "unknown parameter 'zzzz'" in problems[1] and "phi_floor" in problems[1]  # lists what it knows


def test_every_bad_value_is_one_line_from_the_kernels_own_checks() -> None:
    s = load_settings(algorithm="scvb0", kernel_params={"phi_kappa": 2, "batch_size": 3.5, "window": -1, "eta": 0.1})
    problems = kernel_param_problems(s)
    assert len(problems) == 3
    for name, line in zip(("phi_kappa", "batch_size", "window"), problems, strict=True):
        assert line.startswith(f"TOPICSTREAM_KERNEL_PARAMS: {name} must")
        assert "\n" not in line


def test_values_that_do_not_go_together_are_one_problem() -> None:
    bad = load_settings(algorithm="pf", kernel_params={"n_particles": 4, "ess_threshold": 0.2, "alpha": -1})
    problems = kernel_param_problems(bad)
    assert len(problems) == 2
    assert "ess_threshold·n_particles must exceed 1" in problems[0] and "alpha" in problems[1]
    # each is fine alone with the other's default, and together once they agree
    assert (
        kernel_param_problems(load_settings(algorithm="pf", kernel_params={"n_particles": 4, "ess_threshold": 0.3}))
        == []
    )


@pytest.mark.parametrize("algorithm", ["scvb0", "ohdp", "pf"])
def test_hygiene_splits_need_a_kernel_with_a_split_move(algorithm: str) -> None:
    """The particle filter has merges only: asking it for splits is a problem, unless hygiene is off."""
    problems = kernel_param_problems(load_settings(algorithm=algorithm, topic_hygiene_splits=2))
    if algorithm == "pf":
        assert problems == [
            "TOPICSTREAM_TOPIC_HYGIENE_SPLITS: pf has no split move; leave it 0 (docs/topic-hygiene.md)"
        ]
    else:
        assert problems == []
    assert kernel_param_problems(load_settings(algorithm=algorithm, topic_hygiene_splits=2, topic_hygiene=False)) == []


def test_problems_of_topics_and_seed_name_their_own_settings() -> None:
    s = load_settings(algorithm="ohdp", topics=1, kernel_params={"seed": 3, "sequential": False})
    problems = kernel_param_problems(s)
    assert problems == [
        "TOPICSTREAM_KERNEL_PARAMS: seed is set by TOPICSTREAM_SEED, not here",
        "TOPICSTREAM_TOPICS: n_topics must be at least 2 for the HDP truncation, got 1",
    ]
    eval_flags = {"n_topics": "--topics", "n_words": "--vocab-size", "seed": "--seed"}
    assert param_problems("ohdp", 1, 100, {}, source="--param", base=eval_flags)[0].startswith("--topics: ")


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_defaults_and_unit_test_settings_have_no_problems(algorithm: str) -> None:
    params = ALGORITHMS[algorithm]._unit_test_params()
    assert kernel_param_problems(load_settings(algorithm=algorithm)) == []
    assert kernel_param_problems(load_settings(algorithm=algorithm, kernel_params=params)) == []


# ------------------------------------------------------------------------------------------------------ sizes
def test_the_default_model_fits_a_small_machine_and_redis() -> None:
    s = load_settings()
    assert size_problems(s, memory_bytes=1024**3) == []
    assert learner_peak_bytes(s) < 1024**3 < REDIS_MAX_BULK_BYTES * 4
    assert snapshot_bytes(s) < REDIS_MAX_BULK_BYTES


def test_the_memory_formulas_count_topic_hygienes_copy_and_give_the_manifests_their_sizes() -> None:
    """deploy/k8s sizes requests at the defaults (W = 65,536, K = 100) from these formulas, fitted to a measured
    peak of 750 MiB (learner, hygiene on), 615 MiB (hygiene off) and 610–623 MiB (replica), less the copy of S
    (50 MiB) that a row-order ``topic_word`` no longer makes; the manifests keep the measured sizes."""
    mib = 1024**2
    s = load_settings()
    assert learner_state_copies(s) == 7 and learner_state_copies(load_settings(topic_hygiene=False)) == 4
    assert 700 * mib <= learner_peak_bytes(s) <= 800 * mib  # the learner's request: 800Mi
    assert 565 * mib <= learner_peak_bytes(load_settings(topic_hygiene=False)) <= 640 * mib
    assert 560 * mib <= replica_peak_bytes(s) <= 640 * mib  # the replicas' request: 640Mi
    off = load_settings(topic_hygiene=False)  # the learner's 4 copies and the replica's 4, and the anchors
    assert learner_peak_bytes(off) - replica_peak_bytes(off) == (6 - 2 * 2) * 65_536 * 100
    pf = load_settings(algorithm="pf")
    assert learner_state_copies(pf) == 7  # pf's hygiene (merges only) is on by default
    assert learner_peak_bytes(pf) > learner_peak_bytes(s)


def test_a_model_too_large_for_the_machine_is_refused_with_the_formula() -> None:
    s = load_settings(topics=2000, vocab_size=65_536)  # ~1 GiB of N^Φ: fits one Redis value? no, 1 GiB > 512 MiB
    problems = size_problems(s, memory_bytes=2 * 1024**3)
    assert len(problems) == 2
    redis_line, memory_line = problems
    assert redis_line.startswith("TOPICSTREAM_VOCAB_SIZE × TOPICSTREAM_TOPICS: a scvb0 snapshot at W = 65,536")
    assert "1,000 MiB of state + 2 B × W × K of topic anchors" in redis_line and "512 MiB" in redis_line
    assert "7 × state + 6 B × W × K + 48 B × W + runtime" in memory_line
    assert "7 × 1,000 MiB + 750 MiB + 3 MiB + 370 MiB" in memory_line
    assert "2,048 MiB is available" in memory_line
    assert size_problems(s, memory_bytes=64 * 1024**3, redis_max_bytes=2 * 1024**3) == []


def test_the_redis_limit_is_checked_on_its_own() -> None:
    s = load_settings(topics=500, vocab_size=200_000)  # 763 MiB of state
    (line,) = size_problems(s, memory_bytes=1024**4)
    assert "Redis" in line and "proto-max-bulk-len" in line
    assert size_problems(s, memory_bytes=1024**4, redis_max_bytes=1024**3) == []


def test_available_memory_is_what_this_process_holds_and_could_get() -> None:
    total = available_memory_bytes()
    held = psutil.Process().memory_info().rss
    assert held < total <= held + psutil.virtual_memory().available * 1.05  # (it moves between the reads)


def test_a_container_limit_caps_the_available_memory(tmp_path: Path) -> None:
    from service.compat import _cgroup_free_bytes

    assert _cgroup_free_bytes(tmp_path) is None  # no cgroup files: no limit
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.current").write_text("1000\n")
    assert _cgroup_free_bytes(tmp_path) is None  # v2 without a limit
    (tmp_path / "memory.max").write_text("1073741824\n")
    assert _cgroup_free_bytes(tmp_path) == 1073741824 - 1000
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory/memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "no limit"
    (v1 / "memory/memory.usage_in_bytes").write_text("5")
    assert _cgroup_free_bytes(v1) is None
    (v1 / "memory/memory.limit_in_bytes").write_text("100")
    assert _cgroup_free_bytes(v1) == 95


@pytest.mark.data
def test_a_real_vocabulary_packs_within_its_estimate(shared_data: Path) -> None:
    capacity = 4096
    vocab, tok, batch = Vocabulary(capacity), Tokenizer(), []
    with gzip.open(shared_data / "bbc.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            article = json.loads(line)
            batch.append(tok.count(f"{article['title']} {article['text']}"))
            if len(batch) == 100:
                vocab.encode(batch)
                batch = []
    assert len(vocab) == capacity and vocab.n_candidates >= capacity // 4  # full, with candidates waiting
    assert len(pack(vocab.state_dict())) < VOCAB_BYTES_PER_SLOT * capacity


# ----------------------------------------------------------------------------------------------- restore plan
def _payload(model: TopicModel, vocab: Vocabulary | None = None) -> dict[str, Any]:
    """A snapshot payload as the learner writes it, through pack/unpack like one read back from Redis."""
    vocab = Vocabulary(model.n_words) if vocab is None else vocab
    return unpack(pack({"kernel": model.state_dict(), "vocabulary": vocab.state_dict(), "offsets": []}))


def _settings_for(model: TopicModel, **changes: Any) -> Settings:
    params = {k: v for k, v in model.get_params().items() if k not in ("n_topics", "n_words", "seed")}
    base: dict[str, Any] = {
        "algorithm": model.algorithm,
        "topics": model.n_topics,
        "vocab_size": model.n_words,
        "seed": model.seed,
        "kernel_params": params,
        "vocab_admit_count": 2.0,
    }
    kernel_changes = changes.pop("kernel_params", {})
    return load_settings(**{**base, **changes, "kernel_params": {**params, **kernel_changes}})


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_unchanged_settings_restore_as_they_are(algorithm: str) -> None:
    model = _trained(algorithm)
    plan = restore_plan(_settings_for(model), _payload(model))
    assert plan.ok and plan.kernel == {} and plan.vocabulary == {} and plan.applied == []


def test_the_default_settings_match_a_model_built_with_them() -> None:
    model = ALGORITHMS["scvb0"](n_topics=100, n_words=65_536)
    assert restore_plan(load_settings(), _payload(model)).applied == []


def test_a_schedule_change_is_applied_to_the_restored_scvb0_model() -> None:
    model = _trained("scvb0")
    payload = _payload(model)
    s = _settings_for(model, kernel_params={"phi_floor": 0.2, "alpha": 0.05}, vocab_admit_count=3.0)
    plan = restore_plan(s, payload)
    assert plan.ok and plan.kernel == {"phi_floor": 0.2, "alpha": 0.05} and plan.vocabulary == {"admit_count": 3.0}
    assert any(line.startswith("TOPICSTREAM_KERNEL_PARAMS phi_floor: 0.01 in the snapshot") for line in plan.applied)
    assert any(line.startswith("TOPICSTREAM_VOCAB_ADMIT_COUNT: 2.0") for line in plan.applied)
    restored = ALGORITHMS["scvb0"].from_state(payload["kernel"])
    vocab = Vocabulary.from_state(payload["vocabulary"])
    rho_before = restored.diagnostics()["rho_phi"]
    plan.apply_to(restored, vocab)
    assert restored.get_params()["phi_floor"] == 0.2 and vocab.admit_count == 3.0
    assert restored.diagnostics()["rho_phi"] == max(0.2, rho_before)  # the schedule itself changed
    np.testing.assert_array_equal(restored.phi_, model.phi_)  # what it learned is kept
    restored.partial_fit(_docs(W, seed=1))
    # The next snapshot carries the new settings: restoring it again changes nothing.
    again = restore_plan(s, _payload(restored, vocab))
    assert again.ok and again.applied == []


def test_ohdp_restores_a_snapshot_of_the_one_class_hdp_and_refuses_its_stick_variant() -> None:
    """Snapshots written while ``ohdp`` also held the stick-breaking estimator carry ``inference`` and
    ``doc_topics``: a collapsed one restores with its schedule change applied, a stick-breaking one is refused."""
    model = _trained("ohdp")
    payload = _payload(model)
    payload["kernel"]["params"] = {**payload["kernel"]["params"], "inference": "collapsed", "doc_topics": 15}
    s = _settings_for(model, kernel_params={"kappa": 0.8})
    plan = restore_plan(s, payload)
    assert plan.ok and plan.kernel == {"kappa": 0.8}
    restored = ALGORITHMS["ohdp"].from_state(payload["kernel"])
    plan.apply_to(restored, Vocabulary(W))
    assert restored.get_params()["kappa"] == 0.8
    np.testing.assert_array_equal(restored.topic_word(), model.topic_word())  # what it learned is kept
    payload["kernel"]["params"]["inference"] = "stick"
    (line,) = restore_plan(s, payload).refused
    assert line.startswith(
        "TOPICSTREAM_ALGORITHM: the snapshot under Redis prefix 'topicstream' holds a ohdp model this version "
        "cannot read (state is of the 'stick' HDP variant"
    )


def test_pf_refuses_what_sizes_its_arrays_and_applies_the_rest() -> None:
    model = _trained("pf")
    s = _settings_for(model, kernel_params={"n_particles": 8, "ess_threshold": 0.9, "beta": 0.02})
    plan = restore_plan(s, _payload(model))
    assert plan.kernel == {"ess_threshold": 0.9, "beta": 0.02}
    (line,) = plan.refused
    assert line.startswith("TOPICSTREAM_KERNEL_PARAMS n_particles: the snapshot under Redis prefix")
    assert "has 4, the settings say 8;" in line and "TOPICSTREAM_REDIS_PREFIX" in line


@pytest.mark.parametrize(
    ("change", "setting", "old", "new"),
    [
        ({"topics": 21}, "TOPICSTREAM_TOPICS", "20", "21"),
        ({"vocab_size": 4000}, "TOPICSTREAM_VOCAB_SIZE", "3000", "4000"),
        ({"seed": 7}, "TOPICSTREAM_SEED", "0", "7"),
    ],
)
def test_shape_and_seed_changes_are_refused_with_the_remedy(
    change: dict[str, Any], setting: str, old: str, new: str
) -> None:
    model = _trained("scvb0")
    plan = restore_plan(_settings_for(model, **change), _payload(model))
    (line,) = plan.refused
    assert line.startswith(
        f"{setting}: the snapshot under Redis prefix 'topicstream' has {old}, the settings say {new};"
    )
    assert f"set {setting}={old} again, or use another TOPICSTREAM_REDIS_PREFIX" in line


def test_another_algorithm_is_refused_alone() -> None:
    model = _trained("pf")
    plan = restore_plan(load_settings(algorithm="scvb0", topics=5), _payload(model))
    assert plan.refused == [
        "TOPICSTREAM_ALGORITHM: the snapshot under Redis prefix 'topicstream' has \"pf\", the settings say "
        '"scvb0"; a restored model cannot change it: set TOPICSTREAM_ALGORITHM=pf again, or use another '
        "TOPICSTREAM_REDIS_PREFIX to start a new model"
    ]


def test_set_params_refuses_fixed_and_bad_values_and_leaves_the_model_alone() -> None:
    model = _trained("pf")
    before = model.get_params()
    with pytest.raises(ValueError, match="n_particles cannot change"):
        model.set_params(n_particles=8)
    with pytest.raises(ValueError, match="ess_threshold"):
        model.set_params(ess_threshold=0.1, alpha=0.5)  # 0.1 · 4 particles ≤ 1
    assert model.get_params() == before
    assert model.set_params(ess_threshold=0.6).ess_threshold == 0.6


def test_a_new_admit_count_acts_on_the_counts_already_seen() -> None:
    model = _trained("scvb0", n_words=50)
    vocab = Vocabulary(50, admit_count=5.0)
    vocab.encode([Counter({"rates": 3, "bank": 1})] * 3)  # each used by 3 articles: below 5
    plan = restore_plan(_settings_for(model, vocab_admit_count=2.0), _payload(model, vocab))
    assert plan.vocabulary == {"admit_count": 2.0}
    plan.apply_to(model, vocab)
    vocab.encode([Counter({"bank": 1})])  # 'rates' (3 ≥ 2) is admitted now; 'bank' reached 4
    assert sorted(vocab.words()) == ["bank", "rates"]
