"""Loads the Lua scripts of `scripts/` by name.

Each script file starts with a header listing its KEYS and ARGV; `_lib.lua` holds
the helpers they share and is put in front of every script body. redis-py's
`register_script` sends a script with EVALSHA and loads it (SCRIPT LOAD) when the
server does not know it, e.g. after a restart.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

SCRIPT_NAMES = (
    "enqueue", "claim", "complete", "fail", "release", "heartbeat", "checkpoint",
    "rescue", "prune", "cancel", "redrive", "delete", "force_state", "put_meta",
)


def _read(name: str) -> str:
    return resources.files(__package__ or "conveyor.backends.redis").joinpath(
        "scripts", f"{name}.lua").read_text(encoding="utf-8")


@cache
def script_source(name: str) -> str:
    """The full text sent to Redis: the shared helpers, then the script."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no Lua script named {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    return _read("_lib") + "\n" + _read(name)


def script_file(name: str) -> str:
    """The script's own file, as written (header included)."""
    return _read(name)
