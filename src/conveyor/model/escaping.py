"""Text from outside (job ids, queue names, stored values, user names) made safe to
write into one line of a log or a message.

Written as is, a job id `"x\\nalice delete job y: deleted"` would add a forged line
to a log. `printable()` writes a backslash and every character that is not
printable (newlines, NUL, other controls, bidi overrides, line separators, lone
surrogates) as a Python escape, so a line stays one line and reads back
unambiguously.

>>> printable("x\\nalice")
'x\\\\nalice'
"""

from __future__ import annotations


def printable(text: object) -> str:
    value = str(text)
    if value.isprintable() and "\\" not in value:
        return value
    return "".join(
        "\\\\"
        if ch == "\\"
        else ch
        if ch.isprintable()
        else ch.encode("unicode_escape", "backslashreplace").decode("ascii")
        for ch in value
    )


def readable_text(raw: object) -> str:
    """`raw` as text that can always be shown and encoded: bytes that are not UTF-8,
    and the lone surrogates a driver puts in their place, become U+FFFD."""
    if isinstance(raw, str):
        if raw.isascii():
            return raw
        return raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(raw, (bytes, bytearray)):
        return bytes(raw).decode("utf-8", "replace")
    return str(raw)


def excerpt(value: object, limit: int = 60) -> str:
    """A short, printable, quoted view of a stored value, for error messages."""
    if isinstance(value, (bytes, bytearray)):
        shown, more = repr(bytes(value[: limit // 3])), len(value) > limit // 3
    else:
        try:
            text = str(value)
        except RecursionError:
            return "(nested too deeply to show)"
        shown, more = "'" + printable(text[:limit]) + "'", len(text) > limit
    return shown + "…" if more else shown
