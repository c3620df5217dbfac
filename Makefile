# Set-up is part of every target: a fresh machine needs only python3 (3.11+) and make.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast bench lint format typecheck docs

$(BIN)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/.installed  ## a worker running real example jobs on embedded SQLite
	$(BIN)/conveyor demo

# Three test processes on two cores: most tests wait on real servers and worker processes,
# so their waits overlap (CI: 13 min in one process under load, 8.5 min in three).
# worksteal: a process that runs out of tests takes some of another's, so the 10-22 s
# real-process tests do not leave one running alone at the end (561 against 598 s for the
# suite on a slower machine).
test: $(BIN)/.installed  ## every test, the slow real-process fault tests included (what CI runs)
	$(BIN)/pytest -m "slow or not slow" -n 3 --dist worksteal

test-fast: $(BIN)/.installed  ## the quick ones, for the edit-test loop
	$(BIN)/pytest

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/throughput.py

# What CI checks before the tests: ruff's lint and format, mypy over the package and the tests.
LINTED := src tests benchmarks examples mkdocs_hooks.py .ci
# The test directories, each checked on its own (tests/mypy.ini says why); tests/typing holds
# deliberate type errors, which tests/unit/test_typing.py checks mypy reports.
TEST_DIRS = $(sort $(shell find tests -name '*.py' -not -path 'tests/typing/*' \
	-not -path '*/django_site/*/*' -printf '%h\n'))
lint: $(BIN)/.installed  ## ruff (lint, format check) and mypy (package strict, tests)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy --strict src/conveyor
	@set -e; for dir in $(TEST_DIRS); do \
	  echo "mypy $$dir"; \
	  MYPYPATH=$$dir:tests $(BIN)/mypy --config-file tests/mypy.ini --no-error-summary \
	    $$(find $$dir -maxdepth 1 -name '*.py') \
	    $$(find $$dir -mindepth 2 -maxdepth 2 -name __init__.py -printf '%h\n'); \
	done

format: $(BIN)/.installed  ## apply ruff's fixes and formatter
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)

typecheck: $(BIN)/.installed
	$(BIN)/mypy --strict src/conveyor

docs: $(BIN)/.installed  ## the docs site in site/ (what CI builds, strict); `mkdocs serve` to browse
	$(BIN)/mkdocs build --strict
