"""The audit trail: every administrative change is recorded with who made it."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.server.auth import Principal
from corral.store.protocols import AuditStore


def record_audit(store: AuditStore, caller: Principal, action: str, target: str, detail: str = "") -> None:
    actor = caller.user.name if caller.user else f"token:{caller.token.name}"
    store.add_audit(actor, action, target, detail, datetime.now(UTC))
