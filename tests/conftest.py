"""Shared fixtures: databases (SQLite and a fresh PostgreSQL database per test) and stores."""

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
