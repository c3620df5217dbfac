"""The Lua scripts: one file per transition, each with a KEYS/ARGV header, the
state table in step with conveyor.model.lifecycle, and no Lua hidden in Python."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conveyor.backends.redis import script_sources
from conveyor.model.lifecycle import ALLOWED

SCRIPTS = Path(script_sources.__file__).with_name("scripts")
PACKAGE = Path(script_sources.__file__).parent


@pytest.mark.parametrize("name", script_sources.SCRIPT_NAMES)
def test_each_script_has_a_header_naming_its_keys_and_args(name: str) -> None:
    text = script_sources.script_file(name)
    header = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    assert header and header[0].startswith(f"-- {name}.lua: "), "first line names the script"
    assert any(re.match(r"-- KEYS\[1\] ", line) for line in header), "KEYS listed"
    assert any(re.match(r"-- ARGV\[1\] key prefix", line) for line in header), "ARGV listed"
    assert any(line.startswith("-- Returns") for line in header), "reply described"
    # Every ARGV the body reads is in the header.
    body = text[len("\n".join(header)) :]
    for index in sorted(set(re.findall(r"ARGV\[(\d+)\]", body)), key=int):
        assert re.search(rf"ARGV\[{index}(\.\.)?\]", "\n".join(header)), (
            f"ARGV[{index}] undocumented"
        )


def test_every_script_file_is_loaded_and_every_name_has_a_file() -> None:
    files = {p.stem for p in SCRIPTS.glob("*.lua")} - {"_lib"}
    assert files == set(script_sources.SCRIPT_NAMES)


def test_the_lua_state_table_is_conveyor_lifecycle() -> None:
    lib = (SCRIPTS / "_lib.lua").read_text()
    table = lib.split("local ALLOWED = {", 1)[1].split("}", 1)[0]
    pairs = {tuple(p.split(">")) for p in re.findall(r"\['(\w+>\w+)'\] = true", table)}
    assert pairs == {(old.value, new.value) for old, new in ALLOWED}


def test_no_lua_in_python_modules() -> None:
    for module in PACKAGE.glob("*.py"):
        text = module.read_text()
        assert "redis.call(" not in text and ".eval(" not in text, module.name


def test_lib_cuts_into_every_top_level_definition_once() -> None:
    lib = (SCRIPTS / "_lib.lua").read_text()
    names = [name for name, _ in script_sources.lib_definitions()]
    assert names == re.findall(r"^local (?:function )?(\w+)", lib, re.M)
    # Nothing is lost between the pieces: every code line of the file is in one of them.
    pieces = "\n".join(text for _, text in script_sources.lib_definitions()).splitlines()
    code = [line for line in lib.splitlines() if line.strip() and not line.startswith("--")]
    assert [line for line in pieces if line.strip() and not line.startswith("--")] == code


@pytest.mark.parametrize("name", script_sources.SCRIPT_NAMES)
def test_each_script_is_sent_with_exactly_the_helpers_it_names(name: str) -> None:
    source = script_sources.script_source(name)
    defined = set(re.findall(r"^local (?:function )?(\w+)", source, re.M))
    words = set(re.findall(r"\b\w+\b", source))
    helpers = {helper for helper, _ in script_sources.lib_definitions()}
    # Every helper the sent text names is defined in it (a missing one would only fail
    # at run time, on the path that calls it) ...
    assert helpers & words <= defined
    # ... and a helper nothing names is left out (that is the point of the cut).
    if name == "enqueue":
        assert "local ALLOWED" not in source and "local function append_error" not in source
