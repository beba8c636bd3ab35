"""A consistent copy of Corral's database while the server runs, and its load into an empty database.

SQLite: Python's online backup API (`sqlite3.Connection.backup`): one read transaction over the live file, its WAL
included; the .db file itself is never copied (a copy taken mid-write, without its WAL, is torn or stale).
PostgreSQL: `pg_dump --format=custom`, one snapshot of the whole database; `pg_restore` loads it into an empty one.
The connection's password reaches pg_dump/pg_restore through PGPASSWORD, never their command line.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Literal

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from corral.core.errors import CorralError

DatabaseKind = Literal["sqlite", "postgresql"]
DUMP_FILE: dict[str, str] = {"sqlite": "database.sqlite", "postgresql": "database.pgdump"}
_TOOL_TIMEOUT_S = 3600.0


class BackupError(CorralError):
    """A backup or restore that cannot go on: names what is wrong and what to do."""

    code = "backup"


def database_kind(url: str) -> DatabaseKind:
    if url.startswith("sqlite"):
        return "sqlite"
    if url.startswith(("postgresql", "postgres://")):
        return "postgresql"
    raise BackupError(f"CORRAL_DATABASE_URL: {url.split(':', 1)[0]}:// is neither sqlite:// nor postgresql://")


def sqlite_path(url: str) -> Path:
    return Path(url.split(":///", 1)[1]).expanduser()


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """The connection URI for libpq tools (no driver, no password) and their environment (PGPASSWORD)."""
    u = make_url(url.replace("postgres://", "postgresql://", 1))
    env = dict(os.environ)
    if u.password:
        env["PGPASSWORD"] = str(u.password)
    uri = u.set(drivername="postgresql", password=None).render_as_string(hide_password=False)
    return uri, env


def _engine_url(url: str) -> str:
    from corral.store.sql import normalize_url

    return normalize_url(url)


# ---- schema revisions ------------------------------------------------------------------------------------------
def known_revisions() -> list[str]:
    """The Alembic revisions this Corral knows, newest first."""
    from alembic.script import ScriptDirectory

    from corral.store.migrate import MIGRATIONS_DIR

    return [s.revision for s in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()]


def load_schema_revision(url: str) -> str | None:
    """The database's Alembic revision (None: no Corral schema there)."""
    if database_kind(url) == "sqlite":
        path = sqlite_path(url)
        if not path.exists():
            return None
        with _sqlite_ro(path) as conn:
            try:
                row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            except sqlite3.OperationalError:
                return None
        return str(row[0]) if row else None
    engine = create_engine(_engine_url(url))
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()


def load_tables(url: str) -> list[str]:
    """The tables the database holds (an SQLite file that does not exist holds none; nothing is created)."""
    if database_kind(url) == "sqlite":
        path = sqlite_path(url)
        if not path.exists():
            return []
        with _sqlite_ro(path) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
        return [str(r[0]) for r in rows]
    engine = create_engine(_engine_url(url))
    try:
        with engine.connect() as conn:
            return sorted(inspect(conn).get_table_names())
    finally:
        engine.dispose()


class _sqlite_ro:
    """A connection that never creates the file (closed on exit, unlike sqlite3's own context manager)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *_: object) -> None:
        self.conn.close()


# ---- dump --------------------------------------------------------------------------------------------------------
def dump_database(url: str, dest: Path) -> str:
    """Write a consistent copy of the database to `dest` (a new file, 0600); returns its schema revision."""
    if database_kind(url) == "sqlite":
        return _dump_sqlite(sqlite_path(url), dest)
    return _dump_postgres(url, dest)


def _dump_sqlite(path: Path, dest: Path) -> str:
    if not path.is_file():
        raise BackupError(
            f"CORRAL_DATABASE_URL: the SQLite database {path} does not exist (is CORRAL_DATA_DIR this install's?)"
        )
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    src = sqlite3.connect(str(path), timeout=30)
    dst = sqlite3.connect(str(dest))
    try:
        src.backup(dst)  # all pages in one step: one read transaction, a snapshot the writers do not wait for
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
        row = dst.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error as e:
        raise BackupError(f"CORRAL_DATABASE_URL: SQLite backup of {path} failed: {e}") from e
    finally:
        dst.close()
        src.close()
    return str(row[0]) if row else ""


def _major(version_output: str) -> int:
    m = re.search(r"(\d+)(?:\.\d+)?", version_output)
    if m is None:
        raise BackupError(f"cannot read a version from {version_output.strip()!r}")
    return int(m.group(1))


def find_pg_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BackupError(
            f"{name}: not found on PATH; a PostgreSQL backup needs the PostgreSQL client tools of the server's "
            f"major version or newer (Debian: apt-get install postgresql-client)"
        )
    return path


def _server_major(url: str) -> int:
    engine = create_engine(_engine_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SHOW server_version_num")).scalar_one()) // 10000
    finally:
        engine.dispose()


def check_pg_tool(name: str, url: str) -> str:
    """The tool's path, once its major version is at least the server's (an older pg_dump refuses newer servers)."""
    tool = find_pg_tool(name)
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    mine, server = _major(out), _server_major(url)
    if mine < server:
        raise BackupError(
            f"{name}: {tool} is PostgreSQL {mine}, older than the server ({server}); "
            f"install the PostgreSQL {server} client tools (or newer) and put them first on PATH"
        )
    return tool


def _run_tool(args: list[str], env: dict[str, str], what: str) -> None:
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        raise BackupError(f"{what} failed: {lines[0] if lines else f'exit {r.returncode}'}")


def _dump_postgres(url: str, dest: Path) -> str:
    tool = check_pg_tool("pg_dump", url)
    before = load_schema_revision(url)
    if before is None:
        raise BackupError("CORRAL_DATABASE_URL: the PostgreSQL database holds no Corral schema (nothing to back up)")
    uri, env = _libpq(url)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    _run_tool([tool, "--format=custom", "--no-password", f"--file={dest}", f"--dbname={uri}"], env, "pg_dump")
    if load_schema_revision(url) != before:
        raise BackupError("the database was migrated while the backup ran; take the backup again")
    return before


# ---- load --------------------------------------------------------------------------------------------------------
def restore_database(url: str, dump: Path) -> None:
    """Load a dump made by dump_database into the empty database at `url` (the caller checked it is empty)."""
    if database_kind(url) == "sqlite":
        _restore_sqlite(sqlite_path(url), dump)
    else:
        _restore_postgres(url, dump)


def _restore_sqlite(path: Path, dump: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)  # an empty database file (the caller checked it holds no tables)
    tmp = path.with_name(path.name + ".restore-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out, dump.open("rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _restore_postgres(url: str, dump: Path) -> None:
    tool = check_pg_tool("pg_restore", url)
    uri, env = _libpq(url)
    args = [tool, "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction", "--no-password"]
    _run_tool([*args, f"--dbname={uri}", str(dump)], env, "pg_restore")


def migrate_to_head(url: str) -> str:
    """Run the migrations this Corral has (a backup of an older Corral); returns the revision reached."""
    from corral.store.sql import open_store

    open_store(url).close()
    return load_schema_revision(url) or ""
