"""The kernel contract (``kernels/_base.py``, architecture notes "Kernel API") for every registered kernel.

Parametrized over :data:`kernels.ALGORITHMS`, each built with its ``_unit_test_params()``: a new kernel gets
these checks by registering itself there.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from typing import Any

import numpy as np
import pytest

from kernels import ALGORITHMS, Batch, TopicModel, as_batch

K, W = 4, 30
HEAVY = 0  # a word in every training document, many times


def make(cls: type[TopicModel], seed: Any = 0, **extra: Any) -> TopicModel:
    params = {"n_topics": K, "n_words": W, "seed": seed, **cls._unit_test_params(), **extra}
    return cls(**params)


def planted_docs(rng: np.random.Generator, n_docs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Documents from 3 disjoint word blocks (1-9, 10-19, 20-29), plus word 0 ``HEAVY`` times 10 in each."""
    docs = []
    for _ in range(n_docs):
        block = int(rng.integers(3))
        lo = 1 if block == 0 else 10 * block
        words = rng.integers(lo, 10 * (block + 1), size=int(rng.integers(5, 15)))
        ids, cnts = np.unique(words, return_counts=True)
        docs.append((np.concatenate(([HEAVY], ids)), np.concatenate(([10.0], cnts.astype(float)))))
    return docs


def batches(seed: int, n: int, size: int = 8) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(1000 + seed)
    return [planted_docs(rng, size) for _ in range(n)]


TRAIN = batches(0, 6)
MORE = batches(1, 4)
PROBE = planted_docs(np.random.default_rng(7), 5)


def check_json_like(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, str), f"{where}: key {k!r} is not a string"
            check_json_like(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_json_like(v, f"{where}[{i}]")
    else:
        assert value is None or isinstance(value, np.ndarray | int | float | str | bool), (
            f"{where}: {type(value).__name__} is not an array or JSON scalar"
        )


def assert_same_state(a: Any, b: Any, where: str = "state") -> None:
    """Bit-identical: same structure, same array dtypes/shapes/bytes, equal scalars."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys differ"
        for k in a:
            assert_same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), f"{where}: not an array"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        assert a.tobytes() == b.tobytes(), f"{where}: arrays differ"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def states_equal(a: Any, b: Any) -> bool:
    try:
        assert_same_state(a, b)
    except AssertionError:
        return False
    return True


def array_bytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(array_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(array_bytes(v) for v in value)
    return 0


def train(model: TopicModel, data: list[list[tuple[np.ndarray, np.ndarray]]]) -> list[np.ndarray]:
    return [model.partial_fit_transform(b) for b in data]


def assert_mixtures(theta: np.ndarray, n_docs: int) -> None:
    assert theta.shape == (n_docs, K)
    assert np.all(np.isfinite(theta)) and np.all(theta >= 0)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, rtol=0, atol=1e-9)


@pytest.fixture(params=sorted(ALGORITHMS), ids=sorted(ALGORITHMS))
def cls(request: pytest.FixtureRequest) -> type[TopicModel]:
    return ALGORITHMS[request.param]


@pytest.fixture
def trained(cls: type[TopicModel]) -> TopicModel:
    model = make(cls)
    train(model, TRAIN)
    return model


# ---------------------------------------------------------------- outputs
def test_registered_under_its_algorithm_name(cls: type[TopicModel]) -> None:
    assert ALGORITHMS[cls.algorithm] is cls


def test_partial_fit_returns_self_and_mixtures(cls: type[TopicModel]) -> None:
    model = make(cls)
    assert model.partial_fit(TRAIN[0]) is model
    assert_mixtures(model.partial_fit_transform(TRAIN[1]), len(TRAIN[1]))
    assert model.n_batches_seen_ == 2 and model.n_docs_seen_ == len(TRAIN[0]) + len(TRAIN[1])


def test_transform_gives_mixtures_and_changes_nothing(trained: TopicModel) -> None:
    before = copy.deepcopy(trained.state_dict())
    theta = trained.transform(PROBE)
    assert_mixtures(theta, len(PROBE))
    assert_same_state(trained.state_dict(), before)
    np.testing.assert_array_equal(trained.transform(PROBE), theta)  # and nothing hidden changed either


def test_topic_word_and_topic_weights_are_distributions(cls: type[TopicModel], trained: TopicModel) -> None:
    for model in (make(cls), trained):
        phi = model.topic_word()
        assert phi.shape == (K, W) and np.all(np.isfinite(phi)) and np.all(phi >= 0)
        np.testing.assert_allclose(phi.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        # In row order: a transposed view made the labels and the drift copy it again (a K×W array more at the
        # peak of every snapshot), and a caller's change to it must not reach the model.
        assert phi.flags.c_contiguous
        phi[:] = 0.0
        np.testing.assert_allclose(model.topic_word().sum(axis=1), 1.0, rtol=0, atol=1e-12)
        weights = model.topic_weights()
        assert weights.shape == (K,) and np.all(weights >= 0)
        assert weights.sum() == pytest.approx(1.0, abs=1e-12)
        assert 0 <= model.topics_used() <= K
        # The fewest topics holding 95 % of the weight: drop any one of them and the rest hold less.
        held = model.topics_holding()
        top = np.sort(weights)[::-1]
        assert 1 <= held <= K and top[:held].sum() >= 0.95 - 1e-12 and top[: held - 1].sum() < 0.95
        shares = model.token_shares()  # the topics' shares of the tokens (the HDP's weights are E[β] instead)
        assert shares.shape == (K,) and np.all(shares >= 0) and shares.sum() == pytest.approx(1.0, abs=1e-12)


def test_background_topic_is_a_topic_or_none_with_or_without_phi(trained: TopicModel) -> None:
    """What the service marks as the background topic: an id or None, the same whether the caller passes φ."""
    k = trained.background_topic()
    assert k is None or (isinstance(k, int) and 0 <= k < trained.n_topics)
    assert trained.background_topic(trained.topic_word()) == k


def test_pairs_and_batch_inputs_agree(cls: type[TopicModel]) -> None:
    a, b = make(cls), make(cls)
    for docs in TRAIN[:3]:
        pairs = [(ids.tolist(), cnts.tolist()) for ids, cnts in docs]  # plain Python lists
        np.testing.assert_array_equal(a.partial_fit_transform(pairs), b.partial_fit_transform(Batch.from_docs(docs)))
    assert_same_state(a.state_dict(), b.state_dict())
    np.testing.assert_array_equal(a.transform(PROBE), b.transform(as_batch(PROBE, W)))


def test_a_document_given_as_its_tokens_is_the_same_document(cls: type[TopicModel], trained: TopicModel) -> None:
    """``(token_ids, ones)`` lists a word once per token; the kernels see its counts added up (SCVB0's mixtures
    differed by up to 0.13 between the two spellings before)."""
    tokens = [(np.repeat(ids, cnts.astype(np.int64)), np.ones(int(cnts.sum()))) for ids, cnts in PROBE]
    np.testing.assert_allclose(trained.transform(tokens), trained.transform(PROBE), atol=1e-12)
    a, b = make(cls), make(cls)
    for docs in TRAIN[:2]:
        as_tokens = [(np.repeat(ids, cnts.astype(np.int64)), np.ones(int(cnts.sum()))) for ids, cnts in docs]
        a.partial_fit(as_tokens)
        b.partial_fit(docs)
    np.testing.assert_allclose(a.topic_word(), b.topic_word(), atol=1e-12)


def test_word_ids_in_an_object_array_are_read_as_numbers(cls: type[TopicModel], trained: TopicModel) -> None:
    ids, cnts = PROBE[0]
    boxed = [(np.array(ids.tolist(), dtype=object), cnts)]
    np.testing.assert_array_equal(trained.transform(boxed), trained.transform([(ids, cnts)]))
    with pytest.raises(ValueError, match="must be integers"):
        trained.transform([(np.array([1, "x"], dtype=object), [1.0, 1.0])])


def test_a_document_of_more_than_one_dimension_is_named(trained: TopicModel) -> None:
    with pytest.raises(ValueError, match=r"document 1: .* must be 1-d"):
        trained.transform([PROBE[0], (np.array([[1, 2], [3, 4]]), np.ones((2, 2)))])


def test_get_params_is_json_even_for_numpy_settings(cls: type[TopicModel]) -> None:
    model = make(cls, n_topics=np.int64(K), seed=np.int64(3))
    assert json.loads(json.dumps(model.get_params()))["n_topics"] == K


def test_flush_learns_what_was_held_back_and_the_stream_goes_on(cls: type[TopicModel], trained: TopicModel) -> None:
    """``flush`` at the end of a corpus: idempotent, the model stays valid and keeps learning afterwards; a model
    that held documents back (the particle filter before its initial sample) has learned from them after it."""
    model = make(cls)
    model.partial_fit(TRAIN[0][:2])
    before = model.topic_word()
    model.flush()
    model.flush()
    held_back = not np.allclose(before, model.topic_word())
    assert held_back == (cls.__name__ == "ParticleFilterLDA")  # its unit settings buffer 3 documents
    assert_mixtures(model.partial_fit_transform(TRAIN[1]), len(TRAIN[1]))
    np.testing.assert_allclose(model.topic_word().sum(axis=1), 1.0, atol=1e-12)
    state = copy.deepcopy(trained.state_dict())
    trained.flush()  # nothing held back once trained past its buffer
    assert_same_state(trained.state_dict(), state)


def test_diagnostics_are_finite_floats(cls: type[TopicModel], trained: TopicModel) -> None:
    for model in (make(cls), trained):
        diag = model.diagnostics()
        assert isinstance(diag, dict)
        for name, value in diag.items():
            assert isinstance(name, str) and isinstance(value, float), (name, value)
            assert np.isfinite(value), (name, value)


# ---------------------------------------------------------------- determinism and state
def test_same_seed_is_bit_identical_and_other_seed_differs(cls: type[TopicModel]) -> None:
    a, b, c = make(cls, seed=5), make(cls, seed=5), make(cls, seed=6)
    thetas_a, thetas_b = train(a, TRAIN), train(b, TRAIN)
    train(c, TRAIN)
    for x, y in zip(thetas_a, thetas_b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert_same_state(a.state_dict(), b.state_dict())
    assert not states_equal(a.state_dict()["state"], c.state_dict()["state"])
    assert not np.array_equal(a.topic_word(), c.topic_word())


def test_state_dict_is_arrays_and_json_scalars(trained: TopicModel) -> None:
    state = trained.state_dict()
    assert state["algorithm"] == trained.algorithm
    assert state["params"] == trained.get_params()
    check_json_like(state, "state_dict")


def test_from_state_continues_bit_identically(cls: type[TopicModel], trained: TopicModel) -> None:
    restored = cls.from_state(copy.deepcopy(trained.state_dict()))
    assert_same_state(restored.state_dict(), trained.state_dict())
    snapshot = trained.state_dict()
    for x, y in zip(train(trained, MORE), train(restored, MORE), strict=True):
        np.testing.assert_array_equal(x, y)
    assert_same_state(restored.state_dict(), trained.state_dict())
    np.testing.assert_array_equal(restored.transform(PROBE), trained.transform(PROBE))
    # the snapshot taken before is not changed by training that went on afterwards
    assert not states_equal(snapshot["state"], trained.state_dict()["state"])
    assert_same_state(cls.from_state(snapshot).state_dict(), snapshot)


def test_a_restored_model_has_every_attribute_a_fresh_one_has(cls: type[TopicModel], trained: TopicModel) -> None:
    """Kernels that restore without drawing a fresh state first (``_set_state_installs_all``) must install in
    ``_set_state`` everything ``_init_state`` creates; for the others the restore starts from a fresh state."""
    restored = cls.from_state(trained.state_dict())
    assert set(vars(restored)) == set(vars(trained))
    for name, value in vars(trained).items():
        assert type(getattr(restored, name)) is type(value), name


def test_from_state_rejects_another_algorithm(cls: type[TopicModel], trained: TopicModel) -> None:
    state = trained.state_dict()
    state["algorithm"] = "not-" + cls.algorithm
    with pytest.raises(ValueError, match="algorithm"):
        cls.from_state(state)


def test_from_state_refuses_arrays_of_another_shape(cls: type[TopicModel], trained: TopicModel) -> None:
    """Every array's shape is checked against the settings: the state of a model with another vocabulary size is
    refused, not installed."""
    state = trained.state_dict()
    state["params"] = {**state["params"], "n_words": W + 1}
    with pytest.raises(ValueError, match="shape"):
        cls.from_state(state)


def test_pickle_round_trip(trained: TopicModel) -> None:
    clone = pickle.loads(pickle.dumps(trained))
    assert type(clone) is type(trained)
    assert_same_state(clone.state_dict(), trained.state_dict())
    for x, y in zip(train(trained, MORE), train(clone, MORE), strict=True):
        np.testing.assert_array_equal(x, y)
    assert_same_state(clone.state_dict(), trained.state_dict())


def test_state_size_does_not_grow(cls: type[TopicModel]) -> None:
    model = make(cls)
    data = batches(2, 50)
    train(model, data[:5])
    size5 = array_bytes(model.state_dict())
    train(model, data[5:])
    assert size5 > 0 and array_bytes(model.state_dict()) == size5


# ---------------------------------------------------------------- edge cases
def test_empty_documents_and_empty_batches(cls: type[TopicModel], trained: TopicModel) -> None:
    empty: list[tuple[list[int], list[float]]] = []
    for model in (make(cls), trained):
        assert model.partial_fit_transform(empty).shape == (0, K)
        assert model.transform(empty).shape == (0, K)
        docs: list[Any] = [([], []), *PROBE[:2], ([], [])]
        assert_mixtures(model.partial_fit_transform(docs), 4)
        assert_mixtures(model.transform(docs), 4)
        assert_mixtures(model.partial_fit_transform([([], [])]), 1)
        np.testing.assert_allclose(model.topic_word().sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        ([([0, W], [1.0, 1.0])], "outside the vocabulary"),
        ([([-1], [1.0])], "outside the vocabulary"),
        ([([1, 2], [1.0, -2.0])], "counts"),
        ([([1, 2], [1.0, float("nan")])], "counts"),
        ([([1, 2], [1.0, 0.0])], "counts"),
        ([([1, 2], [1.0])], "equal length"),
        ([([2.7], [1.0])], "must be integers, got 2.7"),  # a cast would learn word 2
        ([(["3"], [1.0])], "must be integers"),
        ([(np.array([2**63], dtype=np.uint64), [1.0])], "too large"),
    ],
)
def test_bad_documents_raise_value_error(cls: type[TopicModel], docs: list[Any], message: str) -> None:
    model = make(cls)
    before = copy.deepcopy(model.state_dict())
    for call in (model.partial_fit, model.partial_fit_transform, model.transform):
        with pytest.raises(ValueError, match=message):
            call(docs)
    assert_same_state(model.state_dict(), before)


def _bad_settings(cls: type[TopicModel]) -> list[tuple[str, Any]]:
    """n_topics/n_words/seed out of range, NaN for every float setting, text for every integer setting."""
    bad: list[tuple[str, Any]] = [("n_topics", 0), ("n_topics", -3), ("n_topics", 2.5), ("n_words", 0)]
    bad += [("seed", -1), ("seed", "0")]
    for name, value in make(cls).get_params().items():
        if name in ("n_topics", "n_words", "seed") or isinstance(value, bool):
            continue
        if isinstance(value, float):
            bad.append((name, float("nan")))
        elif isinstance(value, int):
            bad.append((name, "many"))
    return bad


def test_settings_are_the_dataclass_fields_of_every_class_up_to_topic_model(cls: type[TopicModel]) -> None:
    """Settings are declared once, as dataclass fields: a kernel class without ``@dataclass`` would keep the
    settings it declares out of ``__init__``, ``get_params`` and therefore its snapshots."""
    for klass in cls.__mro__[: cls.__mro__.index(TopicModel) + 1]:
        assert "__dataclass_params__" in vars(klass), f"{klass.__name__} is not a @dataclass"
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    assert fields == list(cls.init_signature().parameters) == list(make(cls).get_params())


def test_bad_settings_raise_value_error_naming_them(cls: type[TopicModel]) -> None:
    cases = _bad_settings(cls)
    assert len(cases) > 6, "the kernel exposes no numeric hyperparameters to check"
    for name, value in cases:
        with pytest.raises(ValueError, match=name):
            make(cls, **{name: value})


def test_reset_words_forgets_a_heavy_word(trained: TopicModel) -> None:
    before = trained.topic_word()[:, HEAVY].sum()
    other = trained.topic_word()[:, 15].sum()
    trained.reset_words([HEAVY])
    after = trained.topic_word()
    np.testing.assert_allclose(after.sum(axis=1), 1.0, atol=1e-12)
    assert after[:, HEAVY].sum() <= before / 10, (before, after[:, HEAVY].sum())
    assert after[:, 15].sum() >= other  # the others keep (and re-normalised, gain) their mass
    assert_mixtures(trained.transform(PROBE), len(PROBE))
    trained.reset_words([])
    with pytest.raises(ValueError, match="word ids"):
        trained.reset_words([W])
    before_state = copy.deepcopy(trained.state_dict())
    for bad in ([1.5], ["2"]):  # a cast would forget word 1 or 2
        with pytest.raises(ValueError, match="must be integers"):
            trained.reset_words(bad)
    assert_same_state(trained.state_dict(), before_state)


def test_prevalence_thresholds_are_checked(trained: TopicModel) -> None:
    for bad in (-1.0, 2.0, float("nan")):
        with pytest.raises(ValueError, match="threshold"):
            trained.topics_used(bad)
        with pytest.raises(ValueError, match="mass"):
            trained.topics_holding(bad)


def test_warm_up_compiles_without_touching_other_models(cls: type[TopicModel]) -> None:
    before = make(cls).partial_fit(TRAIN[0]).state_dict()
    cls.warm_up()
    after = make(cls).partial_fit(TRAIN[0]).state_dict()
    assert_same_state(before, after)
