"""The kernels by ``algorithm`` name, without importing them (and so without importing numba).

Validating ``TOPICSTREAM_ALGORITHM`` must not cost numba's start-up (seconds on a cold cache): commands such as
``topicstream topics`` never run a kernel. This module names each kernel's module and class; :func:`kernel_class`
imports one on demand. :data:`kernels.ALGORITHMS` (the classes themselves) is built from it, and
``tests/test_settings.py`` checks that the two agree and that ``service.settings`` imports no numba.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._base import TopicModel

__all__ = ["ALGORITHM_NAMES", "KERNEL_LOCATIONS", "kernel_class"]

#: ``algorithm`` name -> (module, class name) of the kernel.
KERNEL_LOCATIONS: dict[str, tuple[str, str]] = {
    "scvb0": ("kernels.scvb0", "SCVB0"),
    "ohdp": ("kernels.ohdp", "OnlineHDP"),
    "pf": ("kernels.particle_filter", "ParticleFilterLDA"),
}

#: The names ``TOPICSTREAM_ALGORITHM`` accepts, in a stable order.
ALGORITHM_NAMES: tuple[str, ...] = tuple(KERNEL_LOCATIONS)


def kernel_class(algorithm: str) -> type[TopicModel]:
    """The kernel class for ``algorithm`` (imports its module, and numba, on first use).

    Raises ``KeyError`` naming the valid algorithms for an unknown name.
    """
    try:
        module, name = KERNEL_LOCATIONS[algorithm]
    except KeyError:
        raise KeyError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHM_NAMES)}") from None
    cls: type[TopicModel] = getattr(importlib.import_module(module), name)
    return cls
