# The README's commands: `make run` (the main job) and `make test` (the whole suite).
# Both go through `make install`, which builds .venv/ in this checkout.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RUN_DIR := .fluksio-run

.PHONY: install run test lint typecheck clean

install: $(STAMP)

# Reinstalls only when the packaging changes; the installs are editable, so source edits
# need nothing. Both distributions go in one pip call so the engine's pin on
# fluksio-worker==0.2.0 is met by this checkout, never by PyPI.
$(STAMP): pyproject.toml packaging/fluksio-worker/pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./packaging/fluksio-worker -e '.[dev]'
	touch $(STAMP)

run: install
	bash examples/run-demo.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy fluksio tests/support

test: install lint typecheck
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) $(RUN_DIR) build *.egg-info packaging/fluksio-worker/build packaging/fluksio-worker/*.egg-info
