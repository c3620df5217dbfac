"""Every code block of the docs either runs here or says why not (code_blocks.py)."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from code_blocks import NEVER_RUN, ROOT, RUN, Block, blocks, pages

from conveyor import Conveyor

PAGES = pages()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_block_says_what_it_is(page: Path) -> None:
    for block in blocks(page):
        assert block.language in RUN | NEVER_RUN, (
            f"{block.where}: a fence with language {block.language!r}; give it one of "
            f"{sorted(RUN | NEVER_RUN)} (see tests/docs/code_blocks.py)"
        )
        if block.not_run is not None:
            assert block.language in RUN, (
                f"{block.where}: only Python blocks are run, so only they take a 'not run' mark"
            )


RUNNABLE = [p for p in PAGES if any(b.runs for b in blocks(p))]


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_the_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path / 'jobs.db'}")
    namespace: dict[str, Any] = {"__name__": "docs_page"}
    loop = asyncio.new_event_loop()
    try:
        for block in blocks(page):
            if block.runs:
                run(block, namespace, loop)
    finally:
        for value in list(namespace.values()):
            if isinstance(value, Conveyor):
                loop.run_until_complete(value.aclose())
                value.close()
        loop.close()


def run(block: Block, namespace: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    try:
        code = compile(block.source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if inspect.isawaitable(result):
            loop.run_until_complete(result)
    except Exception as exc:
        raise AssertionError(
            f"{block.where}: the block failed with {type(exc).__name__}: "
            f"{exc}\n(mark it <!-- not run: reason --> if it cannot run "
            f"here)\n{block.source}"
        ) from exc


def test_how_a_page_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import code_blocks

    monkeypatch.setattr(code_blocks, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\n```\n\n<!-- not run: needs a server -->\n"
        "```python\nconnect()\n```\n\n- item\n\n    ```sh\n    make test\n    ```\n"
    )
    found = blocks(page)
    assert [(b.line, b.language, b.source, b.not_run, b.runs) for b in found] == [
        (3, "python", "x = 1\n", None, True),
        (8, "python", "connect()\n", "needs a server", False),
        (14, "sh", "make test\n", None, False),
    ]
    assert found[0].where == "page.md:3"
