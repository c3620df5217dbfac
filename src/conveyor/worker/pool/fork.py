"""A pool's first children, forked at the command's start: `conveyor worker APP -p N`.

A spawned child pays for a fresh interpreter and for importing Conveyor before it
loads the app, and the supervisor could only start it after its own imports: the two
starts ran one after the other (docs/performance.md). Forked right after the command
line is parsed, the children start from the supervisor's imports and load the app alongside it.

What spawn protects against is absent at that point, and is checked rather than
assumed: the process has one thread (`/proc/self/task`, which also counts threads a C
library started), so no lock can be held by a thread that does not exist in the child;
the user's app is not imported, so none of its connections or threads exist; Conveyor
has opened no backend yet. When any of that cannot be shown (not Linux, a second
thread), the supervisor spawns its children as before. Each child closes the
supervisor's ends of every pipe it inherited, so its own pipe still ends when the
supervisor dies. Later children (replacements) are spawned: by then the supervisor has
threads and connections.

The children are gated (`child.py`): they claim nothing before the supervisor,
which loads the app meanwhile, has adopted them and sends GO. A stop signal before the
supervisor's handlers exist is kept and handled as soon as they do; a second one gives
the start up (KeyboardInterrupt), which kills the gated children: they hold nothing.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING

from conveyor.worker.config import WorkerConfig
from conveyor.worker.pool.child import STOP_SIGNALS, child_main, child_settings, child_worker_id
from conveyor.worker.pool.config import PoolConfig

if TYPE_CHECKING:
    from conveyor.app import Conveyor


@dataclass(eq=False)
class ForkedChild:
    slot: int
    worker_id: str
    process: BaseProcess
    conn: Connection

    @property
    def pid(self) -> int:
        return self.process.pid or 0


@dataclass(eq=False)
class ForkedStart:
    """The forked children until the supervisor adopts them, and the stop signals that
    came before it could handle them."""

    children: list[ForkedChild]
    signals: list[int] = field(default_factory=list)
    adopted: bool = False
    _previous: dict[int, object] = field(default_factory=dict)

    def adopt(self) -> list[ForkedChild]:
        self.adopted = True
        return self.children

    def take_signals(self) -> list[int]:
        """Signals kept so far; called once the supervisor's own handlers are in place."""
        taken, self.signals = self.signals, []
        return taken

    def abandon(self) -> None:
        """The supervisor gave its start up before adopting the children: they are
        gated, hold no job and no worker record, so they are killed."""
        if self.adopted:
            return
        for child in self.children:
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.process.join(10)
            child.conn.close()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def _keep(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        if len(self.signals) >= 2:
            raise KeyboardInterrupt  # twice before the pool runs: give the start up


def thread_free() -> bool:
    """True when this process provably has one thread (Linux: /proc/self/task)."""
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def fork_children(
    app_path: str, pool: PoolConfig, settings: Callable[[Conveyor], WorkerConfig]
) -> ForkedStart | None:
    """Fork the pool's children now, or None (spawn them later) when it is not safe.

    Call before the app is imported or any backend opened. `settings` gives the
    worker settings from the app; each child calls it on the app it loaded itself.
    """
    if not thread_free() or "fork" not in multiprocessing.get_all_start_methods():
        return None
    context = multiprocessing.get_context("fork")
    # What the command imported is shared with the children page by page; frozen, no
    # child's collection writes to those pages (process_start.py).
    gc.freeze()
    start = ForkedStart([])
    start._previous = {signum: signal.signal(signum, start._keep) for signum in STOP_SIGNALS}
    try:
        _fork_each(start, context, app_path, pool, settings)
    except BaseException:
        start.abandon()  # a fork that failed (EAGAIN) or a second signal meanwhile
        raise
    return start


def _fork_each(
    start: ForkedStart,
    context: ForkContext,
    app_path: str,
    pool: PoolConfig,
    settings: Callable[[Conveyor], WorkerConfig],
) -> None:
    ours_so_far: list[Connection] = []
    for slot in range(pool.processes):
        worker_id = child_worker_id(slot, slot + 1)
        ours, theirs = context.Pipe(duplex=True)
        ours_so_far.append(ours)
        process = context.Process(
            target=_forked_main,
            name=f"conveyor-child-{slot}",
            args=(app_path, settings, pool, slot, worker_id, theirs, tuple(ours_so_far)),
        )
        # As for a spawned child (pool.py): the child starts with both signals blocked,
        # and ignores them before it unblocks them.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        theirs.close()
        start.children.append(ForkedChild(slot, worker_id, process, ours))


def _forked_main(
    app_path: str,
    settings: Callable[[Conveyor], WorkerConfig],
    pool: PoolConfig,
    slot: int,
    worker_id: str,
    conn: Connection,
    supervisor_ends: tuple[Connection, ...],
) -> None:
    for end in supervisor_ends:  # else the pipes of this child and the earlier ones
        end.close()  # would not end when the supervisor dies
    child_main(
        app_path,
        lambda app: child_settings(settings(app), pool, slot),
        worker_id,
        conn,
        pool.max_memory_per_child,
        pool.log_level,
        pool.log_format,
        pool.metrics,
        gated=True,
    )
