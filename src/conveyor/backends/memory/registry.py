"""The memory stores of this process, one per `memory://name` URL, and how a backend
reaches its URL's store.

Every `MemoryBackend` of one URL in a process shares one store (the sync facade's
loop and a test's loop see the same jobs, as two connections to one database
would); `memory://` alone names the process's default store. A store lives until
the process exits or `drop_store(url)`; a worker in another process cannot reach
it (it would see an empty store of its own), so the command line refuses these
URLs, and a store used again after a fork says so instead of splitting in two.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import urlsplit

from conveyor.backends import IN_PROCESS_ONLY as ONE_PROCESS
from conveyor.backends.memory.store import MemoryStore
from conveyor.model.clock import Clock
from conveyor.model.errors import ConfigurationError

_stores: dict[str, MemoryStore] = {}
_stores_lock = threading.Lock()


def store_name(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "memory":
        raise ConfigurationError(f"not a memory URL: {url!r}")
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ConfigurationError(
            f"malformed memory URL {url!r}: it takes a name only, e.g. memory://tests"
            f" ({ONE_PROCESS})"
        )
    return parts.netloc + parts.path


def store_for(url: str) -> MemoryStore:
    """The store of `url` in this process, made on first use."""
    name = store_name(url)
    with _stores_lock:
        store = _stores.get(name)
        if store is None:
            store = _stores[name] = MemoryStore(name)
    if store.pid != os.getpid():
        raise ConfigurationError(
            f"memory://{name} was made in process {store.pid} and is used in process "
            f"{os.getpid()} (a fork): {ONE_PROCESS}"
        )
    return store


def drop_store(url: str) -> None:
    """Forget every job and record of `url` (the next use starts empty)."""
    with _stores_lock:
        _stores.pop(store_name(url), None)


class StoreAccess:
    """What a backend's role objects share: its URL's store and its clock.

    The store is looked up at every verb, not kept: after `drop_store(url)` the next
    verb finds an empty store, and a backend used after a fork is refused."""

    __slots__ = ("clock", "name", "url")

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.name = store_name(url)
        self.clock = clock

    @property
    def store(self) -> MemoryStore:
        return store_for(self.url)
