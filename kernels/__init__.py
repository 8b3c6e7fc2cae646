"""Pure numerical kernels for streaming topic models (no Kafka, no Redis, no pydantic).

>>> from kernels import SCVB0
>>> m = SCVB0(n_topics=3, n_words=10, seed=0)
>>> m.partial_fit([([0, 1, 2], [2, 1, 1]), ([7, 8], [1, 3])]).topic_word().shape
(3, 10)
"""

from ._base import TopicModel
from ._batch import Batch, as_batch
from ._schedule import StepSize
from .ohdp import OnlineHDP
from .particle_filter import ParticleFilterLDA
from .scvb0 import SCVB0

#: Every kernel by its ``algorithm`` name, as chosen by ``TOPICSTREAM_ALGORITHM``.
ALGORITHMS: dict[str, type[TopicModel]] = {
    SCVB0.algorithm: SCVB0,
    OnlineHDP.algorithm: OnlineHDP,
    ParticleFilterLDA.algorithm: ParticleFilterLDA,
}

__all__ = [
    "ALGORITHMS",
    "SCVB0",
    "Batch",
    "OnlineHDP",
    "ParticleFilterLDA",
    "StepSize",
    "TopicModel",
    "as_batch",
]
