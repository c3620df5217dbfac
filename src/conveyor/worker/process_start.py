"""The cyclic garbage collector around a worker process's start.

Starting a worker allocates a hundred thousand objects or so (modules, classes,
functions: the app, Conveyor, a backend's driver) and frees almost none, so every
collection during the start walks a growing heap and finds nothing: about 7 % of
the start's CPU. And once the worker runs, a collection of an older generation walks
all of it again, inside a claim's path (a pause in the pickup latency's tail).

So a `conveyor worker` process starts with the collector paused, and then freezes
what the start built (`gc.freeze()`: moved to a generation that is never collected,
as the gc documentation advises before a fork) and resumes collecting: the jobs'
own garbage is collected as before, over a heap of the jobs' size. A pool freezes
before forking its first children, so that no child's collection writes to the
pages it shares with the supervisor.

Only for processes the `conveyor` command owns: an application that runs a
`Worker` itself keeps its collector as it set it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def pause_collection() -> None:
    """From here until `started()`: nothing this start allocates is garbage yet."""
    gc.disable()


def started() -> None:
    """The start is over: freeze what it built, and collect from now on."""
    gc.freeze()
    gc.enable()


@contextmanager
def starting() -> Iterator[None]:
    """The collector paused for the block, then `started()` (also when it raises)."""
    pause_collection()
    try:
        yield
    finally:
        started()
