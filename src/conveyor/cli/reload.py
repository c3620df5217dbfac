"""`conveyor worker --reload`: for development, run the worker in a child process and
start a new one whenever a Python file under the watched folders changes.

The child is the same command line run again (so `manage.py conveyor worker` and
`flask conveyor worker` reload as well as `conveyor worker`), told by an environment
variable that it is the child. A change stops it the way a deploy does: SIGTERM, its
grace period to drain, then a second SIGTERM (running jobs go back to their queue
without using an attempt). Watching is watchfiles' (Rust notify, with polling where
the platform needs it).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from conveyor.cli.exits import USAGE, CliError

log = logging.getLogger("conveyor.cli")
CHILD_ENV = "CONVEYOR_RELOAD_CHILD"
_KILL_AFTER_COLD_STOP = 10.0  # seconds a cold-stopped child gets before SIGKILL


def is_reload_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


def this_command() -> list[str]:
    """The command line this process was started with, to start it again: `-m`
    included when the package was run as a module (as Django's autoreloader does)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        name = spec.name.removesuffix(".__main__")
        return [sys.executable, "-m", name, *sys.argv[1:]]
    return [sys.executable, *sys.argv]


def run_with_reload(folders: Sequence[Path], grace: float, command: list[str] | None = None) -> int:
    """Run `command` (default: this one) until SIGTERM/SIGINT, restarting it when a
    `.py` file under `folders` changes. Returns the last child's exit code."""
    try:
        import watchfiles  # noqa: F401 - checked here, used in _wait_for_change
    except ImportError as exc:
        raise CliError(
            f"--reload needs watchfiles: pip install 'conveyor[reload]' ({exc})", USAGE
        ) from None
    command = command or this_command()
    env = {**os.environ, CHILD_ENV: "1"}
    stopping = threading.Event()
    signals = 0
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal signals
        signals += 1
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)  # first: drain; second: cold stop, as without --reload

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    logging.getLogger("watchfiles").setLevel(logging.WARNING)  # we say what changed
    watched = [str(f.resolve()) for f in folders]
    log.info("reload: watching %s for changes to .py files", ", ".join(watched))
    try:
        while not stopping.is_set():
            # Its own session: a terminal's Ctrl-C reaches this process only, which
            # passes it on once (twice would be a cold stop).
            child = subprocess.Popen(command, env=env, start_new_session=True)
            changed = _wait_for_change(watched, child, stopping)
            if changed:
                log.info("reload: %s changed; restarting the worker", changed)
                _stop(child, grace)
        assert child is not None
        return child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()


def _wait_for_change(
    folders: list[str], child: subprocess.Popen[bytes], stopping: threading.Event
) -> str | None:
    """Block until a Python file changes (its path) or we are told to stop (None). A
    child that exits on its own (an import error, say) is reported and waits for the
    fix, as a development server does."""
    import watchfiles as wf

    reported = False
    for changes in wf.watch(
        *folders,
        watch_filter=wf.PythonFilter(),
        stop_event=stopping,
        debounce=300,
        rust_timeout=300,
        yield_on_timeout=True,
        raise_interrupt=False,
    ):
        if stopping.is_set():
            return None
        if changes:
            return sorted(path for _, path in changes)[0]
        code = child.poll()
        if code is not None and not reported:
            log.warning("reload: the worker exited with %d; waiting for a change", code)
            reported = True
    return None


def _stop(child: subprocess.Popen[bytes], grace: float) -> None:
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(grace + 5.0)
        return
    except subprocess.TimeoutExpired:
        pass
    child.send_signal(signal.SIGTERM)  # cold stop: running jobs go back at once
    try:
        child.wait(_KILL_AFTER_COLD_STOP)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
