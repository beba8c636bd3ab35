# Two commands: `make up` (install into .venv and start Corral) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: up test test-fast test-e2e typecheck bench clean browser-deps

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

# Debian's chromium for the Playwright browser tests (`playwright install` cannot download here); sudo only when not root.
browser-deps:
	@command -v chromium >/dev/null || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y --no-install-recommends chromium; } \
	  || echo "WARNING: chromium could not be installed; the browser tests will be skipped"

# mypy --strict over src/corral (files and flags in pyproject's [tool.mypy]); ~15 s cold on 2 cores, <1 s warm.
typecheck: $(VENV)/.dev-installed
	$(BIN)/python -m mypy

# As prerequisites, the type check finishes before pytest starts (with -j as well).
test: $(VENV)/.dev-installed browser-deps typecheck
	$(BIN)/python -m pytest -q -ra

test-fast: $(VENV)/.dev-installed typecheck
	$(BIN)/python -m pytest -q -ra -m "not e2e and not slow"

test-e2e: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q -ra -m e2e

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache
