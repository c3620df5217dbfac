"""What is particular to the memory backend: its URL, one store per URL shared by
every app of the process, and its refusal to be used from a second process."""

from __future__ import annotations

import multiprocessing
import uuid

import pytest

from conveyor import Conveyor
from conveyor.backends import backend_from_url
from conveyor.backends.memory.registry import drop_store, store_for
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import JobState


def fresh_url() -> str:
    return f"memory://unit-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("url", ["memory://x?max=3", "memory://user:pw@x", "memory://x#frag"])
def test_a_memory_url_takes_a_name_only(url: str) -> None:
    with pytest.raises(ConfigurationError, match="takes a name only.*lives inside one process"):
        backend_from_url(url)


def test_apps_of_one_url_share_one_store_and_a_dropped_store_starts_empty() -> None:
    url = fresh_url()
    producer, consumer = Conveyor(url), Conveyor(url)
    try:

        @producer.task(name="greet")
        def greet(name: str) -> str:
            return f"hi {name}"

        handle = greet.enqueue("ada")
        seen = consumer.jobs.get(handle.id)
        assert seen is not None and seen.state is JobState.AVAILABLE
        assert Conveyor(fresh_url()).jobs.get(handle.id) is None  # another name, another store
        drop_store(url)
        assert consumer.jobs.get(handle.id) is None
    finally:
        producer.close()
        consumer.close()
        drop_store(url)


def _use_in_child(url: str, replies: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        store_for(url)
    except ConfigurationError as exc:
        replies.put(str(exc))
    else:
        replies.put("used")


def test_a_store_used_again_after_a_fork_says_it_lives_in_one_process() -> None:
    url = fresh_url()
    store = store_for(url)
    context = multiprocessing.get_context("fork")
    replies = context.Queue()
    child = context.Process(target=_use_in_child, args=(url, replies))
    child.start()
    message = replies.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert message.startswith(
        f"memory://{store.name} was made in process {store.pid} and is "
        f"used in process {child.pid} (a fork): a memory:// backend lives "
        "inside one process"
    )
    drop_store(url)
