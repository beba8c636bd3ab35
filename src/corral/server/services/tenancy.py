"""Tenancy use-cases: tenants, quotas, queues, users, tokens; every one checks the caller's role and tenant."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from corral.api.schemas import (
    QueueIn,
    QueueOut,
    QuotaIn,
    QuotaOut,
    TenantIn,
    TenantOut,
    TokenIn,
    TokenOut,
    UserIn,
    UserOut,
    UserPatch,
)
from corral.core.errors import AuthError, ForbiddenError, NotFoundError, ValidationError
from corral.core.requests import model_matches
from corral.core.tenancy import Action, Role, check_name, check_quota, parse_role
from corral.server.auth import Principal, hash_token, new_token
from corral.server.passwords import PasswordPool, hash_password
from corral.server.services.audit import record_audit
from corral.server.services.login import LoginGuard
from corral.store.protocols import AuditStore, IdentityStore, NodeStore, TenancyStore
from corral.store.records import Quota, Tenant, TokenRecord, User


class TenancyAdminStore(TenancyStore, NodeStore, AuditStore, Protocol):
    """Changing tenants, quotas and queues: the tenancy role, the GPU pool (quota checks) and the audit trail."""


class UserAdminStore(IdentityStore, TenancyStore, AuditStore, Protocol):
    """Changing users and tokens: the identity role, tenant names and the audit trail."""


LOGIN_TOKEN_TTL = timedelta(hours=12)


def _now() -> datetime:
    return datetime.now(UTC)


def load_tenant(store: TenancyStore, name: str, caller: Principal) -> Tenant:
    tenant = store.find_tenant(name)
    if tenant is None:
        raise NotFoundError("tenant", name)
    caller.check_tenant(tenant.id, "tenant", name)
    return tenant


def tenant_names(store: TenancyStore) -> dict[int, str]:
    return {t.id: t.name for t in store.list_tenants()}


_KNOWN_NAMES: weakref.WeakKeyDictionary[TenancyStore, dict[int, str]] = weakref.WeakKeyDictionary()


def known_tenant_names(store: TenancyStore, tenant_ids: Iterable[int | None]) -> dict[int, str]:
    """id -> name, at least of `tenant_ids` that are tenants, without a query when every one was seen before (a
    job list or a job calls this on every request). A tenant is never renamed nor deleted (no store method does
    either), so a name once read stays right; an id not yet known reloads them all. The map holds only names,
    and callers name each job's own tenant only: nothing of one tenant reaches another's answer."""
    wanted = {i for i in tenant_ids if i}
    known = _KNOWN_NAMES.get(store)
    if known is None or not wanted <= known.keys():
        known = tenant_names(store)
        _KNOWN_NAMES[store] = known
    return known


def tenant_out(t: Tenant, names: dict[int, str]) -> TenantOut:
    return TenantOut(
        id=t.id,
        name=t.name,
        parent=names.get(t.parent_id) if t.parent_id else None,
        weight=t.weight,
        created_at=t.created_at,
    )


def list_tenants(store: TenancyStore, caller: Principal) -> list[TenantOut]:
    names = tenant_names(store)
    scope = caller.tenant_scope()
    return [tenant_out(t, names) for t in store.list_tenants() if scope is None or t.id == scope]


def create_tenant(store: TenancyAdminStore, caller: Principal, body: TenantIn) -> TenantOut:
    caller.require(Action.MANAGE_CLUSTER)
    check_name("name", body.name)
    parent_id = None
    if body.parent:
        parent = store.find_tenant(body.parent)
        if parent is None:
            raise ValidationError("parent", f"no tenant named {body.parent!r}")
        parent_id = parent.id
    t = store.create_tenant(body.name, _now(), parent_id=parent_id, weight=body.weight)
    record_audit(store, caller, "tenant.create", t.name, f"parent={body.parent or ''} weight={body.weight:g}")
    return tenant_out(t, tenant_names(store))


def list_quotas(store: TenancyStore, caller: Principal, tenant: str | None) -> list[QuotaOut]:
    names = tenant_names(store)
    tenant_id = load_tenant(store, tenant, caller).id if tenant else caller.tenant_scope()
    return [
        QuotaOut(
            tenant=names[q.tenant_id], gpu_model=q.gpu_model, guaranteed_gpus=q.guaranteed_gpus, max_gpus=q.max_gpus
        )
        for q in store.list_quotas(tenant_id)
    ]


def check_quota_fits_pool(store: TenancyAdminStore, tenant_id: int, gpu_model: str, guaranteed: int) -> None:
    """The guarantees of all tenants for a model (or in total) may not exceed the GPUs the pool has."""
    gpus = [g for n in store.list_nodes() for g in n.gpus]
    if gpu_model:
        matching = [g for g in gpus if model_matches(g.model, (gpu_model,))]
        if not matching:
            models = ", ".join(sorted({g.model for g in gpus})) or "none registered yet"
            raise ValidationError("gpu_model", f"no {gpu_model} GPUs in the pool (models: {models})")
        capacity = len(matching)
    else:
        capacity = len(gpus)
    others = sum(
        q.guaranteed_gpus
        for q in store.list_quotas()
        if q.gpu_model.lower() == gpu_model.lower() and q.tenant_id != tenant_id
    )
    if others + guaranteed > capacity:
        what = f"{gpu_model} GPUs" if gpu_model else "GPUs"
        raise ValidationError(
            "guaranteed_gpus",
            f"guarantees would total {others + guaranteed} {what} but the pool "
            f"has {capacity} (other tenants hold {others})",
        )


def set_quota(store: TenancyAdminStore, caller: Principal, tenant: str, body: QuotaIn) -> QuotaOut:
    caller.require(Action.MANAGE_CLUSTER)
    t = load_tenant(store, tenant, caller)
    check_quota(body.guaranteed_gpus, body.max_gpus)
    check_quota_fits_pool(store, t.id, body.gpu_model.strip(), body.guaranteed_gpus)
    q = store.set_quota(Quota(t.id, body.gpu_model.strip(), body.guaranteed_gpus, body.max_gpus))
    record_audit(
        store, caller, "quota.set", f"{t.name}/{q.gpu_model or '*'}", f"guaranteed={q.guaranteed_gpus} max={q.max_gpus}"
    )
    return QuotaOut(tenant=t.name, gpu_model=q.gpu_model, guaranteed_gpus=q.guaranteed_gpus, max_gpus=q.max_gpus)


def delete_quota(store: TenancyAdminStore, caller: Principal, tenant: str, gpu_model: str) -> None:
    caller.require(Action.MANAGE_CLUSTER)
    t = load_tenant(store, tenant, caller)
    if not store.delete_quota(t.id, gpu_model):
        raise NotFoundError("quota", f"{tenant}/{gpu_model or '*'}")
    record_audit(store, caller, "quota.delete", f"{tenant}/{gpu_model or '*'}")


def list_queues(store: TenancyStore, caller: Principal, tenant: str | None) -> list[QueueOut]:
    names = tenant_names(store)
    tenant_id = load_tenant(store, tenant, caller).id if tenant else caller.tenant_scope()
    return [
        QueueOut(tenant=names[q.tenant_id], name=q.name, mode=q.mode, priority=q.priority)
        for q in store.list_queues(tenant_id)
    ]


def set_queue(store: TenancyAdminStore, caller: Principal, tenant: str, body: QueueIn) -> QueueOut:
    t = load_tenant(store, tenant, caller)
    if not (caller.is_admin or caller.role is Role.TENANT_ADMIN):
        raise ForbiddenError(f"your role ({caller.role.value}) may not manage queues; that takes: admin, tenant-admin")
    check_name("name", body.name)
    q = store.upsert_queue(t.id, body.name, body.mode, body.priority)
    record_audit(store, caller, "queue.set", f"{t.name}/{q.name}", f"mode={q.mode} priority={q.priority}")
    return QueueOut(tenant=t.name, name=q.name, mode=q.mode, priority=q.priority)


# ---- users -------------------------------------------------------------------
def user_out(u: User, names: dict[int, str]) -> UserOut:
    return UserOut(
        id=u.id,
        name=u.name,
        role=u.role,
        tenant=names.get(u.tenant_id) if u.tenant_id else None,
        has_password=bool(u.password_hash),
        created_at=u.created_at,
        directory=u.directory,
        disabled=u.disabled,
        unix_uid=u.unix_uid,
        unix_gid=u.unix_gid,
    )


def _check_may_grant(caller: Principal, role: Role) -> None:
    caller.require(Action.MANAGE_TENANT)
    if role is Role.ADMIN and not caller.is_admin:
        raise ForbiddenError("only an admin may grant the admin role")


def list_users(store: UserAdminStore, caller: Principal) -> list[UserOut]:
    caller.require(Action.MANAGE_TENANT)
    names = tenant_names(store)
    return [user_out(u, names) for u in store.list_users(caller.tenant_scope())]


def create_user(
    store: UserAdminStore, caller: Principal, body: UserIn, passwords: PasswordPool | None = None
) -> UserOut:
    role = parse_role(body.role)
    _check_may_grant(caller, role)
    check_name("name", body.name)
    if body.tenant is None:
        tenant_id = caller.tenant_id
    else:
        t = store.find_tenant(body.tenant)
        if t is None or (not caller.is_admin and t.id != caller.tenant_id):
            raise ValidationError("tenant", f"no tenant named {body.tenant!r}")
        tenant_id = t.id
    password_hash = _hash(passwords, body.password) if body.password else ""
    u = store.create_user(body.name, role.value, _now(), tenant_id=tenant_id, password_hash=password_hash)
    record_audit(store, caller, "user.create", u.name, f"role={u.role}")
    return user_out(u, tenant_names(store))


def load_user(store: IdentityStore, caller: Principal, name: str) -> User:
    u = store.find_user(name)
    if u is None:
        raise NotFoundError("user", name)
    caller.check_tenant(u.tenant_id, "user", name)
    return u


def _hash(passwords: PasswordPool | None, password: str) -> str:
    return passwords.hash(password) if passwords is not None else hash_password(password)


def _check_current_password(logins: LoginGuard, user: User, current: str | None, address: str) -> None:
    """Changing one's own password takes the current one, so a stolen session cannot lock the owner out. A wrong
    one counts as a failed login of the user (the same back-off)."""
    if not current:
        raise ValidationError("current_password", "give your current password to set a new one")
    try:
        logins.check_password(user.name, current, address)
    except AuthError as e:
        raise ValidationError("current_password", "wrong password") from e


def update_user(
    store: UserAdminStore,
    caller: Principal,
    name: str,
    body: UserPatch,
    logins: LoginGuard | None = None,
    address: str = "unknown",
) -> UserOut:
    """A role, a password or disabling. A new password ends every other login session of the user (the caller's
    own stays when it changes its own password, which takes the current one); disabling ends them all (its tokens
    fail from then on). The last enabled admin can neither lose the role nor be disabled (409, atomically)."""
    u = load_user(store, caller, name)
    own = caller.user is not None and caller.user.id == u.id
    self_service = own and body.role is None and body.disabled is None
    if not self_service:
        _check_may_grant(caller, parse_role(body.role) if body.role else Role(u.role))
    if own and body.password and u.password_hash and logins is not None:
        _check_current_password(logins, u, body.current_password, address)
    role = parse_role(body.role).value if body.role else None
    password_hash = _hash(logins.passwords if logins else None, body.password) if body.password else None
    store.update_user(u.id, role=role, password_hash=password_hash, disabled=body.disabled)
    if password_hash is not None or body.disabled:
        store.revoke_sessions(u.id, keep_token_id=caller.token.id if own and not body.disabled else None)
    what = [f"role={role}"] if role else []
    what += ["password"] if body.password else []
    what += [f"disabled={body.disabled}".lower()] if body.disabled is not None else []
    record_audit(store, caller, "user.update", u.name, " ".join(what))
    return user_out(store.get_user(u.id) or u, tenant_names(store))


# ---- tokens ------------------------------------------------------------------
def token_out(t: TokenRecord, users: dict[int, str], secret: str | None = None) -> TokenOut:
    return TokenOut(
        id=t.id,
        name=t.name,
        user=users.get(t.user_id) if t.user_id else None,
        created_at=t.created_at,
        expires_at=t.expires_at,
        revoked=t.revoked,
        token=secret,
        kind="session" if t.is_session else t.kind,
    )


def _user_names(store: IdentityStore, caller: Principal) -> dict[int, str]:
    return {u.id: u.name for u in store.list_users(caller.tenant_scope())}


def list_tokens(store: IdentityStore, caller: Principal) -> list[TokenOut]:
    users = _user_names(store, caller)
    if caller.is_admin:
        ids: list[int] | None = None
    elif caller.role is Role.TENANT_ADMIN:
        ids = list(users)
    else:
        ids = [caller.user.id] if caller.user else []
    return [token_out(t, users) for t in store.list_tokens(ids)]


def create_metrics_token(store: UserAdminStore, caller: Principal, body: TokenIn) -> TokenOut:
    """A token that can only scrape /metrics (for Prometheus): admins only, it belongs to no user."""
    caller.require(Action.MANAGE_CLUSTER)
    if body.user is not None:
        raise ValidationError("user", "a metrics token belongs to no user")
    expires = _now() + timedelta(seconds=body.expires_in_s) if body.expires_in_s else None
    secret = new_token("metrics")
    t = store.create_token(hash_token(secret), "metrics", body.name or "metrics", None, _now(), expires_at=expires)
    record_audit(store, caller, "token.create", f"metrics/{t.id}", t.name)
    return token_out(t, {}, secret)


def create_token(store: UserAdminStore, caller: Principal, body: TokenIn) -> TokenOut:
    if body.metrics:
        return create_metrics_token(store, caller, body)
    owner = caller.user
    if body.user is not None and (owner is None or body.user != owner.name):
        caller.require(Action.MANAGE_TENANT)
        owner = load_user(store, caller, body.user)
    if owner is None:
        raise ValidationError("user", "a token belongs to a user")
    expires = _now() + timedelta(seconds=body.expires_in_s) if body.expires_in_s else None
    secret = new_token("user")
    t = store.create_token(hash_token(secret), "user", body.name or "api", owner.id, _now(), expires_at=expires)
    record_audit(store, caller, "token.create", f"{owner.name}/{t.id}", t.name)
    return token_out(t, {owner.id: owner.name}, secret)


def revoke_token(store: UserAdminStore, caller: Principal, token_id: int) -> None:
    t = store.get_token(token_id)
    if t is None or t.kind == "join":
        raise NotFoundError("token", str(token_id))
    own = caller.user is not None and t.user_id == caller.user.id
    if not own:
        caller.require(Action.MANAGE_TENANT)
        owner = store.get_user(t.user_id) if t.user_id else None
        caller.check_tenant(owner.tenant_id if owner else None, "token", str(token_id))
    store.revoke_token(token_id)
    record_audit(store, caller, "token.revoke", str(token_id))


def login(guard: LoginGuard, username: str, password: str, address: str) -> TokenOut:
    """Password login: a session token that expires after LOGIN_TOKEN_TTL and ends with a password change. One
    message for every failure; failures back off per user name and per address (see LoginGuard)."""
    u = guard.check_password(username, password, address)
    secret = new_token("user")
    t = guard.store.create_token(
        hash_token(secret), "user", "login session", u.id, _now(), expires_at=_now() + LOGIN_TOKEN_TTL, is_session=True
    )
    return token_out(t, {u.id: u.name}, secret)
