"""How fast a worker pool starts working, and how fast a killed child is replaced.

    python benchmarks/pool_start.py                    # embedded SQLite, 3 rounds
    python benchmarks/pool_start.py --url postgresql://postgres@127.0.0.1/test --repeat 5

Each round enqueues jobs that take 50 ms each (`hang`), starts
`conveyor worker bench_app:app -p 2 -c 10`, and reads from the jobs' own records:
* spawn to first job: from the command's start to the first job any child started;
* both children working: to the first job of the slower child;
* replacement: one child is killed with SIGKILL while both work; the time from the
  kill to the first job a new child started.
The same is measured for one worker process without a pool (`-p 0`), whose start is
the floor a pool child pays too. Figures are min/median/max over the rounds.

A start loads Conveyor from cached bytecode when it was installed from a wheel (pip
compiles it); a checkout run with PYTHONDONTWRITEBYTECODE=1 (or installed without
compiling: uv's default) compiles every module again at every start, about 40 % more
CPU. The report says which was measured; `--compile` caches it first, as an install does.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def pool_children(pid: int) -> list[int]:
    """The worker children of supervisor `pid` (not multiprocessing's resource tracker)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    found = []
    for child in map(int, text.split()):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in cmdline:
            found.append(child)
    return found


def start_times(app: object, since: float) -> dict[str, float]:
    """First started_at per worker id, among jobs started after `since`."""
    from conveyor.backends.params import JobFilter
    from conveyor.model.job import JobState

    first: dict[str, float] = {}
    jobs = app.jobs.list(
        JobFilter(states=(JobState.RUNNING, JobState.COMPLETED)),  # type: ignore[attr-defined]
        limit=100_000,
    )
    for job in jobs:
        if job.worker_id and job.started_at and job.started_at >= since:
            first[job.worker_id] = min(first.get(job.worker_id, job.started_at), job.started_at)
    return first


def wait_until(check, timeout: float = 60.0, interval: float = 0.005):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("benchmark condition not met")


def one_round(url: str, processes: int) -> tuple[float, float, float | None]:
    from bench_app import app, hang

    from conveyor.backends.params import JobFilter

    # The last round's backlog (most of its 4,000 jobs never ran) is cancelled, then
    # everything finished is deleted: on a shared server's default schema, rounds
    # would otherwise pile up hundreds of thousands of waiting jobs for the next user.
    app.jobs.purge("bench")
    app.jobs.delete(JobFilter(), limit=10_000_000)
    app.enqueue_many([hang.message(0.05) for _ in range(4000)])
    # Appended to, not replaced: PYTHONPATH=<another checkout>/src measures that code.
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CONVEYOR_URL": url, "PYTHONPATH": path}
    args = [sys.executable, "-m", "conveyor", "worker", "bench_app:app", "-q", "bench", "-c", "10"]
    if processes:
        args += ["-p", str(processes)]
    t0 = time.time()
    proc = subprocess.Popen(
        args,
        env=env,
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wanted = max(processes, 1)
        firsts = wait_until(lambda: (s := start_times(app, t0)) and len(s) >= wanted and s)
        first, both = min(firsts.values()) - t0, max(firsts.values()) - t0
        replaced = None
        if processes:
            victim = pool_children(proc.pid)[0]
            known = set(firsts)
            killed_at = time.time()
            os.kill(victim, signal.SIGKILL)
            new = wait_until(
                lambda: {w: t for w, t in start_times(app, killed_at).items() if w not in known}
            )
            replaced = min(new.values()) - killed_at
        return first, both, replaced
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def bytecode_cached() -> bool:
    """Whether the workers load Conveyor's code from cached bytecode."""
    import importlib.util

    import conveyor.app

    return os.path.exists(importlib.util.cache_from_source(conveyor.app.__file__))


def compile_bytecode() -> None:
    """Cache the bytecode of what a worker imports: Conveyor, its dependencies, the app."""
    import compileall
    import sysconfig

    import conveyor

    folders = {
        os.path.dirname(conveyor.__file__),
        str(HERE),
        *(sysconfig.get_paths()[name] for name in ("purelib", "platlib")),
    }
    for folder in sorted(folders):
        compileall.compile_dir(folder, quiet=1, workers=1)


def spread(values: list[float]) -> str:
    return (
        f"{min(values) * 1000:7.0f} {statistics.median(values) * 1000:7.0f} "
        f"{max(values) * 1000:7.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="cache the bytecode of Conveyor, its dependencies and the app first",
    )
    args = parser.parse_args()
    if args.compile:
        compile_bytecode()
    url = args.url or f"sqlite:///{tempfile.mkdtemp(prefix='conveyor-pool-')}/bench.db"
    os.environ["CONVEYOR_URL"] = url
    from bench_app import app

    from conveyor.backends.params import JobFilter

    app.jobs.count()  # create the schema outside the timings
    rows: dict[str, list[float]] = {"single": [], "first": [], "both": [], "replaced": []}
    for _ in range(args.repeat):
        single, _, _ = one_round(url, 0)
        rows["single"].append(single)
        first, both, replaced = one_round(url, 2)
        rows["first"].append(first)
        rows["both"].append(both)
        assert replaced is not None
        rows["replaced"].append(replaced)
    print(
        f"{url.split(':')[0]}, {os.cpu_count()} cores, {args.repeat} rounds, bytecode "
        f"{'cached' if bytecode_cached() else 'NOT cached (each start compiles)'}: "
        "min median max"
    )
    print(f"  one process (-p 0): start to first job      {spread(rows['single'])}")
    print(f"  pool -p 2: start to first job               {spread(rows['first'])}")
    print(f"  pool -p 2: start to both children working   {spread(rows['both'])}")
    print(f"  pool -p 2: SIGKILLed child to its successor {spread(rows['replaced'])}")
    app.jobs.purge("bench")  # the workers are gone: nothing is running
    app.jobs.delete(JobFilter(), limit=10_000_000)
    app.close()


if __name__ == "__main__":
    main()
