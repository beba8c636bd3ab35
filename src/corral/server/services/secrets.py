"""Secret use-cases: tenant-scoped create, update, list and delete; a job's secret_env checked at submit and
resolved only when the job is handed to its agent; rotation of the key that seals them."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from corral.api.secrets import KeyRotationOut, SecretIn, SecretKind, SecretOut, SecretUpdate
from corral.api.staging import S3Login
from corral.core.containers import registry_host, same_registry
from corral.core.errors import CorralError, NotFoundError, ValidationError
from corral.core.tenancy import Action
from corral.server.auth import Principal
from corral.server.keyring import Keyring, KeyringError, Sealed
from corral.server.services.audit import record_audit
from corral.store.base import StateStore
from corral.store.protocols import AuditStore, SecretStore, TenancyStore
from corral.store.records import SecretRecord


class SecretAdminStore(SecretStore, TenancyStore, AuditStore, Protocol):
    """Tenants' secrets: the secret role, tenant names, and the audit trail."""


# Sealing and storing a value is one step against a rotation: a value sealed with the old key and written after
# the rotation retired that key would never open again.
_SEALING = threading.Lock()


class SecretUnavailable(CorralError):
    """A job's secret cannot be handed over (deleted since submit, or its key is gone)."""

    code = "secret_unavailable"


def secret_context(tenant_id: int, name: str) -> str:
    """What a sealed value is bound to: it opens only as this tenant's secret of this name."""
    return f"corral-secret:v1:{tenant_id}:{name}"


def resolve_tenant(store: TenancyStore, caller: Principal, tenant: str | None) -> int:
    """The tenant a secrets call is about: the caller's own, or (admins) the one named. Another tenant's name is
    reported as not found for everyone else: its existence is private."""
    if tenant is None:
        if caller.tenant_id is None:
            raise ValidationError("tenant", "the caller belongs to no tenant; name one with ?tenant=")
        return caller.tenant_id
    found = store.find_tenant(tenant)
    if found is None:
        raise NotFoundError("tenant", tenant)
    caller.check_tenant(found.id, "tenant", tenant)
    return found.id


def _meta(kind: SecretKind, host: str | None, username: str | None, region: str | None = None) -> dict[str, str]:
    if kind is SecretKind.S3:
        return {"host": host or "", "username": username or "", "region": region or ""}
    return {"host": host or "", "username": username or ""} if kind is SecretKind.REGISTRY else {}


def create_secret(
    store: SecretAdminStore, keyring: Keyring, caller: Principal, body: SecretIn, tenant: str | None
) -> SecretRecord:
    caller.require(Action.SUBMIT)
    tenant_id = resolve_tenant(store, caller, tenant)
    who = caller.user.name if caller.user else caller.token.name
    with _SEALING:
        sealed = keyring.seal(body.value, secret_context(tenant_id, body.name))
        record = store.create_secret(
            tenant_id,
            body.name,
            body.kind.value,
            _meta(body.kind, body.host, body.username, body.region),
            sealed.key_id,
            sealed.token,
            who,
            datetime.now(UTC),
        )
    record_audit(store, caller, "secret.create", f"{tenant_id}/{body.name}", f"kind {body.kind.value}")
    return record


def update_secret(
    store: SecretAdminStore, keyring: Keyring, caller: Principal, name: str, body: SecretUpdate, tenant: str | None
) -> SecretRecord:
    caller.require(Action.SUBMIT)
    tenant_id = resolve_tenant(store, caller, tenant)
    current = store.find_secrets(tenant_id, [name]).get(name)
    if current is None:
        raise NotFoundError("secret", name)
    meta = None
    if body.host or body.username:
        if current.kind not in (SecretKind.REGISTRY.value, SecretKind.S3.value):
            raise ValidationError("host", "host and username are for registry and s3 secrets")
        meta = {
            **current.meta,
            "host": body.host or current.meta.get("host", ""),
            "username": body.username or current.meta.get("username", ""),
        }
    with _SEALING:
        sealed = keyring.seal(body.value, secret_context(tenant_id, name))
        record = store.update_secret(tenant_id, name, sealed.key_id, sealed.token, datetime.now(UTC), meta)
    if record is None:
        raise NotFoundError("secret", name)
    record_audit(store, caller, "secret.update", f"{tenant_id}/{name}")
    return record


def list_secrets(store: SecretAdminStore, caller: Principal, tenant: str | None) -> list[SecretRecord]:
    """The caller's tenant's secrets; an admin naming no tenant sees every tenant's (names only, never values)."""
    caller.require(Action.READ)
    if tenant is None and caller.is_admin:
        return store.list_secrets()
    return store.list_secrets(resolve_tenant(store, caller, tenant))


def delete_secret(store: SecretAdminStore, caller: Principal, name: str, tenant: str | None) -> None:
    caller.require(Action.SUBMIT)
    tenant_id = resolve_tenant(store, caller, tenant)
    if not store.delete_secret(tenant_id, name):
        raise NotFoundError("secret", name)
    record_audit(store, caller, "secret.delete", f"{tenant_id}/{name}")


def secret_out(record: SecretRecord, tenant_names: Mapping[int, str]) -> SecretOut:
    return SecretOut(
        name=record.name,
        tenant=tenant_names.get(record.tenant_id),
        kind=SecretKind(record.kind),
        host=record.meta.get("host") or None,
        username=record.meta.get("username") or None,
        region=record.meta.get("region") or None,
        created_by=record.created_by,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def check_secret_refs(store: SecretStore, tenant_id: int, refs: Mapping[str, str], env: Mapping[str, str]) -> None:
    """At submit: every referenced secret exists in the job's tenant (422 naming `secret_env` otherwise), and no
    variable is both a plain and a secret one. Another tenant's secret of the same name is simply not there."""
    if not refs:
        return
    both = sorted(set(refs) & set(env))
    if both:
        raise ValidationError("secret_env", f"{both[0]} is set both in env and in secret_env")
    found = store.find_secrets(tenant_id, refs.values())
    for var, name in sorted(refs.items()):
        if name not in found:
            raise ValidationError("secret_env", f"no secret {name!r} in this tenant (for {var})")
        if found[name].kind == SecretKind.REGISTRY.value:  # a registry login serves pulls only, never a job's eyes
            raise ValidationError("secret_env", f"secret {name!r} is a registry login: use it with --registry-secret")
        if found[name].kind == SecretKind.S3.value:  # S3 credentials serve the agent's staging only
            raise ValidationError("secret_env", f"secret {name!r} is an s3 login: use it with --stage-secret")


def resolve_secret_env(
    store: StateStore, keyring: Keyring, tenant_id: int | None, refs: Mapping[str, str]
) -> dict[str, str]:
    """VAR -> value for a job being handed to its agent. Raises SecretUnavailable naming the variable and the
    secret (never a value) when one was deleted since submit or cannot be opened."""
    if not refs:
        return {}
    if tenant_id is None:
        raise SecretUnavailable("the job belongs to no tenant, so it has no secrets")
    found = store.find_secrets(tenant_id, refs.values())
    values: dict[str, str] = {}
    for var, name in sorted(refs.items()):
        record = found.get(name)
        if record is None or record.kind != SecretKind.GENERIC.value:  # replaced by a login since submit
            raise SecretUnavailable(f"secret {name!r} (for {var}) no longer exists in the job's tenant")
        try:
            values[var] = keyring.open(Sealed(record.key_id, record.sealed), secret_context(tenant_id, name))
        except KeyringError as e:
            raise SecretUnavailable(f"secret {name!r} (for {var}) cannot be opened: {e.problem}") from e
    return values


def check_registry_secret_ref(store: SecretStore, tenant_id: int, name: str, image: str) -> None:
    """At submit: the job's `registry_secret` is a registry login of its own tenant whose host serves the image
    (422 naming `registry_secret` otherwise). Another tenant's secret of that name is simply not there."""
    record = store.find_secrets(tenant_id, [name]).get(name)
    if record is None:
        raise ValidationError("registry_secret", f"no secret {name!r} in this tenant")
    if record.kind != SecretKind.REGISTRY.value:
        raise ValidationError(
            "registry_secret", f"secret {name!r} is not a registry login (create one with --registry HOST)"
        )
    host = record.meta.get("host", "")
    if not same_registry(host, image):
        raise ValidationError(
            "registry_secret", f"secret {name!r} logs in to {host}, but image {image} comes from {registry_host(image)}"
        )


def resolve_registry_secret(
    store: StateStore, keyring: Keyring, tenant_id: int | None, name: str
) -> tuple[str, str, str]:
    """(host, username, password) of a tenant's registry secret, for the agent that pulls a job's image. Raises
    SecretUnavailable naming the secret when it was deleted since submit or cannot be opened."""
    if tenant_id is None:
        raise SecretUnavailable("the job belongs to no tenant, so it has no registry secret")
    record = store.find_secrets(tenant_id, [name]).get(name)
    if record is None or record.kind != SecretKind.REGISTRY.value:
        raise SecretUnavailable(f"registry secret {name!r} no longer exists in the job's tenant")
    try:
        password = keyring.open(Sealed(record.key_id, record.sealed), secret_context(tenant_id, name))
    except KeyringError as e:
        raise SecretUnavailable(f"registry secret {name!r} cannot be opened: {e.problem}") from e
    return record.meta.get("host", ""), record.meta.get("username", ""), password


def rotate_key(store: SecretAdminStore, keyring: Keyring, caller: Principal) -> KeyRotationOut:
    """A new primary key; every stored value sealed again with it; then the old keys leave the key file. The
    old keys stay in the file until no stored value needs them, so a crash midway loses nothing (run it again)."""
    caller.require(Action.MANAGE_CLUSTER)
    with _SEALING:
        new_id = keyring.rotate_primary()
        resealed = 0
        for r in store.list_secrets_sealed_with_other_keys(new_id):
            value = keyring.open(Sealed(r.key_id, r.sealed), secret_context(r.tenant_id, r.name))
            fresh = keyring.seal(value, secret_context(r.tenant_id, r.name))
            resealed += store.reseal_secret(r.id, r.key_id, r.sealed, fresh.key_id, fresh.token)
        retired = sorted(keyring.key_ids - store.secret_key_ids() - {new_id})  # a deleted row's key may linger
        keyring.forget(retired)
    record_audit(store, caller, "secrets.rotate-key", new_id, f"{resealed} resealed, {len(retired)} retired")
    return KeyRotationOut(key_id=new_id, resealed=resealed, retired_keys=retired)


def check_s3_secret_ref(store: SecretStore, tenant_id: int, name: str, endpoints: Sequence[str]) -> None:
    """At submit: the job's `stage_secret` is an s3 secret of its own tenant whose endpoint the server allows
    (CORRAL_STAGE_S3_ENDPOINTS; AWS's own always). 422 naming `stage_secret` otherwise."""
    record = store.find_secrets(tenant_id, [name]).get(name)
    if record is None:
        raise ValidationError("stage_secret", f"no secret {name!r} in this tenant")
    if record.kind != SecretKind.S3.value:
        raise ValidationError(
            "stage_secret", f"secret {name!r} is not an s3 login (create one with `corral secrets create --s3`)"
        )
    check_s3_endpoint(record.meta.get("host", ""), endpoints, "stage_secret")


def check_s3_endpoint(endpoint: str, allowed: Sequence[str], field: str) -> None:
    """An S3 endpoint other than AWS's own must be one the server allows: a node must never be made to send a
    tenant's requests (and write the answers into a job) to any address a tenant names."""
    if endpoint and endpoint.rstrip("/") not in {a.rstrip("/") for a in allowed}:
        shown = ", ".join(allowed) or "none (AWS's own only)"
        raise ValidationError(
            field, f"the S3 endpoint {endpoint} is not allowed here (CORRAL_STAGE_S3_ENDPOINTS: {shown})"
        )


def resolve_s3_secret(
    store: StateStore, keyring: Keyring, tenant_id: int | None, name: str, endpoints: Sequence[str]
) -> S3Login:
    """A tenant's S3 login opened for the agent that stages a job's data. Raises SecretUnavailable naming the
    secret when it was deleted or replaced since submit, cannot be opened, or its endpoint is no longer allowed."""
    if tenant_id is None:
        raise SecretUnavailable("the job belongs to no tenant, so it has no s3 secret")
    record = store.find_secrets(tenant_id, [name]).get(name)
    if record is None or record.kind != SecretKind.S3.value:
        raise SecretUnavailable(f"s3 secret {name!r} no longer exists in the job's tenant")
    endpoint = record.meta.get("host", "")
    try:
        check_s3_endpoint(endpoint, endpoints, "stage_secret")
    except ValidationError as e:
        raise SecretUnavailable(e.problem) from e
    try:
        secret = keyring.open(Sealed(record.key_id, record.sealed), secret_context(tenant_id, name))
    except KeyringError as e:
        raise SecretUnavailable(f"s3 secret {name!r} cannot be opened: {e.problem}") from e
    return S3Login(
        access_key_id=record.meta.get("username", ""),
        secret_access_key=secret,
        endpoint=endpoint or None,
        region=record.meta.get("region") or None,
    )
