"""Memory of a running process, read from ``/proc`` (Linux), for the benchmarks."""

from __future__ import annotations

import contextlib
from pathlib import Path


def vm_mb(pid: int, field: str = "VmHWM") -> float:
    """``VmHWM`` (peak resident set) or ``VmRSS`` (current) of a process, in MB; NaN where ``/proc`` lacks it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    """Set this process's ``VmHWM`` back to its current RSS (``/proc/self/clear_refs``; no-op where refused)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
