"""MkDocs hooks for this site: doctest lines in docstrings (`>>> app.close()`) shown as
Python code. The docstrings follow the standard library's style, which Markdown would
otherwise read as a block quote."""

from __future__ import annotations

import re
from typing import Any

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority

_FENCE = re.compile(r"^\s*(```|~~~)")
_PROMPT = re.compile(r"^(\s*)>>> ")


class DoctestFences(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        in_fence = False
        i = 0
        while i < len(lines):
            line = lines[i]
            if _FENCE.match(line):
                in_fence = not in_fence
            prompt = None if in_fence else _PROMPT.match(line)
            if prompt is None:
                out.append(line)
                i += 1
                continue
            indent = prompt.group(1)
            block: list[str] = []
            while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
                block.append(lines[i][len(indent) :])
                i += 1
            out.extend(["", f"{indent}```pycon", *(indent + b for b in block), f"{indent}```", ""])
        return out


class DoctestExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:
        md.preprocessors.register(DoctestFences(md), "conveyor_doctest", 40)


@event_priority(100)  # before mkdocstrings reads the Markdown extensions
def on_config(config: Any) -> Any:
    config.markdown_extensions.append(DoctestExtension())
    return config
