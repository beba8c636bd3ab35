"""Tenants, quotas, queues, users and tokens in SQL: the tenancy half of SqlStore (a mixin)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import delete, select, update
from sqlalchemy.engine import CursorResult, Result
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.errors import ConflictError
from corral.store.records import Queue, Quota, Tenant, TokenRecord, User
from corral.store.tables import QueueRow, QuotaRow, TenantRow, TokenRow, UsageRow, UserRow


def utc(dt: datetime | None) -> datetime | None:
    """Datetimes come back naive from SQLite: they were stored as UTC."""
    if dt is None:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def affected_rows(result: Result[Any]) -> int:
    """Rows matched by an UPDATE or DELETE: Session.execute is typed `Result`, but DML returns a CursorResult."""
    return cast(CursorResult[Any], result).rowcount


def to_user(r: UserRow) -> User:
    return User(
        id=r.id,
        name=r.name,
        role=r.role,
        created_at=utc(r.created_at) or r.created_at,
        tenant_id=r.tenant_id,
        password_hash=r.password_hash or "",
        directory=r.directory or "",
        disabled=bool(r.disabled),
        unix_uid=r.unix_uid,
        unix_gid=r.unix_gid,
    )


def to_token(r: TokenRow) -> TokenRecord:
    return TokenRecord(
        id=r.id,
        user_id=r.user_id,
        kind=r.kind,
        name=r.name,
        created_at=utc(r.created_at) or r.created_at,
        revoked=r.revoked,
        expires_at=utc(r.expires_at),
        is_session=bool(r.is_session),
        parent_id=r.parent_id,
    )


def to_tenant(r: TenantRow) -> Tenant:
    return Tenant(
        id=r.id, name=r.name, parent_id=r.parent_id, weight=r.weight, created_at=utc(r.created_at) or r.created_at
    )


def to_quota(r: QuotaRow) -> Quota:
    return Quota(tenant_id=r.tenant_id, gpu_model=r.gpu_model, guaranteed_gpus=r.guaranteed_gpus, max_gpus=r.max_gpus)


def to_queue(r: QueueRow) -> Queue:
    return Queue(id=r.id, tenant_id=r.tenant_id, name=r.name, mode=r.mode, priority=r.priority)


class TenancyMethods:
    """Every method is one transaction (see corral.store.base for the contracts)."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def _rmw(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    # ---- fair share's history ---------------------------------------------------
    def save_usage(self, gpu_seconds: dict[int, float], as_of: datetime) -> None:
        """Replace the stored decayed usage (tenant id -> GPU-seconds) with this snapshot."""
        with self._tx() as s:
            s.execute(delete(UsageRow))
            known = set(s.scalars(select(TenantRow.id)).all())
            s.add_all(UsageRow(tenant_id=t, gpu_seconds=v, as_of=as_of) for t, v in gpu_seconds.items() if t in known)

    def load_usage(self) -> tuple[dict[int, float], datetime | None]:
        """The stored decayed usage and when it was taken (None: nothing stored yet)."""
        with self._tx() as s:
            rows = s.scalars(select(UsageRow)).all()
            stamps = [t for r in rows if (t := utc(r.as_of)) is not None]
            return {r.tenant_id: r.gpu_seconds for r in rows}, max(stamps, default=None)

    # ---- tenants --------------------------------------------------------------
    def create_tenant(self, name: str, now: datetime, parent_id: int | None = None, weight: float = 1.0) -> Tenant:
        """Raises ConflictError when the name is taken. Creates the tenant's `default` queue too."""
        try:
            with self._tx() as s:
                row = TenantRow(name=name, parent_id=parent_id, weight=weight, created_at=now)
                s.add(row)
                s.flush()
                s.add(QueueRow(tenant_id=row.id, name="default", mode="best-effort", priority=0))
                return to_tenant(row)
        except IntegrityError as e:
            raise ConflictError(f"tenant {name!r} already exists") from e

    def get_tenant(self, tenant_id: int) -> Tenant | None:
        with self._tx() as s:
            row = s.get(TenantRow, tenant_id)
            return to_tenant(row) if row else None

    def find_tenant(self, name: str) -> Tenant | None:
        with self._tx() as s:
            row = s.scalar(select(TenantRow).where(TenantRow.name == name))
            return to_tenant(row) if row else None

    def list_tenants(self) -> list[Tenant]:
        with self._tx() as s:
            return [to_tenant(r) for r in s.scalars(select(TenantRow).order_by(TenantRow.id)).all()]

    def set_tenant_weight(self, tenant_id: int, weight: float) -> bool:
        with self._tx() as s:
            res = s.execute(update(TenantRow).where(TenantRow.id == tenant_id).values(weight=weight))
            return bool(affected_rows(res))

    # ---- quotas ---------------------------------------------------------------
    def set_quota(self, quota: Quota) -> Quota:
        """Create or replace the tenant's quota for that GPU model."""
        with self._tx() as s:
            row = s.scalar(
                select(QuotaRow).where(QuotaRow.tenant_id == quota.tenant_id, QuotaRow.gpu_model == quota.gpu_model)
            )
            if row is None:
                row = QuotaRow(tenant_id=quota.tenant_id, gpu_model=quota.gpu_model)
                s.add(row)
            row.guaranteed_gpus, row.max_gpus = quota.guaranteed_gpus, quota.max_gpus
            s.flush()
            return to_quota(row)

    def delete_quota(self, tenant_id: int, gpu_model: str) -> bool:
        with self._tx() as s:
            res = s.execute(delete(QuotaRow).where(QuotaRow.tenant_id == tenant_id, QuotaRow.gpu_model == gpu_model))
            return bool(affected_rows(res))

    def list_quotas(self, tenant_id: int | None = None) -> list[Quota]:
        with self._tx() as s:
            q = select(QuotaRow).order_by(QuotaRow.tenant_id, QuotaRow.gpu_model)
            if tenant_id is not None:
                q = q.where(QuotaRow.tenant_id == tenant_id)
            return [to_quota(r) for r in s.scalars(q).all()]

    # ---- queues ---------------------------------------------------------------
    def upsert_queue(self, tenant_id: int, name: str, mode: str, priority: int) -> Queue:
        with self._tx() as s:
            row = s.scalar(select(QueueRow).where(QueueRow.tenant_id == tenant_id, QueueRow.name == name))
            if row is None:
                row = QueueRow(tenant_id=tenant_id, name=name)
                s.add(row)
            row.mode, row.priority = mode, priority
            s.flush()
            return to_queue(row)

    def list_queues(self, tenant_id: int | None = None) -> list[Queue]:
        with self._tx() as s:
            q = select(QueueRow).order_by(QueueRow.tenant_id, QueueRow.name)
            if tenant_id is not None:
                q = q.where(QueueRow.tenant_id == tenant_id)
            return [to_queue(r) for r in s.scalars(q).all()]

    # ---- users ----------------------------------------------------------------
    def find_user(self, name: str) -> User | None:
        with self._tx() as s:
            row = s.scalar(select(UserRow).where(UserRow.name == name))
            return to_user(row) if row else None

    def list_users(self, tenant_id: int | None = None) -> list[User]:
        with self._tx() as s:
            q = select(UserRow).order_by(UserRow.id)
            if tenant_id is not None:
                q = q.where(UserRow.tenant_id == tenant_id)
            return [to_user(r) for r in s.scalars(q).all()]

    def update_user(
        self, user_id: int, *, role: str | None = None, password_hash: str | None = None, disabled: bool | None = None
    ) -> bool:
        """Raises ConflictError (changing nothing) when the change would leave no enabled admin: the admins' rows
        are locked first, so two admins demoting each other at once cannot both succeed."""
        values: dict[str, str | bool] = {}
        if role is not None:
            values["role"] = role
        if password_hash is not None:
            values["password_hash"] = password_hash
        if disabled is not None:
            values["disabled"] = disabled
        if not values:
            return False
        with self._rmw() as s:
            if (role is not None and role != "admin") or disabled:
                admins = s.scalars(
                    select(UserRow.id)
                    .where(UserRow.role == "admin", UserRow.disabled.is_(False))
                    .order_by(UserRow.id)
                    .with_for_update()
                ).all()
                if list(admins) == [user_id]:
                    raise ConflictError(
                        "the last admin cannot lose the role or be disabled: make another user admin first",
                        field="role" if role is not None else "disabled",
                    )
            return bool(affected_rows(s.execute(update(UserRow).where(UserRow.id == user_id).values(**values))))

    def set_user_unix_identity(self, user_id: int, uid: int | None, gid: int | None) -> bool:
        """Map the user to a Unix account (uid, gid), or clear the mapping with None. False: no such user."""
        with self._tx() as s:
            res = s.execute(update(UserRow).where(UserRow.id == user_id).values(unix_uid=uid, unix_gid=gid))
            return bool(affected_rows(res))

    # ---- tokens ---------------------------------------------------------------
    def list_tokens(self, user_ids: Sequence[int] | None = None) -> list[TokenRecord]:
        """Tokens of these users (all user tokens when None); join tokens are not listed here."""
        with self._tx() as s:
            q = select(TokenRow).where(TokenRow.kind != "join").order_by(TokenRow.id)
            if user_ids is not None:
                q = q.where(TokenRow.user_id.in_(list(user_ids)))
            return [to_token(r) for r in s.scalars(q).all()]

    def get_token(self, token_id: int) -> TokenRecord | None:
        with self._tx() as s:
            row = s.get(TokenRow, token_id)
            return to_token(row) if row else None

    def revoke_token(self, token_id: int) -> bool:
        """Revokes the token and every session opened with it (and those opened with them), in one transaction."""
        with self._tx() as s:
            res = s.execute(
                update(TokenRow).where(TokenRow.id == token_id, TokenRow.revoked.is_(False)).values(revoked=True)
            )
            parents = [token_id]
            while parents:  # sessions opened with a session: follow the chain down
                children = list(
                    s.scalars(
                        select(TokenRow.id).where(TokenRow.parent_id.in_(parents), TokenRow.revoked.is_(False))
                    ).all()
                )
                if children:
                    s.execute(update(TokenRow).where(TokenRow.id.in_(children)).values(revoked=True))
                parents = children
            return bool(affected_rows(res))

    def revoke_sessions(self, user_id: int, keep_token_id: int | None = None) -> int:
        """Revoke every login session of the user (its API tokens stay), but `keep_token_id`. Returns how many."""
        with self._tx() as s:
            q = update(TokenRow).where(
                TokenRow.user_id == user_id, TokenRow.is_session.is_(True), TokenRow.revoked.is_(False)
            )
            if keep_token_id is not None:
                q = q.where(TokenRow.id != keep_token_id)
            return affected_rows(s.execute(q.values(revoked=True)))
