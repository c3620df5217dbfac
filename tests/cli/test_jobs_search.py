"""`conveyor jobs list` searches arguments and pages with a cursor, like the dashboard."""

from __future__ import annotations

import json

from cli_harness import Cli


def ids(cli: Cli, *args: str) -> list[str]:
    out = cli("jobs", "list", "--json", *args).ok().out
    return [json.loads(line)["id"] for line in out.splitlines()]


def test_list_by_argument_text_error_type_and_cursor(cli: Cli) -> None:
    greetings = [cli.enqueue("greet", name) for name in ("Ada", "Grace", "Alan")]
    assert ids(cli, "--args-contains", "Gra") == [greetings[1]]
    assert ids(cli, "-a", '"Al') == [greetings[2]]
    first = ids(cli, "-n", "2")
    assert first == [greetings[2], greetings[1]]
    assert ids(cli, "-n", "2", "--after", first[-1]) == [greetings[0]]
    assert ids(cli, "--error-type", "KeyError") == []
    gone = cli("jobs", "list", "--after", "no-such-job")
    assert gone.code == 1 and "no longer exists" in gone.err
