"""The garbage collector's settings in a process that only runs a worker.

Every job allocates a few dozen objects that the collector tracks (its row's `Job`,
its context, its task and coroutines, its settlement; more for a sync handler's
hand-off to a thread), and a worker holds up to `concurrency` of them at once. At
CPython's default threshold (a young collection every 700 allocations) a busy
worker collects every few jobs, finds most of the in-flight ones alive, promotes them
and scans them again in the older generations; and each full collection walks every
object the app's import made, which all live as long as the process. Measured over
20,000 no-op jobs at `-c 200`: 7-8 µs of collector time per async job and 21-26 µs
per sync one; with the settings below, 1-2 µs for both.

So, once the app is loaded: `gc.freeze()` moves what exists then (modules, the app,
its tasks) out of the collector's sight, and the young threshold is raised so that
most jobs are over before a collection looks at them. Garbage cycles are still
freed, a little later; what a collection holds at most (the young generation's
objects) stays a few megabytes.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000  # allocations between young collections (CPython: 700)
MIDDLE_THRESHOLD = 20  # young collections per middle one (CPython: 10)


def tune_gc_for_worker() -> None:
    """Call once the app is loaded, in a process whose work is the worker's (the
    `conveyor worker` command, a pool child), not in a process that embeds one.
    Settings higher than these (the app's own) are kept."""
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), max(middle, MIDDLE_THRESHOLD), old)
