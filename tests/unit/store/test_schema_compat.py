"""Rolling upgrades (issue 17), on SQLite and PostgreSQL: a store opens on a database a newer Corral migrated (a
revision this code does not know) without migrating it, and works on it; it refuses, naming both revisions, once the
schema's minimum compatible revision is one this code does not reach (a contract step raised it)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from corral.core.models import JobSpec
from corral.store.migrate import SchemaIncompatibleError, code_head
from corral.store.sql import open_store

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
FUTURE = "9001_future"


def _as_a_newer_corral_would(url: str, min_revision: str | None = None) -> None:
    """What a newer release's expand-only migration leaves: a nullable column, a new table, its own revision."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE jobs ADD COLUMN future_note VARCHAR(64)"))
        conn.execute(sa.text("CREATE TABLE future_things (id INTEGER PRIMARY KEY, name VARCHAR(64) NOT NULL)"))
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": FUTURE})
        if min_revision is not None:
            conn.execute(sa.text("UPDATE schema_compat SET min_revision = :r, reason = 'jobs.queue dropped'"),
                         {"r": min_revision})  # fmt: skip
    engine.dispose()


def test_a_fresh_database_is_at_this_codes_head_and_older_code_may_run_on_it(database_url: str) -> None:
    store = open_store(database_url)
    try:
        state = store.load_schema_state()
        assert (state.revision, state.code_head, state.min_compatible) == (code_head(), code_head(), "0021")
        assert not state.newer_than_code
    finally:
        store.close()


def test_a_database_a_newer_corral_migrated_is_used_as_it_is(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    open_store(database_url).close()
    _as_a_newer_corral_would(database_url)
    with caplog.at_level(logging.WARNING, logger="corral.store.migrate"):
        store = open_store(database_url)  # no "Can't locate revision" from Alembic
    try:
        assert f"at revision {FUTURE}" in caplog.text and f"newest migration is {code_head()}" in caplog.text
        state = store.load_schema_state()
        assert (state.revision, state.newer_than_code) == (FUTURE, True)  # not migrated, not downgraded
        job = store.create_job(JobSpec(command=("true",)), NOW)  # the old code writes rows the new schema accepts
        assert store.get_job(job.id) is not None
    finally:
        store.close()


def test_a_minimum_this_code_reaches_lets_it_run(database_url: str) -> None:
    open_store(database_url).close()
    _as_a_newer_corral_would(database_url, min_revision=code_head())
    open_store(database_url).close()


def test_a_minimum_newer_than_this_code_refuses_naming_both_revisions(database_url: str) -> None:
    open_store(database_url).close()
    _as_a_newer_corral_would(database_url, min_revision="9000_contract")
    with pytest.raises(SchemaIncompatibleError) as e:
        open_store(database_url)
    message = e.value.message
    assert "older than revision 9000_contract (jobs.queue dropped)" in message
    assert f"newest migration is {code_head()}" in message and "upgrade this replica" in message
    assert f"revision {FUTURE}" in message
