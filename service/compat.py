"""Do the settings fit the kernel, the machine, Redis and the snapshot being restored?

Checked before a process does any work, each answer a list of one-line messages naming the setting:

* :func:`kernel_param_problems` — ``TOPICSTREAM_KERNEL_PARAMS`` against the kernel's own validation (unknown names
  with a close match, bad values, values that do not go together);
* :func:`size_problems` — ``TOPICSTREAM_VOCAB_SIZE`` × ``TOPICSTREAM_TOPICS``: the learner's memory at a snapshot
  against the memory this machine (or container) has free, and the snapshot against Redis's largest value;
* :func:`restore_plan` — the newest snapshot against the settings: each setting that differs is either applied to
  the restored model (``RestorePlan.apply_to``) or refused with its remedy.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernels.registry import kernel_class

from .settings import Settings

if TYPE_CHECKING:
    from kernels import TopicModel

    from .text import Vocabulary

__all__ = [
    "REDIS_MAX_BULK_BYTES",
    "RestorePlan",
    "available_memory_bytes",
    "kernel_param_problems",
    "learner_peak_bytes",
    "learner_state_copies",
    "param_problems",
    "replica_peak_bytes",
    "restore_plan",
    "size_problems",
    "snapshot_bytes",
]

#: Redis refuses a value larger than ``proto-max-bulk-len``, 512 MiB unless configured otherwise; a snapshot is
#: one value.
REDIS_MAX_BULK_BYTES = 512 * 1024**2
#: A vocabulary slot in a snapshot: its count (8 bytes), its word in the JSON header (a 3–30 letter word, quoted)
#: and, the candidate table holding up to half as many entries, half a candidate's word and count. An estimate.
VOCAB_BYTES_PER_SLOT = 48
#: Python, numpy, polars, numba's compiled code, the Kafka clients, the threads and the batch pipeline's buffers:
#: measured at W = 65,536, K = 100 (scvb0) under a backlog with the input fed at 1,000 articles/s, 10 minutes
#: (learner VmHWM 750 MiB with topic hygiene, 615 without; a replica 610–623, each with one copy of S more than
#: today's code makes), less the copies of the state that :func:`learner_peak_bytes` and
#: :func:`replica_peak_bytes` count, rounded up.
PROCESS_BYTES = 370 * 1024**2
#: What a kernel's compiled code adds to that, measured by loading it (scvb0's 62 MiB is in PROCESS_BYTES).
KERNEL_CODE_BYTES = {"scvb0": 0, "ohdp": 51 * 1024**2, "pf": 106 * 1024**2}
#: Copies of the kernel state S at the learner's peak, while it describes a snapshot: the live model, the
#: ``state_dict`` copy, the model rebuilt from it for the summary and φ in float64 (4·S; the labels and the drift
#: made a fifth, a row-order copy of φ, until ``topic_word`` returned φ in row order: measured in process at the
#: defaults, 125 → 75 MiB above the arrays held); φ in float32 for drift, now and at the last snapshot, and the
#: packed snapshot come after some of those are freed. The topics' anchors, φ in float32 held for the process's
#: life (service/anchors.py), and their roots in float16 for the snapshot, are counted apart:
#: :data:`ANCHOR_BYTES_PER_ENTRY`.
#: Topic hygiene adds the copy it plans on, held between snapshots, and its planner's working arrays (3·S).
LEARNER_STATE_COPIES, HYGIENE_STATE_COPIES = 4, 3
#: The learner's topic anchors: one float32 per word and topic, and the float16 root of each that the snapshot
#: being written holds (:data:`ANCHOR_SNAPSHOT_BYTES_PER_ENTRY`).
ANCHOR_BYTES_PER_ENTRY = 6
#: A snapshot's topic anchors (``TopicAnchors.state_after``): a float16 per word and formed topic, at most W × K.
ANCHOR_SNAPSHOT_BYTES_PER_ENTRY = 2
#: A replica's peak, while it loads a snapshot: the model served, the snapshot's bytes (twice, briefly, in the Redis
#: client: with the anchors it does not use, :data:`ANCHOR_SNAPSHOT_BYTES_PER_ENTRY` each), the new model and φ for
#: the labels.
REPLICA_STATE_COPIES = 4
#: The settings that give a kernel its ``n_topics``, ``n_words`` and ``seed``.
BASE_SETTINGS = {"n_topics": "TOPICSTREAM_TOPICS", "n_words": "TOPICSTREAM_VOCAB_SIZE", "seed": "TOPICSTREAM_SEED"}


# ------------------------------------------------------------------------------------------ kernel parameters
def param_problems(
    algorithm: str,
    n_topics: int,
    n_words: int,
    params: Mapping[str, Any],
    *,
    seed: int = 0,
    source: str = "TOPICSTREAM_KERNEL_PARAMS",
    base: Mapping[str, str] = BASE_SETTINGS,
) -> list[str]:
    """One line per problem of the kernel settings ``params`` (given by ``source``) for ``algorithm``.

    Unknown names get the closest known one (difflib). Values are checked by the kernel's own
    ``check_params`` (its ``_validate_params``, without allocating the model); each error names its parameter,
    which is then set aside so that the next problem shows too. A problem with ``n_topics``, ``n_words`` or
    ``seed`` alone names its setting from ``base``.
    """
    cls = kernel_class(algorithm)
    known = [n for n in cls._param_names() if n not in base]
    problems: list[str] = []
    remaining: dict[str, Any] = {}
    for name, value in params.items():
        if name in base:
            problems.append(f"{source}: {name} is set by {base[name]}, not here")
        elif name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"{algorithm} knows {', '.join(sorted(known))}"
            problems.append(f"{source}: unknown parameter {name!r} for {algorithm}; {hint}")
        else:
            remaining[name] = value
    for _ in range(len(remaining) + 1):
        try:
            cls.check_params(n_topics=n_topics, n_words=n_words, seed=seed, **remaining)
            break
        except (TypeError, ValueError) as e:
            named = [n for n in remaining if re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", str(e))]
            if named:
                problems.append(f"{source}: {e}")
                for n in named:
                    del remaining[n]
                continue
            blamed = [base[n] for n in base if re.search(rf"(?<![A-Za-z0-9_]){n}(?![A-Za-z0-9_])", str(e))]
            problems.append(f"{', '.join(blamed) or source}: {e}")
            break
    return problems


def kernel_param_problems(settings: Settings) -> list[str]:
    """One line per problem of ``TOPICSTREAM_KERNEL_PARAMS`` for ``TOPICSTREAM_ALGORITHM`` (:func:`param_problems`),
    and for topic-hygiene settings that ask for a move the kernel does not have (the particle filter merges only)."""
    s = settings
    problems = param_problems(s.algorithm, s.topics, s.vocab_size, s.kernel_params, seed=s.seed)
    splits_asked = s.topic_hygiene is not False and (s.topic_hygiene_splits or 0) > 0
    if splits_asked and not callable(getattr(kernel_class(s.algorithm), "split_topic", None)):
        problems.append(
            f"TOPICSTREAM_TOPIC_HYGIENE_SPLITS: {s.algorithm} has no split move; leave it 0 (docs/topic-hygiene.md)"
        )
    return problems


# ------------------------------------------------------------------------------------------------------ sizes
def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n / 2**20:.2f} MiB"


def _state_bytes(settings: Settings) -> int:
    """The kernel's state arrays S at these settings (its ``state_bytes``)."""
    s = settings
    return int(kernel_class(s.algorithm).state_bytes(s.topics, s.vocab_size, **s.kernel_params))


def snapshot_bytes(settings: Settings) -> int:
    """Size of one snapshot: the kernel's state arrays, the topics' anchors (at most
    :data:`ANCHOR_SNAPSHOT_BYTES_PER_ENTRY` per word and topic), ≈ :data:`VOCAB_BYTES_PER_SLOT` per vocabulary slot
    and 8 bytes per text of the duplicate window."""
    s = settings
    return _state_bytes(s) + _snapshot_anchor_bytes(s) + VOCAB_BYTES_PER_SLOT * s.vocab_size + 8 * s.duplicate_window


def learner_state_copies(settings: Settings) -> int:
    """How many copies of the kernel state the learner holds at its peak (:data:`LEARNER_STATE_COPIES`, and
    :data:`HYGIENE_STATE_COPIES` more with topic hygiene on: by the setting, else the kernel's default)."""
    hygiene = settings.topic_hygiene
    on = hygiene if hygiene is not None else kernel_class(settings.algorithm).hygiene_defaults is not None
    return LEARNER_STATE_COPIES + (HYGIENE_STATE_COPIES if on else 0)


def _runtime_bytes(settings: Settings) -> int:
    return PROCESS_BYTES + KERNEL_CODE_BYTES.get(settings.algorithm, 0) + VOCAB_BYTES_PER_SLOT * settings.vocab_size


def learner_peak_bytes(settings: Settings) -> int:
    """The learner's memory while it describes and writes a snapshot, its peak: :func:`learner_state_copies` × the
    kernel state S, the topics' anchors (4 B·W·K), the vocabulary (48 B·W) and the runtime (:data:`PROCESS_BYTES`,
    and the kernel's code)."""
    s = settings
    return learner_state_copies(s) * _state_bytes(s) + _anchor_bytes(s) + _runtime_bytes(s)


def _anchor_bytes(settings: Settings) -> int:
    """The learner's topic anchors: :data:`ANCHOR_BYTES_PER_ENTRY` per word and topic."""
    return ANCHOR_BYTES_PER_ENTRY * settings.vocab_size * settings.topics


def _snapshot_anchor_bytes(settings: Settings) -> int:
    """A snapshot's topic anchors, at most: :data:`ANCHOR_SNAPSHOT_BYTES_PER_ENTRY` per word and topic."""
    return ANCHOR_SNAPSHOT_BYTES_PER_ENTRY * settings.vocab_size * settings.topics


def replica_peak_bytes(settings: Settings) -> int:
    """A replica's memory while it loads a new snapshot, its peak: :data:`REPLICA_STATE_COPIES` × S, the
    snapshot's anchors twice, the vocabulary and the runtime."""
    return (
        REPLICA_STATE_COPIES * _state_bytes(settings) + 2 * _snapshot_anchor_bytes(settings) + _runtime_bytes(settings)
    )


def _cgroup_free_bytes(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Memory left under this container's cgroup limit (v2, then v1); ``None`` without a limit."""
    for limit_file, usage_file in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        try:
            limit = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # v1 reports "no limit" as a huge number, v2 as "max"
            return max(0, int(limit) - usage)
        return None
    return None


def available_memory_bytes() -> int:
    """Memory this process can have in all: what it holds now (its runtime, counted in :data:`PROCESS_BYTES`)
    plus what the machine still has available (psutil), capped by what its container's limit leaves."""
    import psutil

    free = int(psutil.virtual_memory().available)
    cgroup = _cgroup_free_bytes()
    held = int(psutil.Process().memory_info().rss)
    return held + (free if cgroup is None else min(free, cgroup))


def size_problems(
    settings: Settings, memory_bytes: int | None = None, redis_max_bytes: int = REDIS_MAX_BULK_BYTES
) -> list[str]:
    """Refuse a W × K whose learner would not fit ``memory_bytes`` (default: :func:`available_memory_bytes`) or
    whose snapshot would not fit one Redis value of ``redis_max_bytes``; one line each, formula and numbers in it.
    """
    s = settings
    state = _state_bytes(s)
    vocab = VOCAB_BYTES_PER_SLOT * s.vocab_size
    shape = f"W = {s.vocab_size:,}, K = {s.topics:,}"
    problems = []
    snap = snapshot_bytes(s)
    if snap > redis_max_bytes:
        problems.append(
            f"TOPICSTREAM_VOCAB_SIZE × TOPICSTREAM_TOPICS: a {s.algorithm} snapshot at {shape} is "
            f"{_mb(state)} of state + {ANCHOR_SNAPSHOT_BYTES_PER_ENTRY} B × W × K of topic anchors + "
            f"{VOCAB_BYTES_PER_SLOT} B × W of vocabulary = {_mb(snap)}, more than the "
            f"{_mb(redis_max_bytes)} Redis stores in one value (proto-max-bulk-len); lower W or K"
        )
    need = learner_peak_bytes(s)
    free = available_memory_bytes() if memory_bytes is None else memory_bytes
    if need > free:
        copies, runtime = learner_state_copies(s), _runtime_bytes(s) - vocab
        terms = f"{copies} × {_mb(state)} + {_mb(_anchor_bytes(s))} + {_mb(vocab)} + {_mb(runtime)}"
        problems.append(
            f"TOPICSTREAM_VOCAB_SIZE × TOPICSTREAM_TOPICS: while writing a snapshot the learner needs {copies} × "
            f"state + {ANCHOR_BYTES_PER_ENTRY} B × W × K + {VOCAB_BYTES_PER_SLOT} B × W + runtime = {terms} = "
            f"{_mb(need)} at {shape}, and {_mb(free)} is available; lower W or K, or give it more memory"
        )
    return problems


# ------------------------------------------------------------------------------------------------ restore plan
def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str | bool) or value is None else repr(value)


@dataclass
class RestorePlan:
    """What restoring a snapshot under the current settings does with each setting that differs.

    ``kernel`` and ``vocabulary`` hold the new values to apply; ``applied`` says so in one line each (log them);
    ``refused`` holds one line per setting that cannot change on a restored model, with its remedy. Restore only
    when ``refused`` is empty, then call :meth:`apply_to`.
    """

    kernel: dict[str, Any] = field(default_factory=dict)
    vocabulary: dict[str, Any] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused

    def apply_to(self, model: TopicModel, vocab: Vocabulary) -> None:
        """Give the restored ``model`` and ``vocab`` the settings' values (``ValueError`` if anything was refused)."""
        if self.refused:
            raise ValueError("\n".join(self.refused))
        if self.kernel:
            model.set_params(**self.kernel)
        if "admit_count" in self.vocabulary:
            vocab.admit_count = float(self.vocabulary["admit_count"])


def restore_plan(settings: Settings, snapshot_payload: Mapping[str, Any]) -> RestorePlan:
    """Compare the snapshot's algorithm, K, W, seed, kernel settings and ``admit_count`` with ``settings``.

    A difference the kernel can take on a restored model (anything outside its ``restore_fixed``, each kernel
    says why) and a new ``TOPICSTREAM_VOCAB_ADMIT_COUNT`` (it only gates words admitted from now on) are applied;
    the rest are refused, naming the setting, the snapshot's value, the settings' value and the remedy. Call it
    after :func:`kernel_param_problems` found nothing.
    """
    s = settings
    plan = RestorePlan()
    kstate = snapshot_payload["kernel"]
    where = f"the snapshot under Redis prefix {s.redis_prefix!r}"
    new_model = "use another TOPICSTREAM_REDIS_PREFIX to start a new model"

    def refuse(setting: str, old: Any, new: str, back: str) -> None:
        plan.refused.append(
            f"{setting}: {where} has {_show(old)}, the settings say {new}; "
            f"a restored model cannot change it: {back}, or {new_model}"
        )

    if kstate["algorithm"] != s.algorithm:
        old = kstate["algorithm"]
        refuse("TOPICSTREAM_ALGORITHM", old, _show(s.algorithm), f"set TOPICSTREAM_ALGORITHM={old} again")
        return plan
    cls = kernel_class(s.algorithm)
    try:
        old_params = cls.params_with_defaults(**cls.params_from_state(kstate["params"]))
    except (TypeError, ValueError) as e:
        plan.refused.append(
            f"TOPICSTREAM_ALGORITHM: {where} holds a {s.algorithm} model this version cannot read ({e})"
        )
        return plan
    new_params = cls.params_with_defaults(n_topics=s.topics, n_words=s.vocab_size, seed=s.seed, **s.kernel_params)
    for name, new in new_params.items():
        old = old_params[name]
        if old == new:
            continue
        setting = BASE_SETTINGS.get(name, "TOPICSTREAM_KERNEL_PARAMS")
        label = setting if name in BASE_SETTINGS else f"{setting} {name}"
        if name in cls.restore_fixed:
            if name in BASE_SETTINGS:
                back = f"set {setting}={old} again"
            else:
                back = f"set {json.dumps({name: old})} in {setting} again"
            explicit = name in BASE_SETTINGS or name in s.kernel_params
            refuse(label, old, _show(new) + ("" if explicit else " (the default)"), back)
        else:
            plan.kernel[name] = new
            plan.applied.append(f"{label}: {_show(old)} in {where}, {_show(new)} now: applied to the restored model")
    old_admit = snapshot_payload["vocabulary"]["params"]["admit_count"]
    if float(old_admit) != float(s.vocab_admit_count):
        plan.vocabulary["admit_count"] = float(s.vocab_admit_count)
        plan.applied.append(
            f"TOPICSTREAM_VOCAB_ADMIT_COUNT: {old_admit} in {where}, {s.vocab_admit_count} now: applied to words "
            "admitted from now on"
        )
    return plan
