"""How long a user's test of a task that fails twice then succeeds takes with
conveyor.testing's drain(): a fresh app on a memory backend with a test clock, one
enqueue, a drain that runs the three attempts through the real worker (skipping the
backoffs), and the asserts. The issue asks for under 50 ms.

    .venv/bin/python benchmarks/testing_drain.py [runs]

Prints each figure in milliseconds: the first run (imports warm, thread pools and
the sync facade's loop not yet), then the median and range of the rest.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time

from conveyor import Conveyor, JobState, RetryOptions, current_job
from conveyor.testing import TestClock, drain, use_memory


def one_test() -> float:
    started = time.perf_counter()
    clock = TestClock()
    app = Conveyor("memory://", clock=clock)
    with use_memory(app, clock):

        @app.task(name="flaky", retry=RetryOptions(backoff_base=10))
        def flaky(n: int) -> int:
            if current_job().attempt < 3:
                raise ConnectionError("not yet")
            return n

        handle = flaky.enqueue(7)
        drained = drain(app)
        assert [a.outcome for a in drained.attempts] == [
            JobState.RETRYABLE,
            JobState.RETRYABLE,
            JobState.COMPLETED,
        ]
        assert handle.result() == 7
    app.close()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    logging.getLogger("conveyor").setLevel(logging.ERROR)  # each retry logs a warning
    times = [one_test() for _ in range(runs)]
    rest = times[1:]
    print(
        f"first run {times[0]:.1f} ms; then {len(rest)} runs: median "
        f"{statistics.median(rest):.1f} ms, min {min(rest):.1f}, max {max(rest):.1f}"
    )


if __name__ == "__main__":
    main()
