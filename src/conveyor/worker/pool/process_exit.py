"""Leaving the process once its worker has stopped.

A Python process ends only after its non-daemon threads have: interpreter shutdown
joins them, and a thread cannot be stopped from outside. A sync handler still running
in a job thread (its job returned by a cold stop, or abandoned at its hard time
limit), or a non-daemon thread that a handler started and never ended, would keep the
process alive after the worker logged that it stopped, forever perhaps. By then the
worker has written every outcome and owes nothing more, so the process says what it
leaves behind and ends with `os._exit`: it joins no thread, but it also runs no atexit
handler and flushes no buffer, so the caller flushes its logs first.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("conveyor.worker")

# How long threads get to end by themselves: an idle job thread ends moments after the
# thread pool's shutdown, and a handler's helper thread may be finishing its work.
SETTLE_TIME = 1.0


def threads_left_running(wait: float = SETTLE_TIME) -> list[threading.Thread]:
    """The non-daemon threads, other than this one and the main one, still alive
    after waiting up to `wait` seconds for them to end."""
    exempt = {threading.current_thread(), threading.main_thread()}
    threads = [t for t in threading.enumerate() if not t.daemon and t not in exempt]
    deadline = time.monotonic() + wait
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def report_left_running(threads: list[threading.Thread]) -> None:
    """One log line naming the threads the process exits without waiting for."""
    names = ", ".join(sorted(t.name for t in threads))
    log.warning(
        "exiting with %d thread(s) left running: %s (a handler still busy, or a "
        "thread a handler started and did not end)",
        len(threads),
        names,
    )
