"""Stored JSON text (payloads, results, checkpoints, progress) for people: decoded
when it can be, else shown as stored, and cut to a length a page or a terminal can
hold. Never raises: a corrupt value (not JSON, nested too deeply, of the wrong
shape) is shown as such, so the job page, `conveyor jobs show` and the dead-letter
listing render the very jobs an operator most needs to look at."""

from __future__ import annotations

import json
from typing import Any

from conveyor.model.escaping import readable_text

SHOWN_LIMIT = 10_000  # characters of one value on a page or a terminal


def decode(text: str | None) -> tuple[bool, Any]:
    """(True, value) if `text` is JSON (None is JSON null here), else (False, None)."""
    if text is None:
        return True, None
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def cut(text: str, limit: int = SHOWN_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def arguments(payload: str) -> tuple[list[Any], dict[str, Any]] | None:
    """The (args, kwargs) of a job's payload, or None if it does not decode to them."""
    ok, data = decode(payload)
    if not ok or not isinstance(data, dict):
        return None
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    return args, kwargs


def dumps(value: Any, indent: int | None = None) -> str | None:
    """`value` as readable JSON text (not ASCII-escaped), or None if it cannot be."""
    try:
        return readable_text(
            json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=indent is not None)
        )
    except (ValueError, TypeError, RecursionError):
        return None


def pretty(text: str | None, indent: int | None = 2, limit: int = SHOWN_LIMIT) -> str:
    """Stored JSON re-indented, or the text as stored when it is not JSON; cut to `limit`."""
    if text is None:
        return "-"
    ok, value = decode(text)
    shown = dumps(value, indent) if ok else None
    return cut(shown if shown is not None else readable_text(text), limit)
