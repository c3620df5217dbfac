"""Payload hygiene: arguments that look like secrets, found at enqueue, and masked
wherever a job is shown.

Keys are judged by their word parts (`apiKey`, `api-key` and `API_KEY` are all
`api` + `key`), so a secret word must be a whole part: `user_id` and `tokenizer`
are fine, `auth_token` and `db_password` are not. A key whose last part says it
describes a secret rather than holding one passes: `token_count`, `token_type`,
`password_length`, `secret_name`, `token_id`, `token_expires_at`.

Values are judged by shape: a JWT, a card number (13 to 19 digits, spaces or
dashes allowed, with a card network's prefix and a valid Luhn check digit; only in
text, since whole numbers are ids far more often than cards), a PEM private key,
an AWS access key id.

`check()` runs on every enqueue: in "warn" mode (the default) it logs one line per
task and key (never the value), in "reject" mode it raises `SecretInPayload`, "off"
skips it. `masked()` is what the dashboard and the command line show: the values of
a task's `redact=(...)` keys and of every key or value the rules flag, as "***".
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from conveyor.model.errors import ConfigurationError, SecretInPayload

log = logging.getLogger("conveyor.hygiene")

MODES = ("warn", "reject", "off")
MASK = "***"
REDACT_META_KEY = "redact"  # {"keys": [...], "args": [positions]} in a job's meta
_MAX_DEPTH = 32

_SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "tokens",
        "authorization",
        "credential",
        "credentials",
        "apikey",
        "bearer",
        "privatekey",
        "cookie",
        "ssn",
    }
)
# Two parts that together name a secret: api_key, private_key, access_key, ...
_SECRET_PAIRS = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("signing", "key"),
        ("encryption", "key"),
        ("client", "secret"),
        ("session", "key"),
        ("card", "number"),
        ("card", "cvc"),
        ("card", "cvv"),
    }
)
# A last part that makes the key about a secret, not the secret itself.
_DESCRIPTIVE = frozenset(
    {
        "count",
        "counts",
        "type",
        "types",
        "kind",
        "len",
        "length",
        "size",
        "limit",
        "ttl",
        "id",
        "ids",
        "name",
        "names",
        "expiry",
        "expires",
        "expired",
        "at",
        "url",
        "field",
        "hint",
        "policy",
        "strength",
        "version",
        "required",
        "set",
        "enabled",
        "rotated",
    }
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")

_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_PEM_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_AWS_KEY = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
_CARD = re.compile(r"^\s*(\d[ -]?){12,18}\d\s*$")
_CARD_PREFIX = re.compile(r"^(4|5[1-5]|2[2-7]|3[47]|3[068]|6011|65|64[4-9]|35|62)")


def key_parts(key: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(key)]


@functools.lru_cache(maxsize=4096)  # the same few argument names, on every enqueue
def secret_key(key: str) -> bool:
    """True if an argument named `key` looks like it holds a secret."""
    parts = key_parts(key)
    if not parts or parts[-1] in _DESCRIPTIVE:
        return False
    if any(p in _SECRET_WORDS for p in parts):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(parts, parts[1:], strict=False))


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def credential_kind(value: str) -> str | None:
    """What kind of credential `value` looks like ("JWT", ...), or None."""
    if "eyJ" in value and _JWT.search(value):
        return "a JWT"
    if "PRIVATE KEY-----" in value and _PEM_KEY.search(value):
        return "a PEM private key"
    if ("AKIA" in value or "ASIA" in value) and _AWS_KEY.search(value):
        return "an AWS access key id"
    if 13 <= len(value) <= 40 and _CARD.match(value):
        digits = re.sub(r"\D", "", value)
        if 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and _luhn(digits):
            return "a card number (Luhn)"
    return None


def findings(
    names: Sequence[str], args: Sequence[Any], kwargs: dict[str, Any]
) -> Iterator[tuple[str, str]]:
    """(where, why) for every argument that looks like a secret; `names` are the
    task's positional parameter names, to name positional arguments."""
    for i, value in enumerate(args):
        name = names[i] if i < len(names) else f"args[{i}]"
        yield from _walk(name, value, 0)
    for key, value in kwargs.items():
        yield from _walk(key, value, 0)


def _walk(where: str, value: Any, depth: int) -> Iterator[tuple[str, str]]:
    leaf = where.rpartition(".")[2]
    if secret_key(leaf) and value not in (None, "", [], {}):
        yield where, f"its name {leaf!r}"
        return
    if value is None or type(value) in (int, float, bool):
        return  # no credential value is a number (see credential_kind)
    if isinstance(value, str):
        kind = credential_kind(value)
        if kind is not None:
            yield where, f"its value is {kind}"
    elif depth < _MAX_DEPTH and isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(f"{where}.{key}", item, depth + 1)
    elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(f"{where}[{i}]", item, depth + 1)


def check_mode(mode: str, where: str) -> str:
    if mode not in MODES:
        raise ConfigurationError(f"{where}: payload_hygiene={mode!r}; expected one of {MODES}")
    return mode


class PayloadHygiene:
    """The enqueue-time check of one app; remembers what it warned about."""

    def __init__(self, mode: str) -> None:
        self.mode = check_mode(mode, "Conveyor")
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def check(
        self,
        task_name: str,
        mode: str | None,
        names: Sequence[str],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        redact: Collection[str],
    ) -> None:
        mode = mode or self.mode
        if mode == "off":
            return
        for where, why in findings(names, args, kwargs):
            if where.partition(".")[0].partition("[")[0] in redact:
                continue  # declared: the task knows, and its views mask it
            if mode == "reject":
                raise SecretInPayload(f"task {task_name}: argument {where!r}", why)
            with self._lock:
                if (task_name, where) in self._warned:
                    continue
                self._warned.add((task_name, where))
            log.warning(
                "task %s: argument %r looks like a secret (%s); jobs keep their "
                "arguments in storage, dashboards and logs: pass a reference "
                "instead, or list it in redact=(...) (warned once per task and "
                "argument)",
                task_name,
                where,
                why,
            )


def redact_meta(redact: Collection[str], names: Sequence[str], nargs: int) -> dict[str, Any]:
    """The meta entry a job of a task with `redact=` carries, so that any viewer
    (a dashboard that does not import the task) masks the same arguments."""
    positions = [i for i, name in enumerate(names[:nargs]) if name in redact]
    return {"keys": sorted(redact), "args": positions}


def masked(
    args: list[Any], kwargs: dict[str, Any], meta: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Copies of `args`/`kwargs` with the job's redacted keys and every argument the
    rules flag shown as MASK."""
    spec = meta.get(REDACT_META_KEY)
    keys: set[str] = set()
    positions: set[int] = set()
    if isinstance(spec, dict):
        keys = {k for k in spec.get("keys", ()) if isinstance(k, str)}
        positions = {i for i in spec.get("args", ()) if isinstance(i, int)}
    shown_args = [MASK if i in positions else _masked(v, keys, 0) for i, v in enumerate(args)]
    shown_kwargs = {
        k: MASK if (k in keys or secret_key(k)) and v not in (None, "") else _masked(v, keys, 0)
        for k, v in kwargs.items()
    }
    return shown_args, shown_kwargs


def _masked(value: Any, keys: set[str], depth: int) -> Any:
    if isinstance(value, str):
        return MASK if credential_kind(value) else value
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {
            k: MASK
            if isinstance(k, str) and (k in keys or secret_key(k)) and v not in (None, "")
            else _masked(v, keys, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v, keys, depth + 1) for v in value]
    return value
