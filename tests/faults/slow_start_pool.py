"""`conveyor worker` whose every child start lasts a second longer, for the test of a
stop signal that arrives while the supervisor starts a child.

The supervisor masks SIGTERM/SIGINT in its main thread while it starts a child, so a
signal sent to the process group then goes to one of its other threads (here an idle
one, as any library may start). That signal must still stop the pool.

    python slow_start_pool.py MARKER_FILE worker <conveyor worker arguments...>
"""

from __future__ import annotations

import sys
import threading
import time
from multiprocessing.context import SpawnProcess
from pathlib import Path

from conveyor.cli.main import main


def run() -> int:
    marker = Path(sys.argv.pop(1))
    original_start = SpawnProcess.start

    def slow_start(self: SpawnProcess) -> None:
        original_start(self)
        with marker.open("a") as out:
            out.write(f"{self.pid}\n")
        time.sleep(1.0)

    # Ignored for mypy: patched for spawn processes only
    SpawnProcess.start = slow_start  # type: ignore[assignment, method-assign]
    threading.Thread(target=threading.Event().wait, name="idle", daemon=True).start()
    return main(sys.argv[1:])


if __name__ == "__main__":  # the children import this file again (spawn): they only import
    raise SystemExit(run())
