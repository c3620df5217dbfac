"""The `once` store: run a side effect at most once per key while it is remembered.

One record per key in the shared records (namespace `once`), moved through three
states, each step one atomic verb of the contract, so it holds on every backend:

* **claimed** (`put_record_if_absent`, TTL = the claim's lease): this attempt runs
  the effect now. A crash inside the effect leaves the claim; it expires after its
  own lease and a later attempt claims again. Nobody else runs the effect while
  the claim lives: they snooze until it has expired or turned done.
* **done** (`compare_and_set_record` from our exact claim, TTL = the long `ttl`):
  the effect ran and returned; its JSON result is kept, so a later call skips
  the effect and returns what it returned.
* **released** (`compare_and_set_record` from our claim): the effect raised; the
  key is free again at once (a released record is claimed as if absent).

Guarantee: the effect runs at least once, and again only after an attempt that
ran it crashed (or was cancelled) before its done-mark; a done-mark made inside
`current_job().transaction()` on PostgreSQL commits with the transaction, which
makes an effect written in that transaction exactly-once (see docs/resilience.md).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from conveyor.backends.contract import SharedRecords
from conveyor.backends.params import RecordKey, RecordSwap, RecordWrite
from conveyor.model import validation as valid
from conveyor.model.clock import Clock
from conveyor.model.errors import InvalidJob, OnceWindowTooShort
from conveyor.model.outcomes import Snooze
from conveyor.rules.retry import RetryPolicy

log = logging.getLogger("conveyor.once")

ONCE_NAMESPACE = "once"
DEFAULT_CLAIM_LEASE = 60.0  # seconds: longer than most calls to a provider take
# A held claim is looked at again this often at most, even when its lease is long:
# the holder usually finishes well before its lease runs out.
RECHECK_HELD_CLAIM = 5.0
_MIN_SNOOZE = 0.05
_CLAIM_TRIES = 5  # a record that changes between our read and our write: read again

_encode = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False).encode


def once_key(key: object) -> str:
    """A key as stored: text of at most 255 characters, without control characters."""
    try:
        return valid.name("key", key)
    except InvalidJob as exc:
        raise ValueError(f"once(): {exc}") from None


def checked_ttl(
    key: str, ttl: float | None, policy: RetryPolicy, max_attempts: int, retention: float
) -> float:
    """How long a done-mark lasts: `ttl`, or when None the least that is safe: until
    the job can no longer run again, i.e. its worst-case retry window plus the time
    a dead job is kept for a redrive. OnceWindowTooShort when `ttl` is below that."""
    window = policy.worst_case_window(max_attempts)
    needed = window + retention
    if ttl is None:
        return needed
    if not math.isfinite(ttl):  # checked now: the mark comes after the effect
        raise ValueError(f"once({key!r}): ttl must be a finite duration, got {ttl!r}")
    if ttl < needed:
        raise OnceWindowTooShort(
            f"once({key!r}, ttl={_shown(ttl)}): the job may still run again after that: its "
            f"retries may wait up to {_shown(window)} over {max_attempts} attempts, and a dead "
            f"job is kept {_shown(retention)} for a redrive, so a later run would repeat the "
            f"effect. Pass ttl >= {math.ceil(needed)} seconds, or leave ttl out for exactly that"
        )
    return ttl


def _shown(seconds: float) -> str:
    return str(timedelta(seconds=math.ceil(seconds)))


@dataclass(frozen=True, slots=True)
class Claimed:
    """This attempt holds the key: run the effect, then `mark_done` or `release`."""

    key: str
    text: str  # the record exactly as written: every later step compares against it


@dataclass(frozen=True, slots=True)
class AlreadyDone:
    """The effect ran before (by this job or another): skip it."""

    key: str
    result: Any  # what the effect returned then, as JSON gave it back


class OnceStore:
    """The once records of one attempt of one job, `fence` being its lease token."""

    def __init__(self, records: SharedRecords, clock: Clock, job_id: str, fence: int) -> None:
        self.records = records
        self.clock = clock
        self.job_id = job_id
        self.fence = fence

    async def claim(self, key: str, lease: float) -> Claimed | AlreadyDone:
        """Take `key` for `lease` seconds, or say it is done. Raises Snooze while
        another attempt (of this job or another) holds a live claim on it."""
        for _ in range(_CLAIM_TRIES):
            mine = self._claim_text(lease)
            if await self.records.put_record_if_absent(
                RecordWrite(namespace=ONCE_NAMESPACE, key=key, value=mine, ttl=lease)
            ):
                return Claimed(key, mine)
            current = await self.records.get_record(RecordKey(namespace=ONCE_NAMESPACE, key=key))
            if current is None:
                continue  # expired or deleted since: try to take it again
            record = _parse(key, current)
            state = record.get("state")
            if state == "done":
                return AlreadyDone(key, record.get("result"))
            if state == "released":
                if await self.records.compare_and_set_record(
                    RecordSwap(
                        namespace=ONCE_NAMESPACE, key=key, expected=current, value=mine, ttl=lease
                    )
                ):
                    return Claimed(key, mine)
                continue
            if record.get("job") == self.job_id and record.get("fence") == self.fence:
                raise RuntimeError(
                    f"once({key!r}) is already running in this attempt; give "
                    "each effect of a job its own key"
                )
            until = record.get("until")
            remaining = (
                until - self.clock() if isinstance(until, (int, float)) else RECHECK_HELD_CLAIM
            )
            raise Snooze(min(max(remaining, _MIN_SNOOZE), RECHECK_HELD_CLAIM))
        raise Snooze(_MIN_SNOOZE)  # the record kept changing under us: look again soon

    def done_text(self, claim: Claimed, result: Any) -> str:
        """The done record for `claim`. A result JSON cannot store is dropped (with a
        warning), never an error: the effect happened, failing now would repeat it."""
        base = {"state": "done", "job": self.job_id, "fence": self.fence, "at": self.clock()}
        try:
            return _encode({**base, "result": result})
        except (TypeError, ValueError) as exc:
            log.warning(
                "once(%r): the effect returned a value JSON cannot store (%s); a "
                "skipped call will return None",
                claim.key,
                exc,
            )
            return _encode({**base, "result": None})

    async def mark_done(self, claim: Claimed, done: str, ttl: float) -> None:
        """Turn our claim into `done`. If the claim expired while the effect ran, the
        key is taken again if free; if another attempt took it meanwhile, that one runs
        (or ran) the effect too, which is said loudly: the claim's lease was too short."""
        records = self.records
        if await records.compare_and_set_record(
            RecordSwap(
                namespace=ONCE_NAMESPACE, key=claim.key, expected=claim.text, value=done, ttl=ttl
            )
        ):
            return
        for _ in range(_CLAIM_TRIES):
            current = await records.get_record(RecordKey(namespace=ONCE_NAMESPACE, key=claim.key))
            state = None if current is None else _parse(claim.key, current).get("state")
            if state is None or state == "released":
                if await records.compare_and_set_record(
                    RecordSwap(
                        namespace=ONCE_NAMESPACE,
                        key=claim.key,
                        expected=current,
                        value=done,
                        ttl=ttl,
                    )
                ):
                    return
                continue
            break  # claimed or done by another attempt: it kept the key
        log.warning(
            "once(%r): the claim of job %s expired before the effect returned and "
            "another attempt took the key, so the effect ran twice or may; give "
            "once() a lease longer than the effect can take",
            claim.key,
            self.job_id,
        )

    async def release(self, claim: Claimed, lease: float) -> None:
        """Free the key after the effect raised, if our claim is still there. A release
        that fails is only logged: the claim then frees itself after its lease, and the
        effect's own error is the one to report."""
        released = _encode({"state": "released", "job": self.job_id, "fence": self.fence})
        try:
            await self.records.compare_and_set_record(
                RecordSwap(
                    namespace=ONCE_NAMESPACE,
                    key=claim.key,
                    expected=claim.text,
                    value=released,
                    ttl=lease,
                )
            )
        except Exception as exc:
            log.warning(
                "once(%r): could not free the key (%s); it frees itself in %gs",
                claim.key,
                exc,
                lease,
            )

    def _claim_text(self, lease: float) -> str:
        return _encode(
            {
                "state": "claimed",
                "job": self.job_id,
                "fence": self.fence,
                "until": self.clock() + lease,
            }
        )


def _parse(key: str, text: str) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("state") not in ("claimed", "done", "released"):
        raise ValueError(
            f"once({key!r}): the record under that key ({text[:80]!r}) was not "
            f"written by once(); is namespace {ONCE_NAMESPACE!r} used for "
            "something else?"
        )
    return record
