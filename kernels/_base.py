"""The contract every topic-model kernel keeps (``docs/architecture.md``, "Kernel contract").

A kernel is a single-pass, constant-memory estimator over a stream of bag-of-words documents:

* settings (hyperparameters) are declared once, as dataclass fields with their defaults: the generated
  ``__init__`` stores them untouched and shows them in its signature. They are checked in one place,
  ``_validate_params`` (also reachable without building a model: ``check_params``; and on a trained one:
  ``set_params``, which refuses the settings in ``restore_fixed`` that size or define the learned state);
* learned state lives in attributes ending in ``_`` and is created by ``_init_state``; what a snapshot stores of it
  is declared once, as the table ``saved`` (:class:`Saved`: snapshot key, attribute, shape from K and W, type),
  which ``state_dict``, ``from_state`` and ``state_bytes`` (the state's size for given settings) read;
* ``partial_fit`` consumes one batch once; memory never depends on how many batches were seen;
* ``state_dict`` / ``from_state`` round-trip exactly, random generator included, so a restored kernel continues
  bit-identically;
* ``reset_words`` forgets the statistics of vocabulary slots that the (bounded) vocabulary recycled for new words.

``tests/test_kernel_contract.py`` checks every kernel in :data:`kernels.ALGORITHMS` against this contract.
"""

from __future__ import annotations

import abc
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._batch import Batch, Docs, as_batch, integer_ids
from ._numba_cache import compile_apart, uncache_after_fault

__all__ = [
    "EXACT_FASTMATH",
    "Saved",
    "TopicModel",
    "check_interval",
    "check_positive_int",
    "mass_topics",
    "state_array",
]

#: numba ``fastmath`` flags of the kernels' loops: every LLVM fast-math flag except ``reassoc``. With reassociation
#: LLVM may split a sum into vector lanes in a way that depends on where the arrays start in memory, and SCVB0 and
#: the online HDP then gave results differing in the last bit from one call or model to the next (seen on an
#: AVX-512 machine: an 8-byte shift of the input changed θ), which breaks bit-identical reproducibility. One plain
#: sum (the online HDP's ``_sum_rows``) adds ``reassoc``: its lanes split by index, tested at every offset.
EXACT_FASTMATH = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}  # a set: numba refuses a frozenset

T = TypeVar("T", bound="TopicModel")

# State values must be one of these so that snapshots can store them without pickle.
StateValue = np.ndarray | int | float | str | bool | dict | list | None


def mass_topics(weights: ArrayLike, mass: float = 0.95) -> int:
    """The fewest topics whose weights add up to ``mass`` of the total (how many topics the model uses).

    >>> mass_topics([0.6, 0.3, 0.08, 0.02])
    3
    """
    w = np.sort(np.asarray(weights, dtype=np.float64))[::-1]
    if w.size == 0 or not w.sum() > 0:
        return 0
    return min(int(w.size), int(np.searchsorted(np.cumsum(w) / w.sum(), mass)) + 1)


def check_positive_int(name: str, value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer ≥ 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_non_negative_int(name: str, value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer ≥ 0."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def check_interval(
    name: str, value: Any, low: float, high: float = np.inf, *, low_open: bool = False, high_open: bool = False
) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite-or-inf real number in the given interval."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    ok_low = v > low if low_open else v >= low
    ok_high = v < high if high_open else v <= high
    if np.isnan(v) or not (ok_low and ok_high):
        lb, hb = ("(" if low_open else "["), (")" if high_open else "]")
        raise ValueError(f"{name} must be in {lb}{low}, {high}{hb}, got {value!r}")


def state_array(state: Mapping[str, Any], name: str, shape: tuple[int, ...], dtype: Any = np.float64) -> NDArray[Any]:
    """A C-contiguous copy of ``state[name]`` as ``dtype``; ``ValueError`` unless it has ``shape`` (the shape
    that the model's settings give it: a snapshot of a model with other settings is refused)."""
    arr = np.array(state[name], dtype=dtype, order="C", copy=True)
    if arr.shape != shape:
        raise ValueError(f"state array {name!r} has shape {arr.shape}, expected {shape}")
    return arr


class Saved(NamedTuple):
    """One piece of a kernel's learned state as its snapshot stores it: a row of :attr:`TopicModel.saved`.

    The attribute ``attr`` is stored under ``key`` (default: ``attr`` without its trailing ``_``). Given a
    ``shape`` (its shape for the settings K, W), it is an array of element type ``kind``: copied into the
    snapshot, and on restore copied back and refused unless it has that shape (:func:`state_array`). Without, it
    is a scalar that ``kind`` converts (``float``, ``int``). ``missing`` gives the value for a snapshot written
    before this piece was saved, from the model with the rows before it installed; without it the key is required.
    """

    attr: str
    kind: type = float
    shape: Callable[[int, int], tuple[int, ...]] | None = None
    key: str = ""
    missing: Callable[[Any], Any] | None = None

    @property
    def name(self) -> str:
        """The snapshot key."""
        return self.key or self.attr.rstrip("_")


@dataclass(eq=False, repr=False)
class TopicModel(abc.ABC):
    """Base class of the streaming topic-model kernels.

    A kernel is a dataclass (``@dataclass(eq=False, repr=False, kw_only=True)``: identity equality, the settings
    repr below) whose fields are its settings, declared once with their types and defaults after the three every
    kernel takes (``n_topics``, ``n_words``, ``seed``): the generated ``__init__`` stores them untouched, and
    ``__post_init__`` validates them and creates the learned state (:meth:`_setup`). Learned state that a class
    annotates is a ``field(init=False)``; what a snapshot stores of it is the table :attr:`saved`. Subclasses
    define ``algorithm``, ``saved``, ``_validate_params``, ``_init_state``, and the ``_partial_fit``,
    ``_transform``, ``topic_word``, ``topic_weights``, ``reset_words`` hooks.
    """

    algorithm: ClassVar[str]

    n_topics: int
    n_words: int
    seed: int = 0

    #: Settings that a model restored from a snapshot cannot take a new value for, because the learned state's
    #: shapes or meaning depend on them (:meth:`set_params` refuses them). Each kernel adds its own, saying why.
    restore_fixed: ClassVar[frozenset[str]] = frozenset({"n_topics", "n_words", "seed"})
    #: The numba functions ("module:function") that :meth:`warm_up` compiles in a child process when numba's cache
    #: lacks one (:func:`kernels._numba_cache.compile_apart`): a kernel measured to run slower in the process that
    #: compiled it names its entry points here.
    compiled_apart: ClassVar[tuple[str, ...]] = ()
    #: The learned state a snapshot stores, in the snapshot's order (besides the random generator and the counters
    #: that :meth:`state_dict` adds), read by :meth:`_get_state`, :meth:`_set_state` and :meth:`state_bytes`. A
    #: kernel whose state is not such a list of arrays and scalars (the particle filter's pools) overrides those.
    saved: ClassVar[tuple[Saved, ...]] = ()
    #: True when ``_set_state`` sets every attribute ``_init_state`` creates, so :meth:`from_state` need not draw
    #: a fresh state first (the contract suite's restore tests hold every kernel to it).
    _set_state_installs_all: ClassVar[bool] = False
    #: The settings of :class:`kernels.hygiene.TopicHygiene` that suit this kernel, when it supports topic moves
    #: and hygiene should run by default (the service's ``TOPICSTREAM_TOPIC_HYGIENE`` unset); ``None``: off by
    #: default.
    hygiene_defaults: ClassVar[Mapping[str, Any] | None] = None
    #: The setting that tells this kernel the size D of its corpus, where it has one (the online HDP's ``window``):
    #: ``topicstream eval`` and the benchmarks set it to the training documents unless it is given; a stream has
    #: no size, and the service leaves it at its default.
    corpus_size_param: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        self._setup()

    # ------------------------------------------------------------------ settings
    @classmethod
    def init_signature(cls) -> inspect.Signature:
        """The settings ``__init__`` takes (the dataclass fields it initialises, inherited ones first). Every
        reader of the settings (:meth:`params_with_defaults`, :meth:`get_params`, ``service.compat``) goes through
        here."""
        return inspect.signature(cls)

    @classmethod
    def params_with_defaults(cls, **params: Any) -> dict[str, Any]:
        """Every ``__init__`` setting: ``params`` over the defaults. ``TypeError`` for an unknown or missing name."""
        bound = cls.init_signature().bind(**params)
        bound.apply_defaults()
        return dict(bound.arguments)

    @classmethod
    def _settings_only(cls: type[T], **params: Any) -> T:
        """A model with its settings stored and no learned state (what ``__init__`` does before ``_setup``)."""
        model = cls.__new__(cls)
        for name, value in cls.params_with_defaults(**params).items():
            setattr(model, name, value)
        return model

    @classmethod
    def check_params(cls, **params: Any) -> None:
        """Validate settings exactly as ``__init__`` would, without allocating the learned state.

        ``params`` are ``__init__``'s keyword arguments (``n_topics`` and ``n_words`` included). Raises
        ``TypeError`` for an unknown or missing name and ``ValueError`` naming the first bad value (the checks are
        those of ``_validate_params``, the one place each kernel validates its settings).
        """
        model = cls._settings_only(**params)
        model._validate_base_params()
        model._validate_params()

    def set_params(self: T, **params: Any) -> T:
        """Give this (possibly trained or restored) model new settings, keeping what it learned.

        Refuses (``ValueError``) the names in :attr:`restore_fixed` and any value :meth:`check_params` rejects;
        the model is unchanged then. Values derived from settings (step-size tables) are rebuilt.
        """
        fixed = sorted(set(params) & self.restore_fixed)
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot change on a model with learned state")
        type(self).check_params(**{**self.get_params(), **params})
        for name, value in params.items():
            setattr(self, name, value)
        self._validate_params()
        return self

    @classmethod
    def state_bytes(cls, n_topics: int, n_words: int, **params: Any) -> int:
        """Bytes of the arrays in :meth:`state_dict` for these settings (what a snapshot stores), from the shapes
        that :attr:`saved` gives them; ``tests/test_compat.py`` compares it with the packed size of a real model's
        state."""
        K, W = int(n_topics), int(n_words)
        return sum(np.dtype(s.kind).itemsize * math.prod(s.shape(K, W)) for s in cls.saved if s.shape is not None)

    @classmethod
    def _param_names(cls) -> list[str]:
        return list(cls.init_signature().parameters)

    def get_params(self) -> dict[str, Any]:
        """The settings given to ``__init__`` (JSON-serialisable: a numpy scalar given is returned as Python's)."""
        values = {name: getattr(self, name) for name in self._param_names()}
        return {name: v.item() if isinstance(v, np.generic) else v for name, v in values.items()}

    def _validate_base_params(self) -> None:
        check_positive_int("n_topics", self.n_topics)
        check_positive_int("n_words", self.n_words)
        check_non_negative_int("seed", self.seed)

    @abc.abstractmethod
    def _validate_params(self) -> None:
        """Check every setting; raise ``ValueError`` naming the bad one."""

    def _setup(self, fresh: bool = True) -> None:
        """Validate settings and create fresh learned state (what ``__post_init__`` does). ``fresh=False``
        (inside :meth:`from_state`, for kernels whose ``_set_state`` installs every learned attribute:
        ``_set_state_installs_all``) skips :meth:`_init_state`: drawing a fresh state first (a random W×K N^Φ for
        SCVB0) would cost as much as the restore itself."""
        self._validate_base_params()
        self._validate_params()
        self.rng_ = np.random.Generator(np.random.PCG64(self.seed))
        self.n_batches_seen_ = 0
        self.n_docs_seen_ = 0
        self.n_tokens_seen_ = 0.0
        if fresh:
            self._init_state()

    @abc.abstractmethod
    def _init_state(self) -> None:
        """Allocate the learned state (fixed size: it never grows with the stream)."""

    # ------------------------------------------------------------------ learning and inference
    def partial_fit(self: T, docs: Docs) -> T:
        """Update the model with one batch of documents, seen once. Returns ``self``."""
        self.partial_fit_transform(docs)
        return self

    def partial_fit_transform(self, docs: Docs) -> NDArray[np.float64]:
        """Update the model with ``docs`` and return their topic mixtures as estimated during the update.

        Cheaper than ``partial_fit`` followed by ``transform``: the service publishes these mixtures.
        Shape ``(n_docs, n_topics)``, rows sum to 1.
        """
        batch = as_batch(docs, self.n_words)
        self._check_fit_batch(batch)
        theta = self._partial_fit(batch)
        self.n_batches_seen_ += 1
        self.n_docs_seen_ += batch.n_docs
        self.n_tokens_seen_ += batch.n_tokens
        self._after_partial_fit(batch)
        return theta

    def _after_partial_fit(self, batch: Batch) -> None:  # noqa: B027 - a hook: most kernels need none
        """Called once ``batch`` is learned and counted (SCVB0 keeps its first documents here: ``start_docs``)."""

    def flush(self) -> None:  # noqa: B027 - a hook: most kernels hold nothing back
        """Learn from what this kernel holds back for later, now: at the end of a finite corpus shorter than that
        (the particle filter buffers its first ``init_docs`` documents for its initial Gibbs sample, and a corpus of
        fewer documents would leave it untrained). A stream never needs it; most kernels hold nothing back."""

    def transform(self, docs: Docs) -> NDArray[np.float64]:
        """Topic mixtures of ``docs`` with the topics held fixed; the model is not changed.

        Shape ``(n_docs, n_topics)``, rows sum to 1. A document without tokens gets the prior mean.
        """
        return self._transform(as_batch(docs, self.n_words))

    def _check_fit_batch(self, batch: Batch) -> None:  # noqa: B027 - a hook: most kernels take every batch
        """Raise ``ValueError`` for a valid batch this kernel cannot learn from (before any state changes); every
        batch :func:`as_batch` accepts is fine unless a kernel says otherwise."""

    @abc.abstractmethod
    def _partial_fit(self, batch: Batch) -> NDArray[np.float64]: ...

    @abc.abstractmethod
    def _transform(self, batch: Batch) -> NDArray[np.float64]: ...

    @abc.abstractmethod
    def topic_word(self) -> NDArray[np.float64]:
        """Topic–word distributions φ, shape ``(n_topics, n_words)``, rows sum to 1."""

    @abc.abstractmethod
    def topic_weights(self) -> NDArray[np.float64]:
        """Corpus-level prevalence of each topic, shape ``(n_topics,)``, sums to 1."""

    def token_shares(self) -> NDArray[np.float64]:
        """Each topic's share of the tokens the statistics hold, shape ``(n_topics,)``, sums to 1: the prevalence
        itself for kernels that weigh topics by their tokens (SCVB0, the particle filter). The online HDP's
        prevalence is E[β] instead, which a topic that articles stopped using keeps for long (docs/ohdp.md)."""
        return self.topic_weights()

    def topics_used(self, threshold: float = 0.01) -> int:
        """Number of topics whose prevalence is at least ``threshold`` (in [0, 1])."""
        check_interval("threshold", threshold, 0.0, 1.0)
        return int(np.count_nonzero(self.topic_weights() >= threshold))

    def topics_holding(self, mass: float = 0.95) -> int:
        """The fewest topics whose prevalence adds up to ``mass`` (:func:`mass_topics`). For the online HDP, near
        ``n_topics`` it says that the truncation, not the data, limits the number of topics (docs/ohdp.md, "When
        the truncation limits the count")."""
        check_interval("mass", mass, 0.0, 1.0, low_open=True)
        return mass_topics(self.topic_weights(), mass)

    def background_topic(self, phi: NDArray[np.float64] | None = None) -> int | None:
        """The background topic (the words every document uses), or None; ``phi``: :meth:`topic_word`, if the
        caller has it already. None unless a kernel can tell: SCVB0 and the particle filter (the documents that
        use it) and the online HDP (its tables) override it. The test on φ alone
        (:func:`kernels.background.background_topic`) is not used for any kernel: on the particle filter's and
        SCVB0's demo streams it picked the football desk (docs/ohdp.md, "The background topic")."""
        return None

    def diagnostics(self) -> dict[str, float]:
        """Kernel-specific numbers worth a dashboard (e.g. ESS, resamplings, current step size).

        The service exports each as ``topicstream_kernel_stat{stat="<name>"}``. The base class reports nothing;
        each kernel returns its own (step sizes, ESS, resamplings, ...).
        """
        return {}

    @abc.abstractmethod
    def reset_words(self, word_ids: ArrayLike) -> None:
        """Forget everything learned about these vocabulary slots (the vocabulary gave them to new words)."""

    def _check_word_ids(self, word_ids: ArrayLike) -> NDArray[np.int64]:
        ids = np.unique(integer_ids(np.asarray(word_ids).ravel()))  # 1.5 must not forget word 1
        if ids.size and (ids[0] < 0 or ids[-1] >= self.n_words):
            raise ValueError(f"word ids must lie in [0, {self.n_words})")
        return ids

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this model is: settings, learned state, RNG.

        Values are numpy arrays and JSON-compatible scalars, lists and dicts (no pickle needed).
        """
        state = {
            "rng": self.rng_.bit_generator.state,
            "n_batches_seen": self.n_batches_seen_,
            "n_docs_seen": self.n_docs_seen_,
            "n_tokens_seen": self.n_tokens_seen_,
        }
        state.update(self._get_state())
        return {"algorithm": self.algorithm, "params": self.get_params(), "state": state}

    @classmethod
    def from_state(cls: type[T], state: dict[str, Any]) -> T:
        """Rebuild a model from :meth:`state_dict` output."""
        if state.get("algorithm") != cls.algorithm:
            raise ValueError(f"state is for algorithm {state.get('algorithm')!r}, not {cls.algorithm!r}")
        model = cls._settings_only(**cls.params_from_state(state["params"]))
        model._setup(fresh=not cls._set_state_installs_all)
        s = dict(state["state"])
        model.rng_.bit_generator.state = s.pop("rng")
        model.n_batches_seen_ = int(s.pop("n_batches_seen"))
        model.n_docs_seen_ = int(s.pop("n_docs_seen"))
        model.n_tokens_seen_ = float(s.pop("n_tokens_seen"))
        model._set_state(s)
        return model

    @classmethod
    def params_from_state(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """The ``__init__`` settings held in a :meth:`state_dict`'s ``params``, as this version names them.

        A kernel whose settings changed since older snapshots were written maps them here (``ValueError`` for a
        state it cannot read); :meth:`from_state` and ``service.compat.restore_plan`` read snapshots through it.
        """
        return dict(params)

    def _get_state(self) -> dict[str, StateValue]:
        """The learned state that :attr:`saved` lists: copies of the arrays (training goes on in place), the
        scalars converted to their type."""
        return {
            s.name: (getattr(self, s.attr).copy() if s.shape else s.kind(getattr(self, s.attr))) for s in self.saved
        }

    def _set_state(self, state: Mapping[str, Any]) -> None:
        """Install the learned state that :attr:`saved` lists from ``state`` (what :meth:`_get_state` returned, or
        a snapshot of an older version: see :attr:`Saved.missing`), copying the arrays: the caller may reuse them."""
        K, W = int(self.n_topics), int(self.n_words)
        for s in self.saved:
            if s.missing is not None and s.name not in state:
                value = s.missing(self)
            elif s.shape is not None:
                value = state_array(state, s.name, s.shape(K, W), s.kind)
            else:
                value = s.kind(state[s.name])
            setattr(self, s.attr, value)

    @classmethod
    def warm_up(cls, **params: Any) -> None:
        """Compile this kernel's numba functions on a tiny model, so the first real batch does not stall.

        numba caches compiled code on disk (``cache=True``), so this costs seconds on a first start and almost
        nothing afterwards. A service calls it before it joins a consumer group: compiling inside the first
        batch could exceed ``max.poll.interval.ms``. ``params`` (e.g. the service's kernel settings) select the
        code paths to compile; they override the small unit-test settings. A kernel whose
        :attr:`compiled_apart` entry points the cache lacks is compiled in a child process first and loaded from
        the cache here (:func:`kernels._numba_cache.compile_apart`: it runs faster so). A cache that fails (a
        truncated file, a full disk) is left aside in this process (:func:`kernels._numba_cache.uncache_after_fault`).
        """
        compile_apart(cls.algorithm, params, cls.compiled_apart)
        try:
            cls._warm_up_here(params)
        except Exception as e:
            if not uncache_after_fault(e):
                raise
            cls._warm_up_here(params)

    @classmethod
    def _warm_up_here(cls, params: dict[str, Any]) -> None:
        """:meth:`warm_up`'s tiny model, in this process."""
        rng = np.random.default_rng(0)
        n_words = 20
        factory: Callable[..., TopicModel] = cls
        model = factory(n_topics=3, n_words=n_words, seed=0, **{**cls._unit_test_params(), **params})
        docs = [(rng.choice(n_words, 6, replace=False), rng.integers(1, 4, 6).astype(np.float64)) for _ in range(16)]
        for i in range(0, len(docs), 4):
            model.partial_fit_transform(docs[i : i + 4])
        model.transform(docs[:4])
        model.topic_word()
        model.topic_weights()
        model.reset_words([0])
        model.diagnostics()

    @classmethod
    def _unit_test_params(cls) -> dict[str, Any]:
        """Small, fast settings for the contract tests (besides ``n_topics``, ``n_words``, ``seed``)."""
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"
