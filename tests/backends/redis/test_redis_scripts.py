"""The Lua scripts: one file per transition, each with a KEYS/ARGV header, the
state table in step with conveyor.lifecycle, and no Lua hidden in Python."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conveyor.backends.redis import lua
from conveyor.lifecycle import ALLOWED

SCRIPTS = Path(lua.__file__).with_name("scripts")
PACKAGE = Path(lua.__file__).parent


@pytest.mark.parametrize("name", lua.SCRIPT_NAMES)
def test_each_script_has_a_header_naming_its_keys_and_args(name: str) -> None:
    text = lua.script_file(name)
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
    body = text[len("\n".join(header)):]
    for index in sorted(set(re.findall(r"ARGV\[(\d+)\]", body)), key=int):
        assert re.search(rf"ARGV\[{index}(\.\.)?\]", "\n".join(header)), f"ARGV[{index}] undocumented"


def test_every_script_file_is_loaded_and_every_name_has_a_file() -> None:
    files = {p.stem for p in SCRIPTS.glob("*.lua")} - {"_lib"}
    assert files == set(lua.SCRIPT_NAMES)


def test_the_lua_state_table_is_conveyor_lifecycle() -> None:
    lib = (SCRIPTS / "_lib.lua").read_text()
    table = lib.split("local ALLOWED = {", 1)[1].split("}", 1)[0]
    pairs = {tuple(p.split(">")) for p in re.findall(r"\['(\w+>\w+)'\] = true", table)}
    assert pairs == {(old.value, new.value) for old, new in ALLOWED}


def test_no_lua_in_python_modules() -> None:
    for module in PACKAGE.glob("*.py"):
        text = module.read_text()
        assert "redis.call(" not in text and ".eval(" not in text, module.name
