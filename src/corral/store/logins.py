"""Failed logins per user name or client address, in SQL: the back-off's memory (a mixin of SqlStore), shared by
every server replica and kept across restarts."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.login_backoff import BackoffPolicy, compute_lockout_s
from corral.store.tables import LoginFailureRow
from corral.store.tenancy import utc


class LoginFailureMethods:
    """Keys are opaque to the store (the server uses "user:<hash of the name>" and "addr:<address>")."""

    def _rmw(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def load_login_lock(self, keys: Sequence[str], now: datetime) -> datetime | None:
        """The latest time until which any of `keys` is locked, or None when none is locked at `now`. Read-only."""
        with self._tx() as s:
            rows = s.scalars(select(LoginFailureRow).where(LoginFailureRow.key.in_(list(keys)))).all()
            until = [t for r in rows if (t := utc(r.locked_until)) is not None and t > now]
            return max(until, default=None)

    def record_login_failure(self, key: str, now: datetime, policy: BackoffPolicy) -> datetime | None:
        """Count one more failure of `key` (from zero when its last one is older than `policy.forget_after_s`) and
        lock it as the policy says. Returns until when it is locked (None: not locked). Atomic per key."""
        for attempt in range(2):  # a concurrent first failure of the same key may insert it first: then update
            try:
                with self._rmw() as s:
                    row = s.get(LoginFailureRow, key, with_for_update=True)
                    if row is None:
                        row = LoginFailureRow(key=key, failures=0, last_failure_at=now)
                        s.add(row)
                    last = utc(row.last_failure_at) or now
                    if (now - last).total_seconds() > policy.forget_after_s:
                        row.failures = 0
                    row.failures += 1
                    row.last_failure_at = now
                    lock_s = compute_lockout_s(row.failures, policy)
                    row.locked_until = now + timedelta(seconds=lock_s) if lock_s > 0 else None
                    return utc(row.locked_until)
            except IntegrityError:
                if attempt:
                    raise
        return None

    def clear_login_failures(self, key: str) -> None:
        """Forget the failures of `key` (a successful login of that user). Idempotent."""
        with self._tx() as s:
            s.execute(delete(LoginFailureRow).where(LoginFailureRow.key == key))

    def purge_login_failures(self, before: datetime) -> int:
        """Drop counters whose last failure is older than `before` and that are no longer locked. Idempotent."""
        with self._tx() as s:
            rows = s.scalars(select(LoginFailureRow).where(LoginFailureRow.last_failure_at < before)).all()
            gone = [r.key for r in rows if (t := utc(r.locked_until)) is None or t < before]
            if gone:
                s.execute(delete(LoginFailureRow).where(LoginFailureRow.key.in_(gone)))
            return len(gone)
