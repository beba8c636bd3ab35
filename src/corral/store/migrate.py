"""Run Alembic migrations programmatically against an engine (used at server start and by tests), and decide whether
this code may run on the database's schema at all: rolling upgrades (issue 17, docs/operations.md).

Migrations are expand-only (tests/unit/store/test_migration_rules.py enforces it): a schema migrated by a newer
Corral still serves older code. So a server whose code does not know the database's revision (a newer replica
migrated it) runs on it as it is, unmigrated. A migration that does break older code (a *contract* step: it drops,
renames or retypes what older code uses) raises the schema's minimum compatible revision (`schema_compat`, from
migration 0022) with `raise_min_compatible`; code whose newest migration is older than that refuses to start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

from corral.core.errors import CorralError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
COMPAT_TABLE = "schema_compat"
log = logging.getLogger("corral.store.migrate")


class SchemaIncompatibleError(CorralError):
    """The database's schema was migrated by a newer Corral past what this code can run on: upgrade this code."""

    code = "schema_incompatible"


@dataclass(frozen=True, slots=True)
class SchemaState:
    """The database's schema as the migrations left it, and what this code knows."""

    revision: str  # the database's Alembic revision ("" before the first migration)
    min_compatible: str  # the oldest code revision that may run on it ("" before migration 0022)
    reason: str  # why that minimum (the contract step that raised it)
    code_head: str  # the newest migration this code knows

    @property
    def newer_than_code(self) -> bool:
        """A newer Corral migrated the database: this code does not know its revision."""
        return any(r not in _known_revisions() for r in self.revision.split(",") if r)


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    cfg.attributes["engine"] = engine
    return cfg


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    return ScriptDirectory(str(MIGRATIONS_DIR))


@lru_cache(maxsize=1)
def _known_revisions() -> frozenset[str]:
    return frozenset(r.revision for r in _script().walk_revisions())


def code_head() -> str:
    """The newest migration this code knows."""
    return str(_script().get_current_head())


def load_schema_state(conn: Connection) -> SchemaState:
    """The database's revision and minimum compatible revision (read-only)."""
    revision = ",".join(sorted(MigrationContext.configure(conn).get_current_heads()))
    min_compatible, reason = "", ""
    if sa.inspect(conn).has_table(COMPAT_TABLE):
        row = conn.execute(sa.text(f"SELECT min_revision, reason FROM {COMPAT_TABLE} WHERE id = 1")).first()
        if row is not None:
            min_compatible, reason = str(row[0]), str(row[1] or "")
    return SchemaState(revision, min_compatible, reason, code_head())


def check_compatible(state: SchemaState) -> None:
    """Raise SchemaIncompatibleError when this code is older than the schema's minimum compatible revision: that
    revision is one this code does not know (or does not reach), so this code predates the contract step."""
    if state.min_compatible == "" or _reaches(state.code_head, state.min_compatible):
        return
    why = f" ({state.reason})" if state.reason else ""
    raise SchemaIncompatibleError(
        f"the database's schema (revision {state.revision}) no longer runs code older than revision "
        f"{state.min_compatible}{why}; this Corral's newest migration is {state.code_head}: "
        "upgrade this replica to a Corral that has that migration"
    )


def _reaches(head: str, revision: str) -> bool:
    """`revision` is `head` or one of its ancestors, in this code's history."""
    if revision not in _known_revisions():
        return False
    try:
        return any(r.revision == revision for r in _script().iterate_revisions(head, "base"))
    except CommandError:
        return False


def upgrade_to_head(engine: Engine) -> None:
    """Migrate to this code's newest revision; on a database a newer Corral migrated, check that this code may still
    run on it (else raise SchemaIncompatibleError) and leave it as it is."""
    with engine.connect() as conn:
        state = load_schema_state(conn)
    if state.newer_than_code:
        check_compatible(state)
        log.warning(
            "the database's schema is at revision %s, which this Corral does not know (its newest migration is %s): "
            "a newer Corral migrated it; running on it without migrating (expand-only: code from revision %s on "
            "may run on it)",
            state.revision,
            state.code_head,
            state.min_compatible or "?",
        )
        return
    command.upgrade(alembic_config(engine), "head")


def raise_min_compatible(revision: str, reason: str) -> None:
    """For a contract migration's upgrade(): from now on only code whose history holds `revision` may run on this
    schema (it only grows: set it to the revision that stopped using what the migration drops, or to its own)."""
    from alembic import op

    op.execute(
        sa.text(f"UPDATE {COMPAT_TABLE} SET min_revision = :revision, reason = :reason WHERE id = 1").bindparams(
            revision=revision, reason=reason
        )
    )
