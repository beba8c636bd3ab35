"""A rolling upgrade (issue 17), real processes on one PostgreSQL: a replica runs at this code's head with an agent;
then the database is changed as a newer Corral's expand-only migration would (a nullable column on jobs, a new table,
an alembic revision this code does not know). The running replica goes on serving, and a second replica of this
code (an old replica restarting mid-upgrade) starts on that schema without migrating it and serves too; `corral
status` shows the schema's revision and each replica's. Once the schema's minimum compatible revision is raised past
this code (a contract step), one more replica of this code refuses to start, naming both revisions, while the
running ones keep serving."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from corral.store.migrate import code_head

from .conftest import CORRAL, Corral, free_port, wait_for
from .test_replicas import Replica, _api, _state, join_agent

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(180)]
FUTURE = "9001_future"
CONTRACT = "9002_contract"


def _migrate_as_a_newer_corral(url: str, min_revision: str | None = None) -> None:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        if min_revision is None:
            conn.execute(sa.text("ALTER TABLE jobs ADD COLUMN future_note VARCHAR(64)"))
            conn.execute(sa.text("CREATE TABLE future_things (id SERIAL PRIMARY KEY, name VARCHAR(64) NOT NULL)"))
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": FUTURE})
        else:
            conn.execute(sa.text("UPDATE schema_compat SET min_revision = :r, reason = 'jobs.queue dropped'"),
                         {"r": min_revision})  # fmt: skip
    engine.dispose()


def _run(r: Replica, token: str, text: str) -> None:
    job = _api(r, token, "POST", "/jobs", json={"command": ["sh", "-c", f"echo {text}"], "gpus": 1})["id"]
    wait_for(lambda: _state(r, token, job) == "SUCCEEDED", 30, f"job {text!r} through replica {r.name}")


def test_old_replicas_run_and_restart_on_a_newer_expand_only_schema_and_refuse_a_contracted_one(
    corral_factory: Any, postgres_url: str
) -> None:
    c: Corral = corral_factory(gpus="none", database_url=postgres_url)
    head = code_head()
    a = Replica(c, "a")  # migrates the fresh database to this code's head
    token = (c.data_dir / "admin-token").read_text().strip()
    env = dict(c.env, CORRAL_URL=a.url, CORRAL_TOKEN=token)
    join_agent(c, env, [a])
    wait_for(lambda: _api(a, token, "GET", "/nodes"), 60, "the agent registered")
    _run(a, token, "before")
    assert _api(a, token, "GET", "/status")["schema_revision"] == head

    # A newer Corral migrates the schema (expand-only) while this one runs: it goes on serving.
    _migrate_as_a_newer_corral(postgres_url)
    _run(a, token, "on-the-newer-schema")

    # An old replica restarting mid-upgrade starts on the newer schema, without migrating it, and serves.
    b = Replica(c, "b")
    logged = next(c.root.glob("server-b-*.log")).read_text()
    assert f"schema is at revision {FUTURE}" in logged and f"its newest migration is {head}" in logged
    _run(b, token, "through-the-restarted-replica")
    status = wait_for(lambda: len((s := _api(b, token, "GET", "/status"))["replicas"]) == 2 and s, 15, "2 replicas")
    assert status["schema_revision"] == FUTURE and [r["schema_head"] for r in status["replicas"]] == [head, head]
    shown = c.cli("status", env=env)
    assert (
        shown.returncode == 0
        and f"schema: revision {FUTURE}" in shown.stdout
        and "replicas on older code" in (shown.stdout)
    )

    # A contract step raises the minimum past this code: one more replica of it refuses to start, saying why.
    _migrate_as_a_newer_corral(postgres_url, min_revision=CONTRACT)
    port, agent_port, ui_port = free_port(), free_port(), free_port()
    late_env = dict(
        c.env,
        CORRAL_PORT=str(port),
        CORRAL_AGENT_PORT=str(agent_port),
        CORRAL_JOB_UI_PORT=str(ui_port),
        CORRAL_GATEWAY_PORT=str(free_port()),
    )
    late = c.spawn([CORRAL, "server"], env=late_env, log_name="server-late")
    assert late.wait(60) != 0
    refused = next(c.root.glob("server-late-*.log")).read_text()
    assert f"no longer runs code older than revision {CONTRACT} (jobs.queue dropped)" in refused, refused
    assert f"newest migration is {head}" in refused and "upgrade this replica" in refused
    assert "Traceback" not in refused  # one line, not a stack

    # The replicas already running keep serving (they checked at start; the schema they use is still there).
    _run(b, token, "after-the-refusal")
    _run(a, token, "after-the-refusal-too")
    assert _api(a, token, "GET", "/status")["min_compatible_revision"] == CONTRACT
