"""`corral backup` / `corral restore` (issue 17) on real SQLite and PostgreSQL, with the real pg_dump/pg_restore:
a round trip keeps every job, event, tenant, user, sealed secret and data dir file; a backup taken while another
thread keeps submitting and cancelling jobs restores a consistent database; damaged, newer or misplaced backups
and targets that are not fresh are refused before anything is written."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from corral.core.errors import ValidationError
from corral.core.states import JobState
from corral.server.backup import MANIFEST, restore_backup, take_backup
from corral.server.bootstrap import ensure_credentials
from corral.server.keyring import load_keyring
from corral.store import dump as db
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store
from realparts import missing_real_part

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
PG_ADMIN_URL = os.environ.get("CORRAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass
class Install:
    """One Corral install's state: its database URL, data dir and secrets key file."""

    url: str
    data_dir: Path

    @property
    def key_file(self) -> Path:
        return self.data_dir / "secrets.key"

    def backup(self, dest: Path) -> None:
        take_backup(dest, self.url, self.data_dir, self.key_file, NOW)

    def restore(self, src: Path, force: bool = False) -> str:
        return restore_backup(src, self.url, self.data_dir, self.key_file, force)[1]


@pytest.fixture
def pg_tools(database_url: str) -> None:
    if database_url.startswith("postgresql"):
        for tool in ("pg_dump", "pg_restore"):
            if shutil.which(tool) is None:
                missing_real_part(tool, "install the PostgreSQL client tools (apt-get install postgresql-client)")


@pytest.fixture
def target(database_url: str, tmp_path: Path, pg_tools: None) -> Iterator[Install]:
    """A fresh install of the same kind: a new data dir and an empty database (SQLite in it, or a new PostgreSQL one)."""
    data_dir = tmp_path / "restored"
    if database_url.startswith("sqlite"):
        yield Install(f"sqlite:///{data_dir / 'corral.db'}", data_dir)
        return
    import psycopg

    name = f"corral_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Install(f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}", data_dir)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def source(database_url: str, tmp_path: Path, pg_tools: None) -> Iterator[tuple[Install, SqlStore]]:
    """A running install: tenants, users, a sealed secret, jobs in several states, the CA, tokens and logs."""
    data_dir = tmp_path / "data"
    url = database_url if database_url.startswith("postgresql") else f"sqlite:///{data_dir / 'corral.db'}"
    store = open_store(url)
    ensure_credentials(store, data_dir)  # admin user + token, cluster CA, first join token
    team = store.create_tenant("team-a", NOW, weight=2.0)
    store.create_user("alice", "user", NOW, tenant_id=team.id)
    keyring = load_keyring(data_dir / "secrets.key", set())
    sealed = keyring.seal("hunter2", f"{team.id}/db-password")
    store.create_secret(team.id, "db-password", "env", {}, sealed.key_id, sealed.token, "alice", NOW)
    done = store.create_job(JobSpec(command=("echo", "done"), name="done", tenant_id=team.id), NOW)
    store.finish_job(done.id, JobState.CANCELLED, None, "test", NOW)
    store.create_job(JobSpec(command=("sleep", "9"), name="waiting"), NOW)
    (data_dir / "logs").mkdir(mode=0o700, exist_ok=True)
    log = data_dir / "logs" / f"{done.id}.1.log"
    log.write_bytes(b"done\n")
    log.chmod(0o600)
    (data_dir / "jobs").mkdir()  # the local agent's: not in a backup
    (data_dir / "jobs" / "scratch").write_text("x")
    try:
        yield Install(url, data_dir), store
    finally:
        store.close()


def _state_of(url: str) -> dict[str, object]:
    """What a restore must bring back, read through the store."""
    store = open_store(url)
    try:
        jobs = store.list_jobs()
        return {
            "jobs": [(j.id, j.name, j.state) for j in jobs],
            "events": {j.id: [(e.kind, e.message) for e in store.list_events(j.id)] for j in jobs},
            "tenants": [(t.name, t.weight) for t in store.list_tenants()],
            "users": [(u.name, u.role, u.tenant_id) for u in store.list_users()],
            "secrets": sorted(s.name for t in store.list_tenants() for s in store.list_secrets(t.id)),
        }
    finally:
        store.close()


def _files(data_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(data_dir).as_posix(): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in data_dir.rglob("*")
        if p.is_file() and not p.name.startswith("corral.db")
    }


@pytest.mark.parametrize("form", ["dir", "tar.gz"])
def test_round_trip_keeps_jobs_events_tenants_users_secrets_and_files(
    source: tuple[Install, SqlStore], target: Install, tmp_path: Path, form: str
) -> None:
    src, _store = source
    dest = tmp_path / ("backup" if form == "dir" else "backup.tar.gz")
    src.backup(dest)
    assert stat.S_IMODE(dest.stat().st_mode) == (0o700 if form == "dir" else 0o600)
    if form == "dir":
        manifest = json.loads((dest / MANIFEST).read_text())
        assert manifest["schema_revision"] == db.known_revisions()[0]
        assert manifest["database"] == db.database_kind(src.url)
        assert {f["path"] for f in manifest["files"]} >= {"files/ca/ca.key", "files/secrets.key", "files/logs/1.1.log"}
        assert not any(f["path"].startswith("files/jobs") for f in manifest["files"])
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in dest.rglob("*") if p.is_file())

    assert target.restore(dest) == db.known_revisions()[0]
    assert _state_of(target.url) == _state_of(src.url)
    expected = {k: v for k, v in _files(src.data_dir).items() if not k.startswith("jobs/")}
    assert _files(target.data_dir) == expected  # same bytes, same modes (0600)
    assert stat.S_IMODE(target.data_dir.stat().st_mode) == 0o700
    # The secret opens with the restored key: the database's sealed value and the key came back together.
    restored = open_store(target.url)
    try:
        team = restored.find_tenant("team-a")
        assert team is not None
        rec = restored.list_secrets(team.id)[0]
        keyring = load_keyring(target.key_file, restored.secret_key_ids())
        from corral.server.keyring import Sealed

        assert keyring.open(Sealed(rec.key_id, rec.sealed), f"{team.id}/db-password") == "hunter2"
    finally:
        restored.close()


def test_backup_while_another_thread_writes_restores_a_consistent_database(
    source: tuple[Install, SqlStore], target: Install, tmp_path: Path
) -> None:
    src, store = source
    stop, made = threading.Event(), [0]
    errors: list[BaseException] = []

    def write() -> None:  # submit, and cancel every other job: a state change and its event in one transaction
        try:
            while not stop.is_set():
                job = store.create_job(JobSpec(command=("true",), name=f"w{made[0]}"), NOW)
                if job.id % 2:
                    store.request_cancel(job.id, NOW)
                made[0] += 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while made[0] < 50 and writer.is_alive():
            threading.Event().wait(0.01)
        before, at_start = len(store.list_jobs()), made[0]
        src.backup(tmp_path / "backup")
        during = made[0] - at_start
    finally:
        stop.set()
        writer.join(30)
    assert not errors, errors
    target.restore(tmp_path / "backup")

    restored = open_store(target.url)
    try:
        jobs = restored.list_jobs()
        ids = [j.id for j in jobs]
        assert len(ids) >= before and ids == list(range(1, len(ids) + 1))  # no job lost, no hole
        for j in jobs:
            kinds = [e.kind for e in restored.list_events(j.id)]
            cancelled = j.state == JobState.CANCELLED
            assert kinds == (["submitted", "cancelled"] if cancelled else ["submitted"]), (j.id, j.state, kinds)
    finally:
        restored.close()
    print(f"backup taken while {during} jobs were written; {len(ids)} jobs restored")


def test_a_damaged_file_is_refused_before_anything_is_restored(
    source: tuple[Install, SqlStore], target: Install, tmp_path: Path
) -> None:
    src, _ = source
    src.backup(tmp_path / "backup")
    log = tmp_path / "backup" / "files" / "logs" / "1.1.log"
    log.write_bytes(b"forged\n")
    with pytest.raises(ValidationError, match=r"SRC: files/logs/1.1.log does not match its sha256"):
        target.restore(tmp_path / "backup")
    assert db.load_tables(target.url) == [] and not target.data_dir.exists()


def test_a_database_that_is_not_empty_is_refused(
    source: tuple[Install, SqlStore], target: Install, tmp_path: Path
) -> None:
    src, _ = source
    src.backup(tmp_path / "backup")
    open_store(target.url).close()  # a Corral that already started there
    with pytest.raises(ValidationError, match=r"CORRAL_DATABASE_URL: the target database is not empty"):
        target.restore(tmp_path / "backup")


def test_a_data_dir_with_a_ca_or_key_needs_force(
    source: tuple[Install, SqlStore], target: Install, tmp_path: Path
) -> None:
    src, _ = source
    src.backup(tmp_path / "backup")
    target.data_dir.mkdir()
    load_keyring(target.key_file, set())  # another install's secrets key
    with pytest.raises(ValidationError, match=r"--force: .* already holds a secrets key .* pass --force"):
        target.restore(tmp_path / "backup")
    target.restore(tmp_path / "backup", force=True)
    assert target.key_file.read_bytes() == src.key_file.read_bytes()


def test_a_backup_of_a_newer_schema_is_refused(
    source: tuple[Install, SqlStore], target: Install, tmp_path: Path
) -> None:
    src, _ = source
    src.backup(tmp_path / "backup")
    manifest = tmp_path / "backup" / MANIFEST
    manifest.write_text(manifest.read_text().replace(db.known_revisions()[0], "9999_from_the_future"))
    with pytest.raises(ValidationError, match=r"SRC: the backup's schema revision '9999_from_the_future' is newer"):
        target.restore(tmp_path / "backup")


def test_a_backup_of_an_older_corral_is_migrated_to_head(database_url: str, target: Install, tmp_path: Path) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    from corral.store.migrate import alembic_config
    from corral.store.sql import normalize_url

    older = db.known_revisions()[1]
    data_dir = tmp_path / "old"
    data_dir.mkdir()
    url = database_url if database_url.startswith("postgresql") else f"sqlite:///{data_dir / 'corral.db'}"
    engine = create_engine(normalize_url(url))
    command.upgrade(alembic_config(engine), older)
    engine.dispose()
    Install(url, data_dir).backup(tmp_path / "backup")
    assert json.loads((tmp_path / "backup" / MANIFEST).read_text())["schema_revision"] == older
    assert target.restore(tmp_path / "backup") == db.known_revisions()[0]
    assert db.load_schema_revision(target.url) == db.known_revisions()[0]


def test_destinations_that_exist_are_refused(source: tuple[Install, SqlStore], tmp_path: Path) -> None:
    src, _ = source
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValidationError, match=r"DEST: .*full exists and is not an empty directory"):
        src.backup(tmp_path / "full")
    (tmp_path / "old.tar.gz").write_text("x")
    with pytest.raises(ValidationError, match=r"DEST: .*old.tar.gz exists"):
        src.backup(tmp_path / "old.tar.gz")
    (tmp_path / "empty").mkdir()
    src.backup(tmp_path / "empty")  # an empty directory is fine
    assert (tmp_path / "empty" / MANIFEST).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


@pytest.mark.postgres
def test_a_sqlite_backup_is_not_restored_into_postgresql(tmp_path: Path, postgres_url: str) -> None:
    data_dir = tmp_path / "data"
    open_store(f"sqlite:///{data_dir / 'corral.db'}").close()
    Install(f"sqlite:///{data_dir / 'corral.db'}", data_dir).backup(tmp_path / "backup")
    with pytest.raises(ValidationError, match=r"SRC: a sqlite backup cannot be restored into postgresql"):
        Install(postgres_url, tmp_path / "new").restore(tmp_path / "backup")


@pytest.mark.postgres
def test_pg_dump_missing_or_older_than_the_server_is_named(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(postgres_url).close()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(db.BackupError, match=r"pg_dump: not found on PATH"):
        Install(postgres_url, tmp_path).backup(tmp_path / "b1")
    old = bin_dir / "pg_dump"  # an old client: a real executable that answers as PostgreSQL 9.6's does
    old.write_text("#!/bin/sh\necho 'pg_dump (PostgreSQL) 9.6.24'\n")
    old.chmod(0o755)
    with pytest.raises(db.BackupError, match=r"pg_dump: .* is PostgreSQL 9, older than the server \(1\d\)"):
        Install(postgres_url, tmp_path).backup(tmp_path / "b2")
    assert not (tmp_path / "b2").exists()
