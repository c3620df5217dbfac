"""A job's arguments and result as people are shown them (the dashboard, `conveyor
jobs show`/`list --json`, the dead-letter views): secrets masked
(conveyor.rules.hygiene), and a value stored apart shown as its reference, never read
from the blob store."""

from __future__ import annotations

from typing import Any

from conveyor.model import jsontext
from conveyor.model.job import Job
from conveyor.payloads.claim_check import reference_in
from conveyor.rules.hygiene import masked


def stored_apart(text: str | None) -> str | None:
    """ "stored apart: blob <key> (N bytes, sha256 …)" for a reference, else None."""
    ref = reference_in(text)
    return None if ref is None else f"stored apart: {ref.describe()}"


def shown_arguments(job: Job) -> tuple[list[Any], dict[str, Any]] | None:
    """The job's (args, kwargs), masked; None if they are stored apart or the
    payload does not decode to them."""
    if reference_in(job.payload) is not None:
        return None
    decoded = jsontext.arguments(job.payload)
    if decoded is None:
        return None
    return masked(decoded[0], decoded[1], job.meta)


def shown_payload(job: Job) -> str:
    """The payload as JSON text to show: masked arguments, a reference's
    description, or (a corrupt payload) the text as stored."""
    apart = stored_apart(job.payload)
    if apart is not None:
        return jsontext.dumps(apart) or apart
    decoded = shown_arguments(job)
    if decoded is None:
        return job.payload
    return jsontext.dumps({"args": decoded[0], "kwargs": decoded[1]}) or job.payload


def shown_result(job: Job) -> str | None:
    """The result as JSON text to show (a reference's description when stored apart)."""
    apart = stored_apart(job.result)
    return job.result if apart is None else jsontext.dumps(apart)
