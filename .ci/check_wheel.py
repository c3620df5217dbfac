"""Every file of the package in the source tree is in the wheel (the SQL, the Lua, the
dashboard's templates and static files, py.typed)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(wheel: str) -> int:
    tracked = subprocess.run(
        ["git", "ls-files", "src/conveyor"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    want = {path.removeprefix("src/") for path in tracked}
    have = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("conveyor/")}
    missing = sorted(want - have)
    if missing:
        print(
            f"{Path(wheel).name} lacks {len(missing)} file(s) of the package:",
            *missing,
            sep="\n  ",
            file=sys.stderr,
        )
        return 1
    print(f"{Path(wheel).name}: all {len(want)} files of the package")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
