"""Pure numerical kernels for streaming topic models (no Kafka, no Redis, no pydantic): SCVB0, online HDP and
the reservoir particle filter behind one base class, their numba code, the topic moves of topic hygiene, and
``kernels.registry``, the algorithm names without numba.

The kernel classes (and :data:`ALGORITHMS`) are imported on first access, so that ``kernels.registry`` — the
algorithm names — can be read without importing numba.

>>> from kernels import SCVB0
>>> m = SCVB0(n_topics=3, n_words=10, seed=0)
>>> m.partial_fit([([0, 1, 2], [2, 1, 1]), ([7, 8], [1, 3])]).topic_word().shape
(3, 10)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._base import TopicModel
from ._batch import Batch, as_batch
from ._numba_cache import ensure_numba_cache
from ._schedule import StepSize
from .background import background_topic
from .registry import ALGORITHM_NAMES, kernel_class

# Before any module here compiles with cache=True (those above do not; the kernel classes load on first access).
ensure_numba_cache(Path(__file__).parent)

if TYPE_CHECKING:
    from .ohdp import OnlineHDP
    from .particle_filter import ParticleFilterLDA
    from .scvb0 import SCVB0

    #: Every kernel by its ``algorithm`` name, as chosen by ``TOPICSTREAM_ALGORITHM``.
    ALGORITHMS: dict[str, type[TopicModel]]

_LAZY = {"SCVB0": ".scvb0", "OnlineHDP": ".ohdp", "ParticleFilterLDA": ".particle_filter"}


def __getattr__(name: str) -> Any:
    """Import a kernel module (and numba) only when one of its names is used."""
    if name == "ALGORITHMS":
        value: Any = {algorithm: kernel_class(algorithm) for algorithm in ALGORITHM_NAMES}
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "ALGORITHMS",
    "SCVB0",
    "Batch",
    "OnlineHDP",
    "ParticleFilterLDA",
    "StepSize",
    "TopicModel",
    "as_batch",
    "background_topic",
]
