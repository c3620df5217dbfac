"""Settings of a worker pool, and the sizes and memory readings they are checked against."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PoolConfig:
    processes: int = 2
    max_tasks_per_child: int | None = None  # jobs a child claims before it is replaced
    max_memory_per_child: int | None = None  # resident bytes past which it is replaced
    # After the grace period the children stop cold by themselves; one that has not
    # exited this much later (a handler holding the GIL) is killed, its jobs returned.
    cold_stop_timeout: float = 10.0
    # A child that dies this soon after it started is restarted with a growing delay,
    # so an app that crashes at import does not spin the CPU.
    crash_loop_window: float = 5.0
    log_level: str = "INFO"
    log_format: str = "text"  # or "json" (conveyor.observe.logs), as the supervisor's own
    # Children count metrics into $PROMETHEUS_MULTIPROC_DIR (set by the supervisor, which
    # serves them on one port); the supervisor marks each exited child dead there.
    metrics: bool = False

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError("a pool needs at least one process")
        if self.max_tasks_per_child is not None and self.max_tasks_per_child < 1:
            raise ValueError("max_tasks_per_child must be at least 1")
        if self.max_memory_per_child is not None and self.max_memory_per_child < 1:
            raise ValueError("max_memory_per_child must be positive")


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1000**3,
    "gib": 1 << 30,
}


def parse_size(text: str) -> int:
    """`512MiB`, `2GB`, `1.5g`, `300000000` -> bytes (k/m/g alone are binary units)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a size: use bytes or a unit, e.g. 512MiB or 2GB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def rss_bytes() -> int:
    """Resident memory of this process now (Linux: /proc/self/statm), else its peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
