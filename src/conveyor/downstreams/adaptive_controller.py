"""The workers' side of adaptive concurrency (conveyor.rules.adaptive): outcomes counted per
key and window in the shared records, one decision per window fleet-wide, the limit
written to the backend, which holds every claimer to it (FlowState.set_key_limit).

Each key has one record, its `LimitState` (limit, version, when decided). A worker
counts its attempts' outcomes in memory and, every `sync_interval` seconds, adds them
to the counters of the version it just read (`incr_record`: no round trip per job).
Once a window has passed since the last decision (or at once, when a worker has
just counted a signal: see `run`), the first worker to see it reads the version's
counters, computes the next limit (`Adaptive.next_limit`) and writes it
with `compare_and_set_record` from the state it read: of several workers deciding at
once exactly one wins, the others read the new state at their next sync. The winner
then writes the limit to the backend; every worker writes a limit it sees in the
record and has not seen written (so a winner that died between the two writes is
made good by the next worker's sync; the write is idempotent).

What a window counts: successes (and their duration), and signals of attempts that
started after the limit last went down (the others were admitted by the older,
higher limit: counting them would cut the new limit for the old one's fault). Other
failures, snoozes and cancels count for nothing. For the same reason the window
right after a cut never cuts again: the jobs the old limit let in were still
leaving (a lowered limit takes no slot back), so its signals may still be theirs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from conveyor.backends.contract import Backend
from conveyor.backends.params import KeyLimit, RecordIncrement, RecordKey, RecordSwap, Settlement
from conveyor.model.clock import Clock
from conveyor.model.job import Job, JobState
from conveyor.rules.adaptive import Adaptive, LimitState, WindowCounts

log = logging.getLogger("conveyor.worker")
NAMESPACE = "adaptive"
STATE_TTL = 86_400.0  # a key's state outlives a day without decisions only in its limit
COUNTS = ("ok", "signals", "latency_ms")
IDLE_WINDOWS = 20  # a key this worker ran nothing of for so many windows is forgotten


@dataclass(slots=True)
class _Key:
    rule: Adaptive
    state: LimitState | None = None
    text: str | None = None  # the record as read: what the decision's CAS expects
    applied: int | None = None  # the limit this worker last saw written to the backend
    pending: WindowCounts = field(default_factory=WindowCounts)
    started: dict[str, float] = field(default_factory=dict)  # job id -> start, here
    signalled: set[str] = field(default_factory=set)
    last_active: float = 0.0


def _count_key(key: str, version: int, count: str) -> str:
    return f"{key}|{version}|{count}"


def _after_cut(state: LimitState) -> bool:
    """Whether the state's decision was a cut (its window does not cut again)."""
    return state.version > 0 and state.cut_at == state.since


class AdaptiveController:
    """Per adaptive key: this worker's attempts and the fleet's shared state."""

    def __init__(self, rule_of: Callable[[str], Adaptive | None]) -> None:
        self._rule_of = rule_of
        self._keys: dict[str, _Key] = {}
        # Set when an attempt ends with a counted signal: the sync loop runs at once,
        # so the fleet cuts within a round trip instead of at the window's end.
        self.signalled = asyncio.Event()
        self._next_sync: asyncio.Future[None] | None = None  # resolved when a sync ends
        self._sync_timeout = 1.0

    def _key_of(self, job: Job) -> tuple[str, _Key] | None:
        if job.concurrency_key is None:
            return None
        known = self._keys.get(job.concurrency_key)
        if known is not None:
            return job.concurrency_key, known
        rule = self._rule_of(job.task)
        if rule is None:
            return None
        entry = self._keys[job.concurrency_key] = _Key(rule)
        return job.concurrency_key, entry

    def started(self, job: Job, now: float) -> None:
        found = self._key_of(job)
        if found is not None:
            found[1].started[job.id] = now
            found[1].last_active = now

    def failed(self, job: Job, error: BaseException) -> None:
        """The attempt failed with `error` (any failure, before its settlement)."""
        entry = self._keys.get(job.concurrency_key or "")
        if entry is not None and job.id in entry.started and entry.rule.is_signal(error):
            entry.signalled.add(job.id)

    def ended(self, job: Job, settlement: Settlement | None, now: float) -> bool:
        """The attempt ended (`settlement` None: the worker stopped it, counted nowhere).
        True if it counted a signal: the caller then holds the job's settlement, and
        so its slot, until `signal_written` (see there)."""
        entry = self._keys.get(job.concurrency_key or "")
        if entry is None or job.id not in entry.started:
            return False
        began = entry.started.pop(job.id)
        signalled = job.id in entry.signalled
        entry.signalled.discard(job.id)
        entry.last_active = now
        if settlement is None:
            return False
        if signalled:
            if entry.state is None or began >= entry.state.cut_at:
                entry.pending.signals += 1
                self.signalled.set()
                return True
        elif settlement.state is JobState.COMPLETED:
            entry.pending.ok += 1
            entry.pending.latency_ms += max(0, round((now - began) * 1000.0))
        return False

    async def signal_written(self) -> None:
        """Wait for the sync that counts a signal just counted here (and cuts), at most
        a sync interval. Why: a refused call ends at once, and its freed slot would go
        to the key's next job, refused in turn, and so on until the cut is written; a
        refused job that keeps its slot until then stops that."""
        if self._next_sync is None:
            self._next_sync = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._next_sync), self._sync_timeout)
        except TimeoutError:
            pass

    def sync_interval(self, rules: list[Adaptive]) -> float:
        """How often a worker syncs: a quarter of the shortest window, 50 ms to 1 s."""
        return min(1.0, max(0.05, min((r.window for r in rules), default=1.0) / 4))

    async def run(
        self, backend: Backend, clock: Clock, interval: float, closing: asyncio.Event
    ) -> None:
        """The worker's service: `sync` every `interval` seconds, and at once after a
        signal, until `closing` is set."""
        self._sync_timeout = interval
        while not closing.is_set():
            waiters = [asyncio.ensure_future(e.wait()) for e in (closing, self.signalled)]
            await asyncio.wait(waiters, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
            self.signalled.clear()
            done, self._next_sync = self._next_sync, None
            try:
                if not closing.is_set():
                    await self.sync(backend, clock())
            except Exception as exc:
                log.warning("adaptive limits: sync failed: %s", exc)
            finally:
                if done is not None and not done.done():
                    done.set_result(None)

    async def sync(self, backend: Backend, now: float) -> None:
        """Flush this worker's counts, read each key's state, decide where due."""
        for key, entry in list(self._keys.items()):
            if (
                not entry.started
                and entry.pending == WindowCounts()
                and now - entry.last_active > IDLE_WINDOWS * entry.rule.window
            ):
                del self._keys[key]
                continue
            await self._sync_key(backend, key, entry, now)

    async def _read(self, backend: Backend, key: str, entry: _Key, now: float) -> LimitState:
        text = await backend.get_record(RecordKey(namespace=NAMESPACE, key=key))
        state = None if text is None else LimitState.decode(text)
        if state is None:  # the first worker to run the key, or a damaged record
            fresh = LimitState(entry.rule.start, 0, now, 0.0).encode()
            await backend.compare_and_set_record(
                RecordSwap(namespace=NAMESPACE, key=key, expected=text, value=fresh, ttl=STATE_TTL)
            )
            text = await backend.get_record(RecordKey(namespace=NAMESPACE, key=key))
            state = None if text is None else LimitState.decode(text)
            if state is None:
                raise RuntimeError(f"the adaptive state of key {key} cannot be stored")
        entry.state, entry.text = state, text
        return state

    async def _sync_key(self, backend: Backend, key: str, entry: _Key, now: float) -> None:
        cached = entry.state
        if (
            cached is not None
            and entry.pending.signals
            and not _after_cut(cached)
            and await self._flush(backend, key, entry, cached)
        ):
            # The fast way to a cut, in three round trips (the counts, the CAS, the
            # limit), from the state as last read: a stale one fails the CAS.
            if await self._decide(
                backend, key, entry, cached, WindowCounts(signals=1), saturated=False, now=now
            ):
                return
        state = await self._read(backend, key, entry, now)
        await self._apply(backend, key, entry, state.limit)
        signalled = await self._flush(backend, key, entry, state)
        # A cut is decided as soon as a signal is counted; an increase (or nothing) at
        # the window's end.
        if now < state.since + entry.rule.window and (_after_cut(state) or not signalled):
            return
        window = WindowCounts(
            *[
                int(
                    await backend.get_record(
                        RecordKey(namespace=NAMESPACE, key=_count_key(key, state.version, count))
                    )
                    or 0
                )
                for count in COUNTS
            ]
        )
        saturated = (
            window.ok + window.signals >= state.limit
            or await backend.count_running_of_key(key) >= state.limit
        )
        await self._decide(backend, key, entry, state, window, saturated, now)

    async def _flush(self, backend: Backend, key: str, entry: _Key, state: LimitState) -> bool:
        """Add this worker's counts to the version's; True if signals were among them."""
        ttl = max(60.0, entry.rule.window * 10)
        pending, entry.pending = entry.pending, WindowCounts()
        signalled = False
        try:
            for count in COUNTS:
                amount = getattr(pending, count)
                if amount:
                    await backend.incr_record(
                        RecordIncrement(
                            namespace=NAMESPACE,
                            key=_count_key(key, state.version, count),
                            amount=amount,
                            ttl=ttl,
                        )
                    )
                    setattr(pending, count, 0)
                    signalled = signalled or count == "signals"
        finally:  # what was not added is added at the next sync
            for count in COUNTS:
                setattr(
                    entry.pending, count, getattr(entry.pending, count) + getattr(pending, count)
                )
        return signalled

    async def _decide(
        self,
        backend: Backend,
        key: str,
        entry: _Key,
        state: LimitState,
        window: WindowCounts,
        saturated: bool,
        now: float,
    ) -> bool:
        """Write the next state if `state` is still the fleet's; True if written."""
        limit = entry.rule.next_limit(state.limit, window, saturated, _after_cut(state))
        decided = LimitState(
            limit, state.version + 1, now, now if limit < state.limit else state.cut_at
        )
        if not await backend.compare_and_set_record(
            RecordSwap(
                namespace=NAMESPACE,
                key=key,
                expected=entry.text,
                value=decided.encode(),
                ttl=STATE_TTL,
            )
        ):
            return False
        entry.state, entry.text = decided, decided.encode()
        if limit != state.limit:
            log.info(
                "adaptive limit of %s: %d -> %d (window: %d ok, %d signals)",
                key,
                state.limit,
                limit,
                window.ok,
                window.signals,
            )
        await self._apply(backend, key, entry, limit)
        return True

    async def _apply(self, backend: Backend, key: str, entry: _Key, limit: int) -> None:
        if entry.applied != limit:
            await backend.set_key_limit(KeyLimit(concurrency_key=key, limit=limit))
            entry.applied = limit

    def limits(self) -> dict[str, int]:
        """The limit of each key as last read here, for logs and tests."""
        return {key: e.state.limit for key, e in self._keys.items() if e.state is not None}
