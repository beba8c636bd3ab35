"""Directory login in SQL: group -> tenant and role mappings, and directory users provisioned at login (a mixin)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.directory import GroupMapping
from corral.core.errors import ConflictError
from corral.core.tenancy import Role
from corral.store.records import User
from corral.store.tables import DirectoryGroupRow, TenantRow, UserRow
from corral.store.tenancy import affected_rows, to_user


class DirectoryMethods:
    """Every method is one transaction."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def list_group_mappings(self) -> list[GroupMapping]:
        """Every mapping with its tenant's name, oldest first."""
        with self._tx() as s:
            rows = s.execute(
                select(DirectoryGroupRow, TenantRow.name)
                .join(TenantRow, TenantRow.id == DirectoryGroupRow.tenant_id)
                .order_by(DirectoryGroupRow.id)
            ).all()
            return [GroupMapping(r.id, r.group_name, r.tenant_id, tenant, Role(r.role)) for r, tenant in rows]

    def create_group_mapping(self, group: str, tenant_id: int, role: str, now: datetime) -> GroupMapping:
        """Raises ConflictError when the group is mapped already (one group, one tenant and role)."""
        try:
            with self._tx() as s:
                row = DirectoryGroupRow(group_name=group, tenant_id=tenant_id, role=role, created_at=now)
                s.add(row)
                s.flush()
                tenant = s.get(TenantRow, tenant_id)
                return GroupMapping(row.id, group, tenant_id, tenant.name if tenant else "", Role(role))
        except IntegrityError as e:
            raise ConflictError(f"group {group!r} is mapped already; remove its mapping first", field="group") from e

    def delete_group_mapping(self, mapping_id: int) -> bool:
        with self._tx() as s:
            return bool(affected_rows(s.execute(delete(DirectoryGroupRow).where(DirectoryGroupRow.id == mapping_id))))

    def provision_directory_user(self, name: str, source: str, tenant_id: int, role: str, now: datetime) -> User:
        """Create the user of a directory login, or bring its tenant and role up to date with the directory.
        Raises ConflictError when a user not managed by `source` holds the name (a local user, or one of the other
        directory): a directory never takes over an account it did not make."""
        with self._tx() as s:
            row = s.scalar(select(UserRow).where(UserRow.name == name))
            if row is None:
                row = UserRow(
                    name=name, role=role, created_at=now, tenant_id=tenant_id, password_hash="", directory=source
                )
                s.add(row)
            elif row.directory != source:
                owner = f"the {row.directory} directory" if row.directory else "Corral (a local user)"
                raise ConflictError(f"user {name!r} is managed by {owner}, not by the {source} directory")
            else:
                row.tenant_id, row.role = tenant_id, role
            s.flush()
            return to_user(row)
