"""Flow control's state (FlowState) on a memory store: queue pauses, rate limit
buckets, the limits set on concurrency keys, and what they hold back, each one step
under the store's lock. The buckets are spent by the claim (lifecycle.py), the key
slots kept by the store's filing (store.py, key_slots.py)."""

from __future__ import annotations

from typing import Any

from conveyor.backends.folding import flow_loads_from_rows
from conveyor.backends.memory.registry import StoreAccess
from conveyor.backends.params import BucketHold, FlowLoads, FlowQuery, KeyLimit, QueuePause


class MemoryFlowState:
    def __init__(self, access: StoreAccess) -> None:
        self.access = access

    def pause_queue(self, queue_pause: QueuePause) -> None:
        store = self.access.store
        with store.lock:
            store.paused[queue_pause.queue] = queue_pause.paused
        if not queue_pause.paused:  # idle workers may have work waiting in it
            store.wakeups.notify()

    def queue_paused(self, queue: str) -> bool:
        store = self.access.store
        with store.lock:
            return store.paused.get(queue, False)

    def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        store = self.access.store
        with store.lock:
            store.buckets[bucket_hold.key] = (bucket_hold.tokens, bucket_hold.until)

    def set_key_limit(self, key_limit: KeyLimit) -> None:
        store = self.access.store
        with store.lock:
            store.slots.set_limit(key_limit.concurrency_key, key_limit.limit)
        store.wakeups.notify()

    def key_limit(self, concurrency_key: str) -> int | None:
        store = self.access.store
        with store.lock:
            return store.slots.overrides.get(concurrency_key)

    def count_running_of_key(self, concurrency_key: str) -> int:
        store = self.access.store
        with store.lock:
            holders = store.slots.holders.get(concurrency_key, {})
            return sum(job_id in store.running for job_id in holders)

    def flow_loads(self, query: FlowQuery) -> FlowLoads:
        store = self.access.store

        def wanted(queue: Any) -> bool:
            return query.queue is None or queue == query.queue

        with store.lock:
            running = [
                (key, 1, 0)
                for key, holders in store.slots.holders.items()
                for job_id in holders
                if job_id in store.running and wanted(store.rows[job_id].get("queue"))
            ]
            held = [(key, 0, 1) for key, queue in store.slots.parked_jobs() if wanted(queue)]
            buckets = [
                (key, len(lane))
                for (queue, key), lane in store.available.items()
                if key is not None and wanted(queue)
            ]
        return flow_loads_from_rows(query.top, running + held, buckets)
