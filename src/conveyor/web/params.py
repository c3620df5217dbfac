"""What a request may carry, parsed strictly: a malformed request is a 400 that says
what is wrong, never a 500 and never a silent guess.

Refused here, once, before anything reaches a backend: NUL bytes (PostgreSQL text
cannot hold them, and no job, queue or filter has one), bytes that are not UTF-8,
unknown states, a parameter given twice, numbers out of range.

Job ids are data: they travel percent-encoded in URLs (`/job?id=a%2Fb`) and in form
values (a browser turns a newline in a form value into CR LF), and are decoded once,
here.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, unquote_to_bytes

from starlette.datastructures import FormData
from starlette.requests import Request

from conveyor.admin.api import make_filter
from conveyor.backends.params import JobFilter
from conveyor.model.job import JobState

PAGE_SIZES = (25, 50, 100, 200)
MAX_BATCH = 10_000
FILTER_FIELDS = ("state", "queue", "task", "error_type", "q")
STATES = tuple(s.value for s in JobState)
FORM_TYPE = "application/x-www-form-urlencoded"


class BadRequest(Exception):
    """The request is malformed; the message says what to change (answered with 400)."""


# Query parameters or a form (Starlette's multi-dicts), or a plain mapping.
Params = Mapping[str, object]


def check_text(what: str, text: str) -> str:
    if "\x00" in text:
        raise BadRequest(f"{what} contains a NUL byte: no job, queue or filter can hold one")
    return text


def decode_percent(what: str, raw: bytes | str) -> str:
    """Percent-decoded `raw` as UTF-8; refuses what is not ASCII on the wire, not UTF-8
    once decoded, or holds a NUL byte."""
    data = raw.encode("latin-1") if isinstance(raw, str) else raw
    if not data.isascii():
        raise BadRequest(f"{what} has bytes that are not ASCII: percent-encode them")
    try:
        text = unquote_to_bytes(data.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{what} is not UTF-8 once percent-decoded") from None
    return check_text(what, text)


def check_target(scope: MutableMapping[str, Any]) -> None:
    """The path and query string as sent, before Starlette decodes them leniently."""
    raw_path = scope.get("raw_path")
    decode_percent("the path", raw_path if raw_path is not None else scope["path"])
    decode_percent("the query string", scope.get("query_string", b""))


async def read_form(request: Request) -> FormData:
    """The form of a POST, with the same rules as a query string."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == FORM_TYPE:
        decode_percent("the form", await request.body())  # cached: form() reads it again
    form = await request.form()
    for name, value in form.multi_items():
        check_text("a form field name", name)
        if isinstance(value, str):
            check_text(f"the form field {name!r}", value)
    return form


def single(data: Params, name: str) -> str | None:
    """One value of `name` (None if absent); a parameter given twice is ambiguous."""
    getlist = getattr(data, "getlist", None)
    values = (
        list(getlist(name))
        if getlist is not None
        else ([data.get(name)] if data.get(name) is not None else [])
    )
    if len(values) > 1:
        raise BadRequest(f"{name} given {len(values)} times: give it once")
    if not values:
        return None
    value = values[0]
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be text, not a file")
    return check_text(name, value)


def one_of(data: Params, name: str, allowed: Sequence[str], default: str) -> str:
    value = single(data, name)
    if value is None or value == "":
        return default
    if value not in allowed:
        raise BadRequest(f"{name} {value!r} is not one of: {', '.join(allowed)}")
    return value


def bounded_int(data: Params, name: str, low: int, high: int, default: int) -> int:
    value = single(data, name)
    text = (value or "").strip()
    if not text:
        return default
    # ASCII digits only ("²" is a digit to isdigit), and short: int() of a 5,000-digit
    # string raises, and no batch is that large.
    if not (text.isascii() and text.isdigit() and len(text) <= 12 and low <= int(text) <= high):
        raise BadRequest(
            f"{name} must be a whole number from {low:,} to {high:,}, not {text[:40]!r}"
        )
    return int(text)


def page_size(data: Params, default: int = 50) -> int:
    sizes = [str(n) for n in PAGE_SIZES]
    value = single(data, "limit")
    if value is None or value == "":
        return default
    if value not in sizes:
        raise BadRequest(f"limit must be one of {', '.join(sizes)}, not {value[:40]!r}")
    return int(value)


def job_id(data: Params) -> str:
    value = single(data, "id")
    if not value:
        raise BadRequest("which job? pass its id: /job?id=<job id>")
    return value


def id_for_form(value: str) -> str:
    """A job id as it goes into a form value: percent-encoded, so it survives exactly."""
    return quote(value, safe="")


def ids_from_form(form: FormData) -> list[str]:
    ids = []
    for value in form.getlist("ids"):
        if not isinstance(value, str) or not value:
            continue
        try:
            ids.append(check_text("a selected job id", unquote(value, errors="strict")))
        except UnicodeDecodeError:
            raise BadRequest("a selected job id is not UTF-8 once percent-decoded") from None
    return ids


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The job list's filter, as it appears in the URL."""

    state: str = ""
    queue: str = ""
    task: str = ""
    error_type: str = ""
    q: str = ""  # text in arguments

    @classmethod
    def from_mapping(cls, data: Params) -> ListQuery:
        def get(name: str) -> str:
            return (single(data, name) or "").strip()

        state = get("state")
        if state and state not in STATES:
            raise BadRequest(f"state {state[:40]!r} is not one of: {', '.join(STATES)}")
        return cls(
            state=state,
            queue=get("queue"),
            task=get("task"),
            error_type=get("error_type"),
            q=get("q"),
        )

    def for_redrive(self) -> ListQuery:
        """Redrive takes dead jobs (the default) or cancelled ones."""
        if self.state in ("dead", "cancelled"):
            return self
        if self.state:
            raise BadRequest(f"redrive takes dead or cancelled jobs, not {self.state}")
        return ListQuery(
            state="dead", queue=self.queue, task=self.task, error_type=self.error_type, q=self.q
        )

    def to_filter(self) -> JobFilter:
        return make_filter(
            states=[self.state] if self.state else [],
            queues=[self.queue] if self.queue else [],
            tasks=[self.task] if self.task else [],
            error_type=self.error_type or None,
            args_contains=self.q or None,
        )

    def params(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in FILTER_FIELDS if getattr(self, name)}

    def describe(self, redact_args: bool = True) -> str:
        """For the audit log and confirmations; the argument search is redacted by
        default (it may hold an email address or a token)."""
        parts = []
        for name in FILTER_FIELDS:
            value = getattr(self, name)
            if not value:
                continue
            if name == "q" and redact_args:
                value = f"<{len(value)} chars>"
            parts.append(f"{'args contain' if name == 'q' else name.replace('_', ' ')}={value}")
        return ", ".join(parts) or "all jobs"
