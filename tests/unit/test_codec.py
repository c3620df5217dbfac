"""The job codec: never raises, names the field it cannot read, and its fast paths
agree with the careful decoder (the one definition of every rule)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.backends.codec import COLUMNS, _careful, job_from_fields, job_from_row
from conveyor.model.job import AttemptError, JobState

ERROR = {
    "attempt": 1,
    "at": 5.0,
    "type": "KeyError",
    "message": "'x'",
    "traceback": "",
    "worker_id": "w",
    "host": "h",
    "version": "1",
}
ROW: dict[str, Any] = {
    "id": "job-1",
    "queue": "default",
    "task": "t",
    "payload": '{"args":[1],"kwargs":{}}',
    "state": "running",
    "priority": 0,
    "attempt": 1,
    "max_attempts": 20,
    "run_at": 10.5,
    "created_at": 10.0,
    "started_at": 11.0,
    "finished_at": None,
    "lease_token": 3,
    "lease_expires_at": 41.0,
    "worker_id": "h:1:abc",
    "unique_key": None,
    "unique_for": None,
    "result": None,
    "errors": json.dumps([ERROR]),
    "checkpoint": '{"page": 2}',
    "progress": None,
    "cancel_requested": False,
    "timeout": None,
    "meta": '{"a": 1}',
    "aging": 60.0,
    "concurrency_key": "user:42",
    "concurrency_limit": 2,
    "rate_key": "stripe",
    "result_expires_at": 3600.5,
}
# The same job as Redis stores it: text, absent fields left out.
HASH = {
    name: str(value)
    for name, value in ROW.items()
    if value is not None and name != "cancel_requested"
}


def test_a_sound_row_decodes_in_full() -> None:
    job = job_from_row([ROW[c] for c in COLUMNS])
    assert job.corrupt is None and job.state is JobState.RUNNING
    assert job.errors == (AttemptError.from_dict(ERROR),) and job.meta == {"a": 1}
    assert job_from_fields(HASH) == job


def test_each_bad_field_is_named_and_the_rest_is_read() -> None:
    row = {
        **ROW,
        "meta": "{oops",
        "priority": "high",
        "state": "paused",
        "payload": b"\xff",
        "lease_token": 7,
    }
    job = job_from_row([row[c] for c in COLUMNS])
    assert job.corrupt is not None
    assert [p.split(":")[0] for p in job.corrupt.split("; ")] == [
        "payload",
        "state",
        "priority",
        "meta",
    ]
    assert (job.id, job.lease_token, job.queue, job.task) == ("job-1", 7, "default", "t")
    assert job.payload == "\ufffd" and job.state is JobState.DEAD and job.meta == {}


def test_recursion_while_decoding_is_a_corrupt_field() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    job = job_from_fields({**HASH, "meta": deep, "errors": deep, "result": deep})
    assert job.corrupt == (
        "result: JSON nested too deeply; errors: JSON nested too deeply; "
        "meta: JSON nested too deeply"
    )


def test_readable_error_records_survive_a_bad_one_next_to_them() -> None:
    job = job_from_fields({**HASH, "errors": json.dumps([ERROR, 5, {**ERROR, "type": "Last"}])})
    assert [e.type for e in job.errors] == ["KeyError", "Last"]
    assert job.corrupt == "errors: item 1 is not an error record ('5')"


ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.sampled_from(["[]", "{}", "1", "running", "[1]", "\udcff", "nan", "1.5", "-3"]),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(COLUMNS), ANY)
def test_the_fast_paths_agree_with_the_careful_decoder(field: str, value: Any) -> None:
    row = {**ROW, field: value}
    # Compared by repr: a NaN time (a number, if an odd one) is not equal to itself.
    assert repr(job_from_row([row[c] for c in COLUMNS])) == repr(_careful(row))
    fields = dict(HASH)
    if value is None:
        fields.pop(field, None)
    else:
        fields[field] = value if isinstance(value, str) else str(value)
    assert repr(job_from_fields(fields)) == repr(_careful(fields))


REQUIRED = {
    "id",
    "queue",
    "task",
    "payload",
    "state",
    "priority",
    "max_attempts",
    "run_at",
    "created_at",
}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(COLUMNS), ANY))
def test_decoding_never_raises(values: dict[str, Any]) -> None:
    for job in (job_from_fields(values), job_from_row([values.get(c) for c in COLUMNS])):
        for text in (job.id, job.queue, job.task, job.payload):
            text.encode("utf-8")  # always text that can be shown and sent back
        if job.corrupt is None:
            assert REQUIRED <= {name for name, value in values.items() if value is not None}
