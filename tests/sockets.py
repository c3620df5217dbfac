"""The TCP sockets of local processes, read from /proc: how tests kill exactly one
process's connections on a server that other tests (and test workers) share."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def tcp_ports_of(pids: Iterable[int]) -> set[int]:
    """Local TCP ports of the sockets the processes `pids` hold open."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
