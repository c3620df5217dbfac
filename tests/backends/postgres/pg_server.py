"""Start a private PostgreSQL (initdb + pg_ctl) in a temp folder, for tests that
stop or restart the server. Runs as the `postgres` user when we are root,
because initdb refuses root."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateServer:
    bindir: Path
    root: Path
    port: int

    @classmethod
    def find(cls) -> PrivateServer | None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            return None
        # Not under pytest's tmp folder: as root that one is closed to the postgres user.
        root = Path(tempfile.mkdtemp(prefix="conveyor-pg-"))
        return cls(Path(found[-1]).parent, root, free_port())

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def user(self) -> str:
        return "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self._run(
            "initdb",
            "-D",
            str(self.datadir),
            "-A",
            "trust",
            "-U",
            self.user,
            "--no-sync",
            "-E",
            "UTF8",
        )

    def start(self) -> None:
        # fsync off: a test server, never a durability claim.
        self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-w",
            "-t",
            "30",
            "-l",
            str(self.root / "log"),
            "-o",
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )

    def stop(self, mode: str = "fast", missing_ok: bool = False) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.datadir), "-w", "-m", mode, "stop")
        except RuntimeError:
            if not missing_ok:
                raise

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
