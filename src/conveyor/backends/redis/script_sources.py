"""Loads the Lua scripts of `scripts/` by name.

Each script file starts with a header listing its KEYS and ARGV; `_lib.lua` holds
the helpers they share. A script is sent with the helpers it uses (and the ones
those use) in front of its body, not the whole file: EVALSHA runs that prelude on
every call, and each table and closure it builds costs time on every enqueue
(docs/performance.md). redis-py's `register_script` sends a script
with EVALSHA and loads it (SCRIPT LOAD) when the server does not know it, e.g.
after a restart.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

SCRIPT_NAMES = (
    "enqueue",
    "enqueue_bounded",
    "enqueue_dependants",
    "claim",
    "complete",
    "fail",
    "release",
    "heartbeat",
    "checkpoint",
    "find_leases",
    "prune",
    "cancel",
    "cancel_waiting",
    "redrive",
    "delete",
    "force_state",
    "put_record",
    "set_record_if",
    "incr_record",
    "delete_record",
    "index_waiting",
    "expire_results",
    "key_loads",
    "count_by_error",
    "set_key_limit",
)


def _read(name: str) -> str:
    return (
        resources.files(__package__ or "conveyor.backends.redis")
        .joinpath("scripts", f"{name}.lua")
        .read_text(encoding="utf-8")
    )


_DEFINITION = re.compile(r"^local (?:function )?(\w+)")
_WORD = re.compile(r"\b\w+\b")


def lib_definitions() -> list[tuple[str, str]]:
    """`_lib.lua` cut into its top-level definitions: (name, text), in file order.

    A definition starts at a line `local NAME ...` or `local function NAME` at column
    0, together with the comment lines just above it, and runs to the next one.
    """
    definitions: list[tuple[str, list[str]]] = []
    comments: list[str] = []
    for line in _read("_lib").splitlines():
        match = _DEFINITION.match(line)
        if match:
            definitions.append((match.group(1), [*comments, line]))
            comments = []
        elif line.startswith("--") and (
            not definitions or not definitions[-1][1][-1].strip() or comments
        ):
            comments.append(line)  # the comment block above the next definition
        elif definitions:
            definitions[-1][1].extend([*comments, line])
            comments = []
    return [(name, "\n".join(lines)) for name, lines in definitions]


@cache
def script_source(name: str) -> str:
    """The text sent to Redis: the helpers the script needs, then the script."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no Lua script named {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    body = _read(name)
    definitions = lib_definitions()
    needed = set(_WORD.findall(body))
    # Helpers use earlier ones only (Lua locals), so one pass from the end is enough.
    kept = []
    for helper, text in reversed(definitions):
        if helper in needed:
            kept.append(text)
            needed |= set(_WORD.findall(text))
    return "\n".join(reversed(kept)) + "\n" + body


def script_file(name: str) -> str:
    """The script's own file, as written (header included)."""
    return _read(name)
