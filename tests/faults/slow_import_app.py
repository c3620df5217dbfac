"""faults_app, imported slowly: every process that imports it (a pool's supervisor and
its children alike) appends its pid to $IMPORT_MARKER, then takes a second longer, for
the test of a stop signal that arrives while the supervisor imports the app."""

from __future__ import annotations

import os
import time
from pathlib import Path

with Path(os.environ["IMPORT_MARKER"]).open("a") as out:
    out.write(f"{os.getpid()}\n")
time.sleep(1.0)  # widens the window the test's signal lands in; not a synchronisation

from faults_app import app  # noqa: E402

__all__ = ["app"]
