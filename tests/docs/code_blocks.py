"""The code blocks of the docs (docs/*.md and README.md), and the rule each follows.

How a doc writer marks a block:

* ```` ```python ```` blocks run, in page order, in one namespace per page (so a
  block may use what an earlier block of the page defined), in a fresh folder with
  `$CONVEYOR_URL` set to a SQLite file there. Top-level `await` is allowed. A block
  may end with `# -> value`-free plain code; assertions in a block are checked.
* A Python block that cannot run here (it needs a server or a library that the tests
  do not have, or it is a fragment) has this line right above its fence, with the
  reason: `<!-- not run: needs a PostgreSQL orders table -->`.
* Other languages are never run: commands (`sh`), output and data (`text`, `json`,
  `ini`, `toml`, `yaml`), diagrams (`mermaid`), other code (`sql`, `lua`). A fence
  without a language fails the check: say what the block is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = frozenset({"python", "py"})
NEVER_RUN = frozenset(
    {"sh", "console", "text", "json", "ini", "toml", "yaml", "mermaid", "sql", "lua", "html"}
)
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>.*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    source: str
    not_run: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUN and self.not_run is None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = opening["info"].strip().split(" ")[0].split("{")[0].lower()
        marker = _NOT_RUN.match(lines[i - 1]) if i > 0 else None
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][indent:])
            j += 1
        found.append(
            Block(
                page, i + 1, language, "\n".join(body) + "\n", marker["reason"] if marker else None
            )
        )
        i = j + 1
    return found
