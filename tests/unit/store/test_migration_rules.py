"""The expand-only rule for migrations (issue 17, rolling upgrades; docs/operations.md "Upgrading without downtime"):
while replicas of the old and the new code share one database, the schema a migration leaves must still serve the
code before it. So an upgrade() may add tables, nullable columns, columns with a server default and indexes, but may
not drop or rename a table or column, change a column's type, make a column NOT NULL, or add a NOT NULL column
without a server default; unless it declares itself a contract step (a module-level `CONTRACT = "why"`) and raises
the schema's minimum compatible revision (`raise_min_compatible("<revision>", ...)`, store/migrate.py) to one of its
own ancestors or itself, so that older code refuses to start instead of failing on the changed schema.

The migrations written before the rule are listed below with what each breaks: history, closed (a new entry fails).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.store.migrate import MIGRATIONS_DIR

VERSIONS = sorted((MIGRATIONS_DIR / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
RULE_SINCE = "0022"  # the first migration written under the rule

# Before the rule, upgrades stopped the server, migrated and started it again: old and new code never shared a schema.
# Checked when the rule came: none of 0001..0021's upgrade() breaks it (their downgrade()s drop what the upgrade
# added, which the rule allows), so this list is empty; an entry would name the revision and what it breaks, and
# only a revision before RULE_SINCE may stand here.
PRE_RULE: dict[str, str] = {}

DROPS = {"drop_table", "drop_column", "rename_table"}
RAW_SQL = re.compile(
    r"\b(DROP\s+(TABLE|COLUMN)|RENAME\s+(TO|COLUMN)|ALTER\s+COLUMN\s+\w+\s+(TYPE|SET\s+DATA\s+TYPE|SET\s+NOT\s+NULL))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Verdict:
    revision: str
    breaks: tuple[str, ...]  # what upgrade() does that older code may not survive
    contract: str | None  # the CONTRACT declaration
    min_compatible: str | None  # the revision raise_min_compatible raises the minimum to


def check_migration(source: str) -> Verdict:
    """What one migration file's upgrade() breaks for older code, and whether it declares itself a contract step."""
    tree = ast.parse(source)
    consts = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    upgrade = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "upgrade"), None)
    assert upgrade is not None, "a migration without upgrade()"
    breaks: list[str] = []
    min_compatible: str | None = None
    for call in (n for n in ast.walk(upgrade) if isinstance(n, ast.Call)):
        name = _name(call.func)
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        if name in DROPS:
            breaks.append(f"line {call.lineno}: {name}")
        elif name == "alter_column":
            breaks += [f"line {call.lineno}: alter_column {k}" for k in ("new_column_name", "type_") if k in kw]
            if _is_false(kw.get("nullable")):
                breaks.append(f"line {call.lineno}: alter_column nullable=False")
        elif name == "add_column":
            for col in (a for a in call.args if isinstance(a, ast.Call) and _name(a.func) == "Column"):
                ckw = {k.arg: k.value for k in col.keywords if k.arg}
                required = _is_false(ckw.get("nullable")) or _is_true(ckw.get("primary_key"))
                if required and "server_default" not in ckw:
                    breaks.append(f"line {call.lineno}: add_column NOT NULL without a server default")
        elif name == "raise_min_compatible" and call.args and isinstance(call.args[0], ast.Constant):
            min_compatible = str(call.args[0].value)
        for arg in call.args:
            text = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
            if text is not None and RAW_SQL.search(text):
                breaks.append(f"line {call.lineno}: SQL {RAW_SQL.search(text).group(0)!r}")  # type: ignore[union-attr]
    return Verdict(consts.get("revision", "?"), tuple(breaks), consts.get("CONTRACT"), min_compatible)


def refusal(v: Verdict, ancestors: set[str], pre_rule: dict[str, str] = PRE_RULE) -> str | None:
    """Why the rule refuses this migration (None: it passes). `ancestors`: the revisions before it, itself included."""
    if v.revision < RULE_SINCE:
        if v.revision in pre_rule:
            return None if v.breaks else f"{v.revision} is listed as pre-rule history but breaks nothing: unlist it"
        return f"{v.revision} breaks older code but predates the rule unlisted: {v.breaks}" if v.breaks else None
    if v.revision in pre_rule:
        return f"{v.revision} is newer than the rule: pre-rule history is closed"
    if not v.breaks:
        return None
    if v.contract is None:
        return (
            f"{v.revision} is not expand-only ({'; '.join(v.breaks)}): declare CONTRACT = '...' and raise the minimum"
        )
    if v.min_compatible is None:
        return f"{v.revision} declares CONTRACT but does not call raise_min_compatible('<revision>', ...)"
    if v.min_compatible not in ancestors:
        return f"{v.revision} raises the minimum to {v.min_compatible}, not itself or one of its ancestors"
    return None


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_false(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


# ---- the migrations as they are ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", VERSIONS, ids=[p.name[:4] for p in VERSIONS])
def test_every_migration_is_expand_only_or_a_declared_contract_step(path: Path) -> None:
    ancestors = {p.name[:4] for p in VERSIONS if p.name[:4] <= path.name[:4]}
    verdict = check_migration(path.read_text())
    assert verdict.revision == path.name[:4]
    assert refusal(verdict, ancestors) is None


def test_the_pre_rule_list_names_real_migrations_before_the_rule_only() -> None:
    assert set(PRE_RULE) <= {p.name[:4] for p in VERSIONS if p.name[:4] < RULE_SINCE}
    assert all(reason for reason in PRE_RULE.values())


def test_every_migration_is_checked() -> None:
    assert [p.name[:4] for p in VERSIONS][:2] == ["0001", "0002"] and RULE_SINCE in {p.name[:4] for p in VERSIONS}


# ---- the rule refuses what it should (it can fail) ----------------------------------------------------------------

HEADER = 'revision = "0099"\ndown_revision = "0098"\n'
ANCESTORS = {"0097", "0098", "0099"}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('op.drop_column("jobs", "queue")', "drop_column"),
        ('with op.batch_alter_table("jobs") as b:\n        b.drop_column("queue")', "drop_column"),
        ('op.drop_table("quotas")', "drop_table"),
        ('op.rename_table("jobs", "tasks")', "rename_table"),
        ('op.alter_column("jobs", "queue", new_column_name="pool")', "new_column_name"),
        ('op.alter_column("jobs", "gpus", type_=sa.BigInteger())', "type_"),
        ('op.alter_column("jobs", "note", nullable=False)', "nullable=False"),
        ('op.add_column("jobs", sa.Column("pool", sa.String(64), nullable=False))', "NOT NULL"),
        ('op.execute("ALTER TABLE jobs DROP COLUMN queue")', "DROP COLUMN"),
        ('op.execute("ALTER TABLE jobs ALTER COLUMN gpus TYPE bigint")', "TYPE"),
    ],
)
def test_a_migration_that_breaks_older_code_is_refused(body: str, why: str) -> None:
    verdict = check_migration(f"{HEADER}\n\ndef upgrade() -> None:\n    {body}\n")
    reason = refusal(verdict, ANCESTORS)
    assert reason is not None and "not expand-only" in reason and why in reason


@pytest.mark.parametrize(
    "body",
    [
        'op.add_column("jobs", sa.Column("pool", sa.String(64), nullable=True))',
        'op.add_column("jobs", sa.Column("pool", sa.String(64), nullable=False, server_default="x"))',
        'op.create_table("pools", sa.Column("id", sa.Integer(), primary_key=True, nullable=False))',
        'op.create_index("ix_jobs_pool", "jobs", ["pool"])',
        'op.alter_column("jobs", "note", nullable=True)',
        'op.drop_index("ix_jobs_pool", "jobs")',
    ],
)
def test_an_expand_only_migration_passes(body: str) -> None:
    assert refusal(check_migration(f"{HEADER}\n\ndef upgrade() -> None:\n    {body}\n"), ANCESTORS) is None


def test_a_contract_step_passes_only_when_it_raises_the_minimum_to_an_ancestor() -> None:
    drop = '    op.drop_column("jobs", "queue")\n'
    declared = f'{HEADER}CONTRACT = "jobs.queue is gone; the oldest compatible revision is 0098"\n\ndef upgrade():\n'
    assert "raise_min_compatible" in str(refusal(check_migration(declared + drop), ANCESTORS))
    raised = declared + drop + '    raise_min_compatible("0098", "jobs.queue is gone")\n'
    assert refusal(check_migration(raised), ANCESTORS) is None
    future = declared + drop + '    raise_min_compatible("0123", "jobs.queue is gone")\n'
    assert "not itself or one of its ancestors" in str(refusal(check_migration(future), ANCESTORS))
    undeclared = f"{HEADER}\ndef upgrade():\n{drop}" + '    raise_min_compatible("0098", "x")\n'
    assert "not expand-only" in str(refusal(check_migration(undeclared), ANCESTORS))


def test_a_downgrade_may_drop_what_its_upgrade_added() -> None:
    source = f'{HEADER}\ndef upgrade():\n    op.create_table("pools")\n\ndef downgrade():\n    op.drop_table("pools")\n'
    assert refusal(check_migration(source), ANCESTORS) is None


def test_pre_rule_history_is_closed() -> None:
    source = f'revision = "{RULE_SINCE}"\n\ndef upgrade():\n    op.drop_table("x")\n'
    assert "not expand-only" in str(refusal(check_migration(source), {RULE_SINCE}))
    listed = {"0003": "a test entry"}
    assert "breaks nothing" in str(refusal(Verdict("0003", (), None, None), {"0003"}, listed))
    assert refusal(Verdict("0003", ("line 1: drop_table",), None, None), {"0003"}, listed) is None
    assert "history is closed" in str(refusal(Verdict("0022", (), None, None), {"0022"}, {"0022": "late"}))
    unlisted = Verdict("0004", ("line 1: drop_table",), None, None)
    assert "predates the rule unlisted" in str(refusal(unlisted, {"0004"}))
