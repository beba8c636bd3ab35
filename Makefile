# Two commands: `make up` (install into .venv and start Corral) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: up test test-fast test-e2e bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(VENV)/.installed $@

up: $(VENV)/.installed
	$(BIN)/corral up

test: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q -ra

test-fast: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q -ra -m "not e2e and not slow"

test-e2e: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q -ra -m e2e

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
