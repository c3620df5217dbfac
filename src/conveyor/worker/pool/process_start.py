"""The cyclic garbage collector in a process the `conveyor worker` command owns.

Starting a worker allocates a hundred thousand objects or so (modules, classes,
functions: the app, Conveyor, a backend's driver) and frees almost none, so every
collection during the start walks a growing heap and finds nothing (a share of the
start's CPU: docs/performance.md). And once the worker runs, a collection of an older
generation walks all of it again, inside a claim's path (a pause in the pickup latency's tail).

Then each job allocates a few dozen tracked objects (its row's `Job`, its context,
its task and coroutines, its settlement; more for a sync handler's hand-off to a
thread), and a worker holds up to `concurrency` of them at once. At CPython's
default threshold (a young collection every 700 allocations) a busy worker collects
every few jobs, finds most of the in-flight ones alive, promotes them and scans them
again in the older generations: collector time per job that the young threshold
below cuts to a fraction (figures: docs/performance.md).

So a `conveyor worker` process starts with the collector paused; then it freezes
what the start built (`gc.freeze()`: moved to a generation that is never collected,
as the gc documentation advises before a fork), raises the thresholds so that most
jobs are over before a collection looks at them, and resumes collecting. Garbage
cycles are still freed, a little later; what a collection holds at most (the young
generation's objects) stays a few megabytes. A pool freezes before forking its first
children, so that no child's collection writes to the pages it shares with the
supervisor.

Only for processes the `conveyor` command owns: an application that runs a
`Worker` itself keeps its collector as it set it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 20_000  # allocations between young collections (CPython: 700)
MIDDLE_THRESHOLD = 20  # young collections per middle one (CPython: 10)


def pause_collection() -> None:
    """From here until `started()`: nothing this start allocates is garbage yet."""
    gc.disable()


def started() -> None:
    """The start is over: freeze what it built, raise the thresholds (keeping any
    higher ones the app set), and collect from now on."""
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), max(middle, MIDDLE_THRESHOLD), old)
    gc.enable()


@contextmanager
def starting() -> Iterator[None]:
    """The collector paused for the block, then `started()` (also when it raises)."""
    pause_collection()
    try:
        yield
    finally:
        started()
