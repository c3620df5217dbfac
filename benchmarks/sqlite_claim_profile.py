"""SQLite only: a flow-controlled claim against the plain claim, claim by claim in one
process, and the pages each one's commit writes (docs/sqlite.md, "What a flow-controlled
claim costs").

    python benchmarks/sqlite_claim_profile.py --waiting 10000 100000 --repeat 3
    python benchmarks/sqlite_claim_profile.py --waiting 100000 --repeat 1 --pages

Each round fills one database per mode (flow_claims.py's jobs: "plain", and by default
"weighted+fair+rate", 1,000 fairness keys), then claims from them in turn, `--claims`
claims of 50 each, the order of the modes reversed every other claim, so that the load
of a shared machine falls on every mode alike. The claims call the claim (lifecycle.py) directly on
this thread: its CPU time (user + system, the commit's fsync included) and the wall
time, per claimed job, and each round's throughput ratio to the plain claim by each.
`--pages`: the pages each commit wrote, by table or index (read from the WAL's frame
headers; the WAL is not checkpointed during the count).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from flow_claims import LIMITS, MODES, QUEUES, WEIGHTS, fill

from conveyor import Conveyor
from conveyor.backends.claiming import QueuePlan
from conveyor.backends.sqlite.connection import SqliteConnection
from conveyor.backends.sqlite.lifecycle import fetch_jobs


async def filled(path: Path, waiting: int, mode: str, keys: int) -> None:
    app = Conveyor(f"sqlite:///{path}")
    try:
        await fill(app, waiting, mode, keys, 0)
    finally:
        await app.aclose()


def claim(connection: SqliteConnection, plan: QueuePlan, mode: str, batch: int) -> int:
    weighted = mode.startswith("weighted")
    request = plan.request(
        batch, "bench", 60, running={} if weighted else None, rate_limits=LIMITS.get(mode, ())
    )
    return len(fetch_jobs(connection, request))


def pages_by_btree(path: Path, connection: SqliteConnection) -> collections.Counter[str]:
    """Pages each commit in the WAL wrote, summed by table or index name."""
    names = dict(connection.conn.execute("SELECT pageno, name FROM dbstat"))
    data = Path(f"{path}-wal").read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    written: collections.Counter[str] = collections.Counter()
    frame, at = set(), 32
    while at + 24 + page_size <= len(data):
        page, commit_size = struct.unpack(">II", data[at : at + 8])
        frame.add(page)
        if commit_size:  # the commit's last frame: count each page once per commit
            written.update(names.get(p, "(new page)") for p in frame)
            written["(commits)"] += 1
            frame = set()
        at += 24 + page_size
    return written


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiting", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=["plain", "weighted+fair+rate"]
    )
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--synchronous", default="full")
    parser.add_argument("--pages", action="store_true")
    args = parser.parse_args()
    modes = ["plain", *(m for m in args.modes if m != "plain")]
    print(
        f"claims of {args.batch}, {args.claims} per mode and round, synchronous="
        f"{args.synchronous}; per job: thread CPU, wall"
    )
    with tempfile.TemporaryDirectory() as folder:
        for waiting in args.waiting:
            cpu: dict[str, list[float]] = {m: [] for m in modes}
            wall: dict[str, list[float]] = {m: [] for m in modes}
            for round_ in range(args.repeat):
                connections, plans = {}, {}
                for mode in modes:
                    path = Path(folder) / f"{waiting}-{round_}-{mode}.db"
                    asyncio.run(filled(path, waiting, mode, args.keys))
                    connections[mode] = SqliteConnection(str(path), time.time, args.synchronous)
                    if args.pages:
                        connections[mode].conn.execute("PRAGMA wal_autocheckpoint=0")
                    plans[mode] = (
                        QueuePlan(QUEUES, WEIGHTS, slots=args.batch)
                        if mode.startswith("weighted")
                        else QueuePlan(["plain"])
                    )
                spent = {m: [0.0, 0.0, 0] for m in modes}
                for n in range(args.claims):
                    for mode in modes if n % 2 == 0 else modes[::-1]:
                        wall_at, cpu_at = time.perf_counter(), time.thread_time()
                        got = claim(connections[mode], plans[mode], mode, args.batch)
                        spent[mode][0] += time.thread_time() - cpu_at
                        spent[mode][1] += time.perf_counter() - wall_at
                        spent[mode][2] += got
                for mode in modes:
                    assert spent[mode][2] == args.claims * args.batch, (mode, spent[mode])
                    cpu[mode].append(spent[mode][0] / spent[mode][2] * 1e6)
                    wall[mode].append(spent[mode][1] / spent[mode][2] * 1e6)
                    if args.pages and round_ == 0:
                        written = pages_by_btree(
                            Path(folder) / f"{waiting}-0-{mode}.db", connections[mode]
                        )
                        commits = written.pop("(commits)")
                        print(
                            f"  {waiting:>9,} {mode}: pages per commit "
                            f"{sum(written.values()) / commits:.1f}: "
                            + ", ".join(
                                f"{name} {n / commits:.1f}" for name, n in written.most_common()
                            )
                        )
                    connections[mode].close()
            for mode in modes:
                print(
                    f"  {waiting:>9,} {mode:>18}: CPU {_spread(cpu[mode])} µs/job, "
                    f"wall {_spread(wall[mode])} µs/job"
                )
                if mode != "plain":
                    by_cpu = [p / f for p, f in zip(cpu["plain"], cpu[mode], strict=True)]
                    by_wall = [p / f for p, f in zip(wall["plain"], wall[mode], strict=True)]
                    print(
                        f"  {waiting:>9,} {mode} / plain, by round: CPU "
                        f"{', '.join(f'{r:.0%}' for r in by_cpu)}; wall "
                        f"{', '.join(f'{r:.0%}' for r in by_wall)}",
                        flush=True,
                    )


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


if __name__ == "__main__":
    main()
