"""Directory login use-cases: password logins through LDAP, the group -> tenant and role mappings, and the
provisioning of directory users (LDAP and OpenID Connect share it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from corral.api.schemas import GroupMappingIn, GroupMappingOut
from corral.core.directory import DirectoryIdentity, GroupMapping, normalize_group, select_membership
from corral.core.errors import AuthError, NotFoundError, ValidationError
from corral.core.tenancy import Action, parse_role
from corral.server.auth import Principal
from corral.server.services.audit import record_audit
from corral.store.protocols import AuditStore, DirectoryStore, IdentityStore, TenancyStore
from corral.store.records import User


class DirectoryUserStore(DirectoryStore, IdentityStore, Protocol):
    """Provisioning directory users: the group mappings and the users and tokens they decide."""


class DirectoryAdminStore(DirectoryStore, TenancyStore, AuditStore, Protocol):
    """Changing group mappings: the mappings, the tenants they name, and the audit trail."""


WRONG = "wrong user name or password"  # the one message for every refused password, local or directory


class PasswordDirectory(Protocol):
    """A directory that checks passwords (LDAP)."""

    source: str  # the users.directory value of the users it manages

    def authenticate(self, username: str, password: str) -> DirectoryIdentity | None:
        """The identity when the directory accepts the name and password, None when it does not. Raises
        UnavailableError when the directory cannot be asked. Blocks on the network."""
        ...


def _now() -> datetime:
    return datetime.now(UTC)


def is_directory_login(user: User | None, directory: PasswordDirectory | None) -> bool:
    """Whether a password login goes to the directory: for names no local user holds, and for users the
    directory manages. A local user (an admin made with a password) is never checked against the directory,
    so a directory entry of the same name cannot take the account over, and local logins work while the
    directory is down."""
    return directory is not None and (user is None or user.directory == directory.source)


def login_through_directory(
    store: DirectoryUserStore, directory: PasswordDirectory, username: str, password: str
) -> User:
    """Check the password with the directory, then provision or update the user from the group mappings."""
    identity = directory.authenticate(username, password)
    if identity is None:
        raise AuthError(WRONG)
    return provision_directory_user(store, identity)


def provision_directory_user(store: DirectoryUserStore, identity: DirectoryIdentity) -> User:
    """The local user of a directory identity, with the tenant and role its groups map to now. A user in no mapped
    group is refused, and every token it still holds is revoked (removed from its groups = cut off)."""
    mapping = select_membership(identity.groups, store.list_group_mappings())
    if mapping is None:
        existing = store.find_user(identity.username)
        if existing is not None and existing.directory == identity.source:
            for token in store.list_tokens([existing.id]):
                store.revoke_token(token.id)
        raise AuthError(
            f"{identity.username} is in no directory group that is mapped to a tenant "
            f"(an admin maps groups with `corral directory map`)"
        )
    user = store.provision_directory_user(
        identity.username, identity.source, mapping.tenant_id, mapping.role.value, _now()
    )
    if user.disabled:  # an admin disabled the account in Corral: the directory does not re-enable it
        raise AuthError(WRONG)
    return user


# ---- mappings (admins) -----------------------------------------------------------
def mapping_out(m: GroupMapping) -> GroupMappingOut:
    return GroupMappingOut(id=m.id, group=m.group, tenant=m.tenant, role=m.role.value)


def list_mappings(store: DirectoryStore, caller: Principal) -> list[GroupMappingOut]:
    caller.require(Action.MANAGE_CLUSTER)
    return [mapping_out(m) for m in store.list_group_mappings()]


def create_mapping(store: DirectoryAdminStore, caller: Principal, body: GroupMappingIn) -> GroupMappingOut:
    caller.require(Action.MANAGE_CLUSTER)
    group = normalize_group(body.group)
    if not group or len(group) > 255:  # casefold may lengthen a name ("ß" -> "ss")
        raise ValidationError("group", "must be 1-255 characters")
    role = parse_role(body.role)
    tenant = store.find_tenant(body.tenant)
    if tenant is None:
        raise ValidationError("tenant", f"no tenant named {body.tenant!r}")
    m = store.create_group_mapping(group, tenant.id, role.value, _now())
    record_audit(store, caller, "directory.map", group, f"tenant={tenant.name} role={role.value}")
    return mapping_out(m)


def delete_mapping(store: DirectoryAdminStore, caller: Principal, mapping_id: int) -> None:
    caller.require(Action.MANAGE_CLUSTER)
    if not store.delete_group_mapping(mapping_id):
        raise NotFoundError("group mapping", str(mapping_id))
    record_audit(store, caller, "directory.unmap", str(mapping_id))
