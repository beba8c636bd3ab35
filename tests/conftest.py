"""Shared fixtures: databases (SQLite and a fresh PostgreSQL database per test) and stores; the parallel run's
rules (the `serial` mark) and the `figure` fixture (numbers a test measured, shown at the end of the run)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from realparts import missing_real_part  # noqa: F401  (re-exported for fixtures here)

# No per-example deadline: on a busy 2-core CI machine timings vary tenfold, and speed is measured in bench/.
# Derandomized: CI explores the same examples every run (a red run is then a regression, not a new draw);
# HYPOTHESIS_PROFILE=explore searches fresh examples, as a developer should before changing a property.
settings.register_profile("corral", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("explore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "corral"))

PG_ADMIN_URL = os.environ.get("CORRAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
_pg_problem: str | None = None


def postgres_problem() -> str | None:
    """None when PostgreSQL is reachable for tests, else why not (checked once)."""
    global _pg_problem
    if _pg_problem is None:
        try:
            import psycopg

            with psycopg.connect(PG_ADMIN_URL, connect_timeout=3, autocommit=True):
                _pg_problem = ""
        except Exception as e:  # any failure means: skip, loudly
            _pg_problem = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {e}"
    return _pg_problem or None


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    problem = postgres_problem()
    if problem:  # under CI=true this fails the run: a connection error never turns the PostgreSQL tests into skips
        missing_real_part("PostgreSQL", f"{problem} (set CORRAL_TEST_POSTGRES_URL, or start it on 127.0.0.1:5432)")
    import psycopg

    name = f"corral_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every store test runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'corral.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(database_url: str) -> Iterator[object]:
    from corral.store.sql import open_store

    s = open_store(database_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def ready_nodes(store: Any) -> Callable[..., None]:
    """Registers READY nodes in `store`, each with `gpus` healthy H100s (indices 0..gpus-1): assign_job re-checks,
    as the applier does, that the node is known and READY and each GPU it gives exists and is free.
    No CPU or memory: a job that asks for none fits (jobs that ask register their own nodes)."""
    from corral.core.resources import GpuInfo

    def register(*names: str, gpus: int = 4, now: datetime = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)) -> None:
        for n in names:
            inventory = [GpuInfo(index=i, uuid=f"{n}-{i}", model="H100-80GB", memory_mib=81920) for i in range(gpus)]
            store.upsert_node(n, n, "simulated", 0, 0, {}, inventory, now)

    return register


# ---- running in parallel (pytest-xdist; docs/testing.md) ---------------------------------------------------------
# `make test` runs the suite on several workers with `--dist loadgroup`: tests go one by one to whichever worker is
# free, except that the tests of one `@pytest.mark.xdist_group("NAME")` all run on the same worker, one after another
# (what shares a machine-wide resource: the container engine's images and node names, one chromium at a time).
# `@pytest.mark.serial` is for a test that must not share the machine at all (it asserts a latency that a busy
# neighbour would stretch): `make test` leaves it out of the parallel run and runs it afterwards, alone.


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook (see below)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    grouping = bool(getattr(config.option, "loadgroup", False))  # an xdist worker under --dist loadgroup
    for item in items:
        # Run with -n anyway (a developer's `pytest -n 2 tests/e2e`): the serial tests at least keep to one worker.
        if item.get_closest_marker("serial") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("serial"))
        mark = item.get_closest_marker("xdist_group")
        if grouping and mark:
            _suffix_group(item, str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")))


def _suffix_group(item: pytest.Item, group: str) -> None:
    """What pytest-xdist's worker does for --dist loadgroup, done so that it works on pytest 9: the controller
    schedules by the `@GROUP` suffix of each test id a worker reports. xdist (3.6.1, and 3.8.0 too) sets
    `item._nodeid`, which pytest 9 no longer reads (the id is the NodeId in `item._id`): without this, every
    xdist_group would be silently ignored and its tests spread over the workers."""
    if item.nodeid.endswith(f"@{group}"):  # xdist's own suffix took (an older pytest, or a fixed xdist)
        return
    new_id = f"{item.nodeid}@{group}"
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest before 9: xdist's way
        item._nodeid = new_id  # type: ignore[attr-defined]
        return
    item._id = NodeId.parse(new_id)  # type: ignore[attr-defined]
    assert item.nodeid == new_id, f"pytest's node ids changed again: {item.nodeid!r}; see _suffix_group"


# ---- figures: what a test measured, in the CI log ------------------------------------------------------------------
# A passing test's print() is captured and never shown (with or without workers). `figure(text)` records a line
# in the test's report (its user_properties, where record_property puts values: they travel from a pytest-xdist
# worker to the controller, and --junitxml writes them); every figure of the run is listed at its end, "figures",
# whether the test passed or failed. It is printed as well, for a run with -s.
_FIGURES: list[tuple[str, str]] = []


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """`figure("failover: replica b leads 2.3 s after kill -9")`: one line for the CI log's `figures` section."""

    def record(text: str) -> None:
        # what record_property does, without its warning under --junitxml's default xunit2 family
        request.node.user_properties.append(("figure", text))
        print(text)

    return record


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The teardown report carries every property the test recorded (in setup, call or teardown). Under pytest-xdist
    # this runs on the controller, for each worker's report, as well as on the worker itself (whose list is unused).
    if report.when == "teardown":
        _FIGURES.extend((report.nodeid, str(value)) for name, value in report.user_properties if name == "figure")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.section("figures")
        for nodeid, text in _FIGURES:
            terminalreporter.line(f"{nodeid}: {text}")
