"""Values to and from the scripts: exact float text, optional arguments, job hashes
(decoded by the one job codec, conveyor.backends.codec)."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.backends.codec import job_from_fields
from conveyor.model.job import Job


def float_arg(value: float) -> str:
    """Exact text of a float (repr round-trips; Lua's own formatting would not)."""
    return repr(float(value))


def optional_arg(value: str | None) -> str:
    """Optional script argument: '' for None, '~' + text otherwise."""
    return "" if value is None else "~" + value


def fields_from_flat(flat: Sequence[str]) -> dict[str, str]:
    """A script's `HGETALL`-style reply [field, value, ...] as a dict."""
    it = iter(flat)
    return dict(zip(it, it, strict=True))


def job_from_reply(flat: Sequence[str]) -> Job:
    """A job a script returned as a flat [field, value, ...] list (`job_reply` in
    _lib.lua: its id comes last and wins over the stored id field)."""
    return job_from_fields(fields_from_flat(flat))
