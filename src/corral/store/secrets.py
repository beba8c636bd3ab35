"""Tenant secrets in SQL (a SqlStore mixin): only sealed values and their key ids, never a plain value."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.errors import ConflictError
from corral.store.records import SecretRecord
from corral.store.tables import SecretRow
from corral.store.tenancy import affected_rows, utc


def _record(r: SecretRow) -> SecretRecord:
    return SecretRecord(
        id=r.id,
        tenant_id=r.tenant_id,
        name=r.name,
        kind=r.kind,
        meta=dict(r.meta or {}),
        created_by=r.created_by,
        created_at=utc(r.created_at) or r.created_at,
        updated_at=utc(r.updated_at) or r.updated_at,
        key_id=r.key_id,
        sealed=r.sealed,
    )


class SecretMethods:
    """Every method is one transaction. Callers seal and open values; the store never sees a plain one."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def create_secret(
        self,
        tenant_id: int,
        name: str,
        kind: str,
        meta: dict[str, Any],
        key_id: str,
        sealed: str,
        created_by: str,
        now: datetime,
    ) -> SecretRecord:
        """Raises ConflictError (field `name`) when the tenant already has a secret of that name."""
        try:
            with self._tx() as s:
                row = SecretRow(
                    tenant_id=tenant_id,
                    name=name,
                    kind=kind,
                    meta=dict(meta),
                    key_id=key_id,
                    sealed=sealed,
                    created_by=created_by,
                    created_at=now,
                    updated_at=now,
                )
                s.add(row)
                s.flush()
                return _record(row)
        except IntegrityError as e:
            raise ConflictError(f"secret {name!r} already exists in this tenant", field="name") from e

    def update_secret(
        self, tenant_id: int, name: str, key_id: str, sealed: str, now: datetime, meta: dict[str, Any] | None = None
    ) -> SecretRecord | None:
        """Replace the value (and `meta` when given); None when there is no such secret."""
        with self._tx() as s:
            row = s.scalar(select(SecretRow).where(SecretRow.tenant_id == tenant_id, SecretRow.name == name))
            if row is None:
                return None
            row.key_id, row.sealed, row.updated_at = key_id, sealed, now
            if meta is not None:
                row.meta = dict(meta)
            return _record(row)

    def find_secrets(self, tenant_id: int, names: Iterable[str]) -> dict[str, SecretRecord]:
        """The tenant's secrets among `names`, by name (absent names are missing from the result). Read-only."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        with self._tx() as s:
            rows = s.scalars(select(SecretRow).where(SecretRow.tenant_id == tenant_id, SecretRow.name.in_(wanted)))
            return {r.name: _record(r) for r in rows}

    def list_secrets(self, tenant_id: int | None = None) -> list[SecretRecord]:
        """Ordered by (tenant, name); `tenant_id` filters. Read-only."""
        with self._tx() as s:
            q = select(SecretRow).order_by(SecretRow.tenant_id, SecretRow.name)
            if tenant_id is not None:
                q = q.where(SecretRow.tenant_id == tenant_id)
            return [_record(r) for r in s.scalars(q)]

    def delete_secret(self, tenant_id: int, name: str) -> bool:
        """False when there was no such secret."""
        with self._tx() as s:
            return (
                affected_rows(
                    s.execute(delete(SecretRow).where(SecretRow.tenant_id == tenant_id, SecretRow.name == name))
                )
                > 0
            )

    def secret_key_ids(self) -> set[str]:
        """Ids of the keys that stored values were sealed with (what the key file must hold). Read-only."""
        with self._tx() as s:
            return set(s.scalars(select(SecretRow.key_id).distinct()))

    def list_secrets_sealed_with_other_keys(self, key_id: str) -> list[SecretRecord]:
        """Secrets not sealed with `key_id` (what a key rotation has left to re-seal). Read-only."""
        with self._tx() as s:
            return [_record(r) for r in s.scalars(select(SecretRow).where(SecretRow.key_id != key_id))]

    def reseal_secret(self, secret_id: int, old_key_id: str, old_sealed: str, key_id: str, sealed: str) -> bool:
        """Swap a value for the same value sealed with another key. Compare-and-set on the old sealed value:
        False (nothing changed) when the secret was updated or deleted meanwhile."""
        with self._tx() as s:
            result = s.execute(
                update(SecretRow)
                .where(SecretRow.id == secret_id, SecretRow.key_id == old_key_id, SecretRow.sealed == old_sealed)
                .values(key_id=key_id, sealed=sealed)
            )
            return affected_rows(result) > 0
