"""`corral status`: the control plane, i.e. the server replicas sharing the database and which of them leads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from corral.cli.config import make_client
from corral.cli.output import print_json, print_table, short_time

if TYPE_CHECKING:
    from corral.api.schemas import StatusOut

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def status(as_json: JSON = False) -> None:
    """Server replicas and the leader (admins): which replica applies plans, fires schedules and runs alerts, since
    when; the others serve the API, the portal and agents, and take over within seconds when the leader dies."""
    with make_client() as c:
        s = c.status()
    if as_json:
        return print_json(s)
    if s.leader is None:
        print("leader: none (no replica holds a live lease; one takes it within seconds)")
    else:
        since = short_time(s.leader_since) if s.leader_since else "?"
        print(f"leader: {s.leader} since {since} (epoch {s.leader_epoch})")
    print(_schema_line(s))
    now = datetime.now(UTC)
    print_table(
        None,
        ["REPLICA", "HOST", "URL", "VERSION", "SCHEMA", "STARTED", "SEEN", "ROLE"],
        [
            (
                r.id + (" *" if r.id == s.replica else ""),
                r.host,
                r.url,
                r.version,
                r.schema_head or "?",
                short_time(r.started_at),
                f"{max((now - r.last_seen_at).total_seconds(), 0):.0f}s ago",
                "leader" if r.leader else "follower",
            )
            for r in s.replicas
        ],
    )


def _schema_line(s: StatusOut) -> str:
    """The database's schema revision; during a rolling upgrade, replicas whose SCHEMA (the newest migration their
    code knows) is older run on it unmigrated, as long as they reach its minimum compatible revision."""
    if not s.schema_revision:
        return "schema: unknown (a server older than migration 0022 answered)"
    behind = sorted({r.schema_head for r in s.replicas if r.schema_head and r.schema_head != s.schema_revision})
    note = f"; replicas on older code: {', '.join(behind)}" if behind else ""
    return f"schema: revision {s.schema_revision} (code from {s.min_compatible_revision or '?'} on may run on it{note})"
