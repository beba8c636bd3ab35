# Two commands: `make up` (install into .venv and start Corral) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: up test test-fast test-e2e test-podman typecheck lint bench clean browser-deps directory-deps docker-deps podman-deps slurm-deps mutate mutate-sample

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
# apt waits up to 10 minutes for the dpkg lock (another apt run, unattended-upgrades) instead of giving up at once.
APT_WAIT := -o DPkg::Lock::Timeout=600
browser-deps:
	@command -v chromium >/dev/null || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get $(APT_WAIT) update -qq && $$SUDO apt-get $(APT_WAIT) install -y --no-install-recommends chromium; } \
	  || echo "WARNING: chromium could not be installed; the browser tests will be skipped (under CI=true they fail)"

# The container tests' real parts (tests/docker_deps.sh): Debian's docker.io (apt waits for the dpkg lock), dockerd
# started by hand when none answers (no systemd needed), and the local image corral-test/busybox:1 built from
# busybox-static (nothing is pulled from the internet); sudo only when not root. A part that cannot be had is a
# WARNING: the container tests then skip loudly (fail under CI=true).
docker-deps:
	@tests/docker_deps.sh

# Podman's Docker-compatible API socket (tests/podman_deps.sh): Debian's podman (with crun/runc, conmon, netavark,
# catatonit), `podman system service` on unix:///run/podman/podman.sock, the same local test image; the registry is
# docker-deps'. The container tests then run once more against it: the same executor code on the other engine.
podman-deps: docker-deps
	@tests/podman_deps.sh

# The slurm pool tests' real parts (tests/slurm_deps.sh): Debian's Slurm 22.05 and munge; the tests start their own
# throw-away cluster with fake GPU device files (tests/slurm_cluster.py). Missing: they skip loudly (fail in CI).
slurm-deps:
	@tests/slurm_deps.sh
# (the executor on the engine, the image cache, and the private-registry flow end to end: about a minute; the other
# container e2e files pass on Podman too: make test-podman PODMAN_TESTS="tests/e2e/test_container*.py")
PODMAN_TESTS ?= tests/integration/test_container_executor.py tests/integration/test_image_cache.py \
  tests/e2e/test_container_registry.py tests/integration/test_container_web_port.py
test-podman: $(VENV)/.dev-installed podman-deps
	CORRAL_DOCKER_HOST=unix:///run/podman/podman.sock $(BIN)/python -m pytest -q -ra $(PODMAN_TESTS)

# The directory-login tests' real parts: Debian's OpenLDAP slapd (+ ldap-utils), and an OpenID Connect provider
# (panva's oidc-provider, pinned in tests/directory_login/oidc_provider/package-lock.json) run by node. apt waits
# for the dpkg lock rather than giving up; sudo only when not root. Missing parts make those tests skip loudly
# (fail under CI=true).
OIDC_OP := tests/directory_login/oidc_provider
directory-deps: $(OIDC_OP)/node_modules/.installed
	@command -v slapd >/dev/null || [ -x /usr/sbin/slapd ] && command -v ldapsearch >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "slapd slapd/no_configuration boolean true" | $$SUDO debconf-set-selections; \
	  $$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
	    slapd ldap-utils; } || echo "WARNING: slapd could not be installed; the LDAP tests will be skipped"

$(OIDC_OP)/node_modules/.installed: $(OIDC_OP)/package.json $(OIDC_OP)/package-lock.json
	@command -v npm >/dev/null && (cd $(OIDC_OP) && npm ci --no-audit --no-fund --silent) && touch $@ \
	  || echo "WARNING: the OpenID Connect provider could not be installed (node 20+ and npm); its tests will be skipped"

# mypy --strict over src/corral (files and flags in pyproject's [tool.mypy]); ~15 s cold on 2 cores, <1 s warm.
typecheck: $(VENV)/.dev-installed
	$(BIN)/python -m mypy

# ruff (lint rules, import order, formatting; config in pyproject's [tool.ruff]) over src, tests and bench; < 2 s.
# To fix what it reports: $(BIN)/ruff check --fix src tests bench && $(BIN)/ruff format src tests bench
lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# The tests run on TEST_WORKERS pytest-xdist workers (docs/testing.md): one per core, at least 2, at most 4. At least
# 2 on 2 cores because an end-to-end test spends most of its time waiting on its server, agent and CLI processes
# (one process left a core idle: on the 2-core CI machine, busy with other runs too, pytest took 43 min in one
# process and 22 min on 2 workers, serial part included), and no more: a third worker on 2 cores gains little on the
# CPU-bound unit tests and stretches the e2e tests' deadlines. At most 4:
# the container-engine and browser groups run on one worker each whatever the count, and each e2e worker holds a
# `corral up`, agents and PostgreSQL connections. `make test TEST_WORKERS=1` runs in one process (still through
# xdist's scheduler; `pytest FILE` with no -n runs plainly).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -lt 2 ] && n=2; [ $$n -gt 4 ] && n=4; echo $$n)
# $(call run_tests,PARALLEL,SERIAL): the tests the mark expression PARALLEL selects on the workers with --dist
# loadgroup (tests go one by one to whichever worker is free, except that the tests of one
# @pytest.mark.xdist_group("NAME") all run on one worker, one after another), then those SERIAL selects (the
# `serial` ones) in one process, alone on the machine (exit status 5, none selected, is fine). Both parts always
# run; the status is a failure if either failed.
run_tests = rc=0; \
  $(BIN)/python -m pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup -m "$(1)" || rc=$$?; \
  $(BIN)/python -m pytest -q -ra -m "$(2)" || [ $$? = 5 ] || rc=1; \
  exit $$rc

# As prerequisites, lint and the type check finish before pytest starts (with -j as well).
test: $(VENV)/.dev-installed browser-deps directory-deps docker-deps podman-deps slurm-deps lint typecheck
	$(call run_tests,not serial,serial)
	CORRAL_DOCKER_HOST=unix:///run/podman/podman.sock $(BIN)/python -m pytest -q -ra $(PODMAN_TESTS)

test-fast: $(VENV)/.dev-installed directory-deps docker-deps lint typecheck
	$(call run_tests,not e2e and not slow and not serial,serial and not e2e and not slow)

test-e2e: $(VENV)/.dev-installed directory-deps docker-deps slurm-deps
	$(call run_tests,e2e and not serial,e2e and serial)

# Mutation testing (issue 21; not in CI: hours on two cores): mutmut over core/, scheduler/ and the store's job-state
# guards, killed by the fast tests ([tool.mutmut] in pyproject.toml; docs/testing.md). The score and every surviving
# mutant go to artifacts/mutation/report.txt. MUTANTS narrows the run: make mutate MUTANTS='corral.core.states*'
MUTANTS ?=
QUOTED_MUTANTS = $(foreach m,$(MUTANTS),'$(m)')
$(VENV)/.mutate-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,mutate]'
	touch $(VENV)/.installed $(VENV)/.dev-installed $@

mutate: $(VENV)/.mutate-installed
	$(BIN)/mutmut run $(QUOTED_MUTANTS)
	mkdir -p artifacts/mutation
	$(BIN)/python bench/mutation_score.py --diffs $(QUOTED_MUTANTS) | tee artifacts/mutation/report.txt

# A seeded sample where the full run would take hours: make mutate-sample MUTANTS='corral.scheduler*' SAMPLE=300 SEED=1
# (the first mutmut run generates the mutants and the test stats; the second runs the sampled mutants only).
SAMPLE ?= 300
SEED ?= 1
mutate-sample: $(VENV)/.mutate-installed
	$(BIN)/mutmut run 'corral.core.states.x_can_transition__mutmut_1'
	$(BIN)/mutmut run $$($(BIN)/python bench/mutation_score.py --sample $(SAMPLE) --seed $(SEED) --names $(QUOTED_MUTANTS))
	mkdir -p artifacts/mutation
	$(BIN)/python bench/mutation_score.py --sample $(SAMPLE) --seed $(SEED) --diffs $(QUOTED_MUTANTS) | tee artifacts/mutation/report.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache mutants
