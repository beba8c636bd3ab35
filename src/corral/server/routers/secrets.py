"""/api/v1/secrets: a tenant's secrets (write-only values), and the admin's rotation of the key that seals them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response

from corral.api.secrets import KeyRotationOut, SecretIn, SecretOut, SecretUpdate
from corral.server.auth import Principal, require_user
from corral.server.deps import KeyringDep, StoreDep
from corral.server.services import secrets as svc
from corral.server.services.tenancy import tenant_names

router = APIRouter(prefix="/api/v1/secrets", tags=["secrets"])
User = Annotated[Principal, Depends(require_user)]
Tenant = Annotated[
    str | None,
    Query(min_length=1, max_length=64, description="the tenant (admins: any; others: their own, the default)"),
]
Name = Annotated[str, Path(min_length=1, max_length=64, description="the secret's name")]


@router.get("", response_model=list[SecretOut])
def list_secrets(caller: User, store: StoreDep, tenant: Tenant = None) -> list[SecretOut]:
    """Names, kinds and who made them; never a value."""
    names = tenant_names(store)
    return [svc.secret_out(r, names) for r in svc.list_secrets(store, caller, tenant)]


@router.post("", status_code=201, response_model=SecretOut)
def create_secret(
    body: SecretIn, caller: User, store: StoreDep, keyring: KeyringDep, tenant: Tenant = None
) -> SecretOut:
    """Members and above; the value is sealed with the server's key and never returned."""
    record = svc.create_secret(store, keyring, caller, body, tenant)
    return svc.secret_out(record, tenant_names(store))


@router.put("/{name}", response_model=SecretOut)
def update_secret(
    name: Name, body: SecretUpdate, caller: User, store: StoreDep, keyring: KeyringDep, tenant: Tenant = None
) -> SecretOut:
    """A new value; jobs started from now on get it (running jobs keep the one they started with)."""
    record = svc.update_secret(store, keyring, caller, name, body, tenant)
    return svc.secret_out(record, tenant_names(store))


@router.delete("/{name}", status_code=204)
def delete_secret(name: Name, caller: User, store: StoreDep, tenant: Tenant = None) -> Response:
    """Pending jobs that use it fail when they start, saying which secret is gone."""
    svc.delete_secret(store, caller, name, tenant)
    return Response(status_code=204)


@router.post("/rotate-key", response_model=KeyRotationOut)
def rotate_key(caller: User, store: StoreDep, keyring: KeyringDep) -> KeyRotationOut:
    """Admins: a new key seals every stored value again; old keys leave the key file once nothing needs them."""
    return svc.rotate_key(store, keyring, caller)
