"""Whom a user's jobs run as: admins map users to existing Unix accounts; the others get a UID from the range."""

from __future__ import annotations

from corral.api.schemas import UnixIdentityIn, UnixIdentityOut
from corral.core.errors import ValidationError
from corral.core.tenancy import Action
from corral.core.unix_identity import UidRange, check_mapped_identity, compute_job_identity
from corral.server.auth import Principal
from corral.server.services.audit import record_audit
from corral.server.services.tenancy import UserAdminStore, load_user
from corral.store.records import User


def unix_identity_out(u: User, uids: UidRange) -> UnixIdentityOut:
    mapped = None if u.unix_uid is None else (u.unix_uid, u.unix_gid or u.unix_uid)
    identity = compute_job_identity(u.id, u.name, mapped, uids)
    return UnixIdentityOut(
        user=u.name, uid=identity.uid, gid=identity.gid, source="range" if mapped is None else "mapped"
    )


def load_unix_identity(store: UserAdminStore, caller: Principal, name: str, uids: UidRange) -> UnixIdentityOut:
    """A user's own identity, or one of the caller's tenant (tenant admins) or of anyone (admins)."""
    u = load_user(store, caller, name)
    if caller.user is None or caller.user.id != u.id:
        caller.require(Action.MANAGE_TENANT)
    return unix_identity_out(u, uids)


def set_unix_identity(
    store: UserAdminStore, caller: Principal, name: str, body: UnixIdentityIn, uids: UidRange
) -> UnixIdentityOut:
    """Admins only: a tenant admin could otherwise run its members as any account of the nodes. Refuses system
    accounts, UIDs of the range, and a UID another tenant's user is mapped to (files would be shared)."""
    caller.require(Action.MANAGE_CLUSTER)
    u = load_user(store, caller, name)
    gid = body.gid if body.gid is not None else body.uid
    check_mapped_identity(body.uid, gid, uids)
    for other in store.list_users():
        if other.id != u.id and other.unix_uid == body.uid and other.tenant_id != u.tenant_id:
            raise ValidationError(
                "uid",
                f"uid {body.uid} is already the account of user {other.name!r} of "
                "another tenant; tenants never share a Unix account",
            )
    store.set_user_unix_identity(u.id, body.uid, gid)
    record_audit(store, caller, "user.unix", u.name, f"uid={body.uid} gid={gid}")
    return unix_identity_out(store.get_user(u.id) or u, uids)


def clear_unix_identity(store: UserAdminStore, caller: Principal, name: str, uids: UidRange) -> UnixIdentityOut:
    """Admins only: the user's jobs run as a UID from the range again."""
    caller.require(Action.MANAGE_CLUSTER)
    u = load_user(store, caller, name)
    store.set_user_unix_identity(u.id, None, None)
    record_audit(store, caller, "user.unix", u.name, "cleared")
    return unix_identity_out(store.get_user(u.id) or u, uids)
