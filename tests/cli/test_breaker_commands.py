"""`conveyor breakers`: list, open and close by hand, with the audit trail."""

from __future__ import annotations

import json

from cli_harness import Cli

from conveyor import Conveyor


def test_list_open_and_close_a_breaker(cli: Cli, inspector: Conveyor) -> None:
    listed = cli("breakers", "--app", "breaker_app:app").ok().out.splitlines()
    assert listed[0].split() == ["BREAKER", "STATE", "FAILURES", "OPENED", "PROBE"]
    assert listed[1].split() == ["stripe", "closed", "0", "-", "-"]
    assert cli("breakers", "--url", cli.url).ok().out == (
        "no circuit breaker (declare one with app.breaker(...))\n"
    )  # no record yet

    opened = cli("breakers", "open", "stripe", "--app", "breaker_app:app").ok()
    assert opened.out.startswith("breaker stripe is open (held until")
    out = cli("breakers", "list", "--url", cli.url).ok().out
    assert out.splitlines()[1].split()[:4] == ["stripe", "open", "(by", "hand)"]
    assert "when closed by hand" in out
    assert "closed -> open  opened by hand" in out
    [record] = [
        json.loads(line)
        for line in cli("breakers", "list", "--json", "--url", cli.url).ok().out.splitlines()
    ]
    assert (record["name"], record["state"], record["held"]) == ("stripe", "open", True)
    assert [(t["from"], t["to"]) for t in record["history"]] == [("closed", "open")]

    assert (
        cli("breakers", "close", "stripe", "--url", cli.url)
        .ok()
        .out.startswith("breaker stripe is closed")
    )
    assert cli("breakers", "--url", cli.url).ok().out.splitlines()[1].split()[:2] == [
        "stripe",
        "closed",
    ]
    audit = cli("audit", "--url", cli.url).ok().out.splitlines()
    assert [line.split()[4] for line in audit[1:3]] == ["close", "open"]
    assert all(line.endswith("breaker stripe") for line in audit[1:3])


def test_a_breaker_nobody_declared_is_refused(cli: Cli) -> None:
    typo = cli("breakers", "open", "strpe", "--app", "breaker_app:app")
    assert typo.code == 2
    assert typo.err == (
        "conveyor: error: breaker 'strpe' is not known (known: stripe); pass "
        "--app module:attr to name one the app declares\n"
    )
    assert cli("breakers", "open", "stripe", "--url", cli.url).code == 2  # no record, no app
