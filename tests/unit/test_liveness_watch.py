"""The rules of judging liveness that need no backend: when a suspect counts as dead,
what a worker's record announces, and the backends' token formats."""

from __future__ import annotations

import json

from conveyor.backends.postgres.liveness import LockToken
from conveyor.backends.redis.liveness import ClientToken, client_name
from conveyor.backends.sqlite.liveness import lock_file_name
from conveyor.worker.liveness import DeathWatch, announced_token, without_token


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(grace: float) -> tuple[DeathWatch, FakeTime]:
    time_now = FakeTime()
    return DeathWatch(grace, clock=time_now), time_now


def test_a_suspect_is_dead_once_gone_for_the_grace_with_the_same_record() -> None:
    deaths, time_now = watch(0.25)
    assert deaths.observe({"w": "r1"}) == []
    assert deaths.next_look() == 0.25
    time_now.now = 0.24
    assert deaths.observe({"w": "r1"}) == []
    time_now.now = 0.25
    assert deaths.observe({"w": "r1"}) == [("w", "r1")]
    assert deaths.next_look() is None  # confirmed: no longer a suspect


def test_a_changed_record_starts_the_grace_again() -> None:
    deaths, time_now = watch(0.25)
    deaths.observe({"w": "r1"})
    time_now.now = 0.3
    assert deaths.observe({"w": "r2"}) == []  # it announced meanwhile: alive then
    time_now.now = 0.5
    assert deaths.observe({"w": "r2"}) == []
    time_now.now = 0.55
    assert deaths.observe({"w": "r2"}) == [("w", "r2")]


def test_a_signal_back_on_a_look_clears_the_suspicion() -> None:
    deaths, time_now = watch(0.25)
    deaths.observe({"w": "r1", "v": "q1"})
    time_now.now = 0.1
    assert deaths.observe({"v": "q1"}) == []  # w's signal is back
    time_now.now = 0.3
    assert deaths.observe({"w": "r1", "v": "q1"}) == [("v", "q1")]  # w suspected anew
    time_now.now = 0.55
    assert deaths.observe({"w": "r1"}) == [("w", "r1")]


def test_no_grace_confirms_at_the_first_look() -> None:
    deaths, _ = watch(0.0)
    assert deaths.observe({"w": "r1"}) == [("w", "r1")]


def test_a_record_announces_a_token_only_as_a_non_empty_string() -> None:
    assert (
        announced_token(json.dumps({"id": "w", "liveness": "pg-advisory:1:2:3"}))
        == "pg-advisory:1:2:3"
    )
    for record in [
        '{"id": "w"}',
        '{"liveness": null}',
        '{"liveness": ""}',
        '{"liveness": 5}',
        "not json",
        "[1, 2]",
    ]:
        assert announced_token(record) is None
    swapped = without_token(json.dumps({"id": "w", "pid": 7, "liveness": "t"}))
    assert json.loads(swapped) == {"id": "w", "pid": 7} and announced_token(swapped) is None


def test_tokens_parse_back_and_refuse_what_they_did_not_make() -> None:
    lock = LockToken("1700000000.123456", 12, 34)
    assert LockToken.parse(str(lock)) == lock
    client = ClientToken("d32cbaf1", 24705)
    assert ClientToken.parse(str(client)) == client
    for junk in [
        "",
        "pg-advisory",
        "pg-advisory:e:1",
        "pg-advisory:e:-1:2",
        "redis-client:r:1",
        "flock:x.lock",
    ]:
        assert LockToken.parse(junk) is None
    for junk in [
        "",
        "redis-client",
        "redis-client:r:",
        "redis-client::1",
        "redis-client:r:x",
        "pg-advisory:e:1:2",
    ]:
        assert ClientToken.parse(junk) is None


def test_names_and_file_names_take_any_worker_id() -> None:
    assert client_name("host:1:ab") == "conveyor-worker:host:1:ab"
    assert client_name("a b\nc\x00d") == "conveyor-worker:a_b_c_d"  # SETNAME refuses these
    assert lock_file_name("host:1/../x") == "host%3A1%2F..%2Fx.lock"  # stays in its folder
