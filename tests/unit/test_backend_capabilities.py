"""Optional backend capabilities are declared protocols, and each backend has the
ones its documentation promises (and no others)."""

from __future__ import annotations

import pytest

from conveyor.backends import backend_from_url
from conveyor.backends.capabilities import (
    BlockingEnqueue,
    CompleteInTransaction,
    RecordsInTransaction,
    TransactionalEnqueue,
)
from conveyor.backends.contract import Backend

CAPABILITIES = (TransactionalEnqueue, CompleteInTransaction, RecordsInTransaction, BlockingEnqueue)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///unused.db", {BlockingEnqueue}),
        (
            "postgresql://localhost/test",
            {TransactionalEnqueue, CompleteInTransaction, RecordsInTransaction, BlockingEnqueue},
        ),
        ("redis://localhost:6379/0", {BlockingEnqueue}),
        ("memory://capabilities", {BlockingEnqueue}),
    ],
)
def test_each_backend_declares_what_it_can_do(url: str, expected: set[type]) -> None:
    backend = backend_from_url(url)  # nothing connects before open()
    assert isinstance(backend, Backend)
    assert {c for c in CAPABILITIES if isinstance(backend, c)} == expected
