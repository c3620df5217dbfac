"""The package's import layers (docs/architecture.md), read from the source with `ast`.

Every import counts: at module level, under `if TYPE_CHECKING:` and inside
functions. Importing `a.b.c` from outside package `a.b` also runs `a/b/__init__.py`,
so it counts as importing that package too (that is how `admin` once reached the
whole worker through `conveyor.worker.liveness`). The rules:

* no import cycle;
* a backend module imports neither the worker nor the app (nor what sits above
  them: the CLI, the dashboard, the integrations);
* the core (everything but `conveyor/backends/<name>/`, `contrib`, `cli`, `web`, `testing`)
  imports no backend's own modules: it gets a backend by URL from
  `conveyor.backends.backend_from_url`, the one registry;
* the tree names the layers: every layer of docs/architecture.md is a folder, but for the
  few modules at the top of the package (`TOP_LEVEL_MODULES`);
* no class is sawn into parts: a class inherits from another class of the package only when
  that one is a Protocol, an exception or a base made to be extended (`EXTENSION_BASES`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
# The only modules at the top of the package: everything else sits in the folder of its layer.
TOP_LEVEL_MODULES = {
    "conveyor.__main__",
    "conveyor.app",
    "conveyor.task",
    "conveyor.handle",
    "conveyor.context",
    "conveyor.once",
}
# Above the app and the worker: a backend never imports these (nor the package root,
# which imports the app).
ABOVE_BACKENDS = (
    "conveyor",
    "conveyor.app",
    "conveyor.worker",
    "conveyor.ops",
    "conveyor.cli",
    "conveyor.web",
    "conveyor.contrib",
    "conveyor.testing",
)
OUTSIDE_CORE = ("conveyor.cli", "conveyor.web", "conveyor.contrib", "conveyor.testing")


@dataclass(frozen=True)
class Edge:
    """Module `source` (the file `path`, from the root) imports `target`, at `line`,
    by the statement `text`."""

    source: str
    target: str
    path: Path
    line: int
    text: str

    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Graph:
    modules: dict[str, Path] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)
    edges: dict[str, dict[str, Edge]] = field(default_factory=dict)  # source -> target -> first


def _module_name(root: Path, path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def import_graph(root: Path, package: str) -> Graph:
    """Every import between the modules of `package` (a folder under `root`)."""
    graph = Graph()
    for path in sorted((root / package).rglob("*.py")):
        name, is_package = _module_name(root, path)
        graph.modules[name] = path
        if is_package:
            graph.packages.add(name)
    for name, path in graph.modules.items():
        here = name if name in graph.packages else name.rpartition(".")[0]
        out: dict[str, Edge] = {}
        source = path.read_text()
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # `from pkg import sub` imports the module pkg.sub; `from mod import name`, mod.
                targets = [
                    f"{module}.{a.name}" if f"{module}.{a.name}" in graph.modules else module
                    for a in node.names
                ]
            else:
                continue
            text = (ast.get_source_segment(source, node) or "").replace("\n", " ")
            for target in targets:
                while target and target not in graph.modules:  # `import a.b.name`
                    target = target.rpartition(".")[0]
                if not target:
                    continue  # not ours
                # The packages the target sits in run first, unless `name` is inside them.
                parts = target.split(".")
                for n in range(1, len(parts) + 1):
                    reached = ".".join(parts[:n])
                    inside = name == reached or name.startswith(reached + ".")
                    if reached != name and not inside and reached not in out:
                        out[reached] = Edge(
                            name, reached, path.relative_to(root), node.lineno, text
                        )
        graph.edges[name] = out
    return graph


def cycles(graph: Graph) -> list[tuple[set[str], list[Edge]]]:
    """Each group of modules that import each other, with one shortest cycle in it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return [(group, _shortest_cycle(graph, group)) for group in groups]


def _shortest_cycle(graph: Graph, group: set[str]) -> list[Edge]:
    """Breadth first from the group's first module, inside the group, back to it."""
    start = min(group)
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w, edge in sorted(graph.edges[v].items()):
                if w == start:
                    return paths[v] + [edge]
                if w in group and w not in paths:
                    paths[w] = paths[v] + [edge]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # a group always has one


def describe(group: set[str], cycle: list[Edge]) -> str:
    steps = "\n".join(f"    {e.source} -> {e.target}   ({e.where()}: {e.text})" for e in cycle)
    return (
        f"  {len(group)} modules import each other: {', '.join(sorted(group))}\n"
        f"  for one: {' -> '.join([cycle[0].source] + [e.target for e in cycle])}\n{steps}"
    )


# Packages under conveyor.backends that are part of the seam, not a backend.
SEAM_PACKAGES = {"conveyor.backends.blobs"}


def backend_names(graph: Graph) -> set[str]:
    return {
        p
        for p in graph.packages
        if p.count(".") == 2 and p.startswith("conveyor.backends.") and p not in SEAM_PACKAGES
    }


def under(module: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(SRC, "conveyor")


def test_no_import_cycle(graph: Graph) -> None:
    found = cycles(graph)
    assert not found, (
        "import cycles (type-only and function-local imports count; give the "
        "lower layer a Protocol of what it needs, or move the wiring up a layer):\n"
        + "\n".join(describe(*c) for c in found)
    )


def upward_from_backends(graph: Graph) -> list[Edge]:
    return [
        edge
        for source, targets in graph.edges.items()
        if under(source, ("conveyor.backends",))
        for target, edge in targets.items()
        if target == "conveyor" or under(target, ABOVE_BACKENDS[1:])
    ]


def backends_from_core(graph: Graph) -> list[Edge]:
    backends = backend_names(graph)
    return [
        edge
        for source, targets in graph.edges.items()
        if not under(source, backends) and not under(source, OUTSIDE_CORE)
        for target, edge in targets.items()
        if under(target, backends)
    ]


def listed(edges: list[Edge]) -> str:
    return "\n".join(f"  {e.source} -> {e.target}   ({e.where()}: {e.text})" for e in edges)


def test_backends_import_neither_the_worker_nor_the_app(graph: Graph) -> None:
    wrong = upward_from_backends(graph)
    assert not wrong, "backend modules import layers above them:\n" + listed(wrong)


def test_the_core_imports_no_backend_module(graph: Graph) -> None:
    assert {
        "conveyor.backends.sqlite",
        "conveyor.backends.postgres",
        "conveyor.backends.redis",
    } <= backend_names(graph)
    wrong = backends_from_core(graph)
    assert not wrong, (
        "core modules import a backend directly (choose it by URL: "
        "conveyor.backends.backend_from_url):\n" + listed(wrong)
    )


def test_the_tree_names_the_layers(graph: Graph) -> None:
    top = {m for m in graph.modules if m.count(".") == 1 and m not in graph.packages}
    assert top == TOP_LEVEL_MODULES, (
        "modules at the top of the package besides the app's own (put them in their layer's "
        f"folder): {sorted(top - TOP_LEVEL_MODULES)}; gone: {sorted(TOP_LEVEL_MODULES - top)}"
    )
    entries = [name.removesuffix(".*") for names in documented_layers() for name in names]
    loose = [
        n
        for n in entries
        if n != "conveyor" and n not in graph.packages and n not in TOP_LEVEL_MODULES
    ]
    assert not loose, f"layers of {ARCHITECTURE.name} that are modules, not folders: {loose}"


# --- the layers as docs/architecture.md lists them -----------------------------------------
def _between(text: str, name: str) -> list[str]:
    start, end = text.index(f"<!-- {name} -->"), text.index(f"<!-- /{name} -->")
    return [
        line for line in text[start:end].splitlines() if line[:1].isdigit() or line.startswith("- ")
    ]


def documented_layers() -> list[list[str]]:
    """The module names of each layer, top first."""
    return [
        re.findall(r"`(conveyor[\w.*]*)`", line)
        for line in _between(ARCHITECTURE.read_text(), "layers")
    ]


def layer_of(module: str, layers: list[list[str]], packages: set[str]) -> int | None:
    """The layer of the most specific entry naming `module` (`conveyor` alone names
    only the package root; `*` one package)."""
    best: tuple[int, int] | None = None  # (specificity, layer)
    for number, names in enumerate(layers):
        for name in names:
            if name == "conveyor":
                hit = module == "conveyor"
            else:
                parts, have = name.split("."), module.split(".")
                hit = len(have) >= len(parts) and all(
                    p == h or (p == "*" and ".".join(have[: i + 1]) in packages)
                    for i, (p, h) in enumerate(zip(parts, have, strict=False))
                )
            if hit and (best is None or len(name.split(".")) > best[0]):
                best = (len(name.split(".")), number)
    return None if best is None else best[1]


def test_every_module_imports_only_its_layer_and_those_below(graph: Graph) -> None:
    layers = documented_layers()
    assert len(layers) >= 5
    found = {m: layer_of(m, layers, graph.packages) for m in graph.modules}
    place = {m: n for m, n in found.items() if n is not None}
    unplaced = sorted(set(found) - set(place))
    assert not unplaced, f"modules in no layer of {ARCHITECTURE.name} (add them):\n  " + (
        "\n  ".join(unplaced)
    )
    stale = sorted(
        n
        for names in layers
        for n in names
        if n != "conveyor"
        and not any(layer_of(m, [[n]], graph.packages) is not None for m in graph.modules)
    )
    assert not stale, f"{ARCHITECTURE.name} names modules that do not exist: {stale}"
    upward = [
        edge
        for source, targets in graph.edges.items()
        for target, edge in targets.items()
        if place[target] < place[source]
    ]
    assert not upward, (
        f"imports from a higher layer than the importer's ({ARCHITECTURE.name}: "
        "move one of them, or give the lower one a Protocol):\n" + listed(upward)
    )


def test_the_documented_verbs_are_the_roles_verbs() -> None:
    from conveyor.backends import contract as base

    documented = {}
    for line in _between(ARCHITECTURE.read_text(), "roles"):
        role, _, verbs = line.partition(": ")
        documented[role.strip("-* ")] = re.findall(r"`(\w+)`", verbs)
    declared = {
        role.__name__: [
            name
            for name, value in vars(role).items()
            if callable(value) and not name.startswith("_")
        ]
        for role in (base.JobLifecycle, base.Inspector, base.FlowState, base.SharedRecords)
    }
    assert documented == declared


# --- the walker itself, on a made-up package ----------------------------------------------
def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_type_only_and_function_local_imports_make_a_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/app.py": "from .task import Task\n",
            "pkg/task.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .handle import Handle\n"
            ),
            "pkg/handle.py": "def get():\n    from pkg import app\n    return app\n",
            "pkg/leaf.py": "import pkg.task\n",
        },
    )
    found = cycles(import_graph(tmp_path, "pkg"))
    assert [[(e.source, e.target) for e in c] for _, c in found] == [
        [("pkg.app", "pkg.task"), ("pkg.task", "pkg.handle"), ("pkg.handle", "pkg.app")]
    ]
    text = describe(*found[0])
    assert "pkg.app -> pkg.task -> pkg.handle -> pkg.app" in text
    assert "pkg/handle.py:2: from pkg import app" in text


def test_importing_a_module_of_a_package_imports_the_package(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/admin.py": "from .worker.names import NAME\n",
            "pkg/worker/__init__.py": "from .main import Worker\n",
            "pkg/worker/names.py": "NAME = 'workers'\n",
            "pkg/worker/main.py": "from .names import NAME\nfrom ..admin import x\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert set(graph.edges["pkg.admin"]) == {"pkg.worker", "pkg.worker.names"}
    assert set(graph.edges["pkg.worker.main"]) == {"pkg.worker.names", "pkg.admin"}  # inside
    assert [[e.source for e in c] for _, c in cycles(graph)] == [
        ["pkg.admin", "pkg.worker", "pkg.worker.main"]
    ]


def test_the_layer_rules_name_each_wrong_import(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "conveyor/__init__.py": "",
            "conveyor/app.py": "from .backends import from_url\n",
            "conveyor/admin.py": "from .backends.sqlite.store import Store\n",
            "conveyor/backends/__init__.py": "",
            "conveyor/backends/contract.py": "",
            "conveyor/backends/sqlite/__init__.py": "",
            "conveyor/backends/sqlite/store.py": "def f():\n    from ...worker import config\n",
            "conveyor/worker/__init__.py": "",
            "conveyor/worker/config.py": "",
            "conveyor/cli/main.py": "from ..backends.sqlite import store\n",  # allowed
        },
    )
    graph = import_graph(tmp_path, "conveyor")
    assert listed(upward_from_backends(graph)) == (
        "  conveyor.backends.sqlite.store -> conveyor.worker   "
        "(conveyor/backends/sqlite/store.py:2: from ...worker import config)\n"
        "  conveyor.backends.sqlite.store -> conveyor.worker.config   "
        "(conveyor/backends/sqlite/store.py:2: from ...worker import config)"
    )
    assert [(e.source, e.target) for e in backends_from_core(graph)] == [
        ("conveyor.admin", "conveyor.backends.sqlite"),
        ("conveyor.admin", "conveyor.backends.sqlite.store"),
    ]


# --- one concept per module: no class sawn into parts ------------------------------------
# In-package base classes made to be extended: users subclass the app (Django's) and the
# manual clock (the testing toolkit); features subclass the worker's plug-in; every
# backend's liveness holder its signal holder; every outcome Outcome.
EXTENSION_BASES = {"Conveyor", "ManualClock", "WorkerPlugin", "SignalHolder", "Outcome"}


def _class_bases(root: Path) -> dict[str, list[tuple[Path, list[str]]]]:
    """Each class of the package by name: where it is defined and the names of its bases."""
    found: dict[str, list[tuple[Path, list[str]]]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = []
                for base in node.bases:
                    if isinstance(base, ast.Subscript):
                        base = base.value
                    if isinstance(base, ast.Name):
                        bases.append(base.id)
                    elif isinstance(base, ast.Attribute):
                        bases.append(base.attr)
                found.setdefault(node.name, []).append((path.relative_to(root.parent), bases))
    return found


def sawn_classes(root: Path) -> list[str]:
    """Classes that inherit from another class of the package that is neither an exception,
    a Protocol, nor a base made to be extended: a class split into mixins or a chain of
    partial classes to shorten its files (compose role objects instead)."""
    classes = _class_bases(root)

    def is_protocol(name: str) -> bool:  # PEP 544: a protocol lists Protocol itself
        return any("Protocol" in bases for _, bases in classes.get(name, []))

    def is_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in {"Exception", "BaseException", "ValueError", "TypeError"}:
            return True
        return name not in seen and any(
            is_error(b, seen | {name}) for _, bases in classes.get(name, []) for b in bases
        )

    wrong = []
    for name, defs in sorted(classes.items()):
        for path, bases in defs:
            if is_protocol(name) or is_error(name):
                continue
            partial = [
                b for b in bases if b in classes and b not in EXTENSION_BASES and not is_protocol(b)
            ]
            if partial:
                wrong.append(f"  {path}: {name}({', '.join(bases)})")
    return wrong


def test_no_class_is_sawn_into_parts() -> None:
    wrong = sawn_classes(SRC / "conveyor")
    assert not wrong, (
        "classes built from partial classes of the package (one concept per "
        "module: compose role objects, or list a base made to be extended in "
        "EXTENSION_BASES):\n" + "\n".join(wrong)
    )


def test_a_mixin_is_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/reads.py": "class Reads:\n    pass\n",
            "pkg/errors.py": "class Oops(Exception):\n    pass\nclass Worse(Oops):\n    pass\n",
            "pkg/backend.py": (
                "from .reads import Reads\nfrom typing import Protocol\n"
                "class Role(Protocol):\n    pass\n"
                "class Backend(Reads, Role):\n    pass\n"
            ),
        },
    )
    assert sawn_classes(tmp_path / "pkg") == ["  pkg/backend.py: Backend(Reads, Role)"]
