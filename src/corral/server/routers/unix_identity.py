"""/api/v1/users/{name}/unix: the Unix identity a user's jobs run as (admins map users to accounts)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from corral.api.schemas import UnixIdentityIn, UnixIdentityOut
from corral.server.auth import Principal, require_user
from corral.server.deps import SettingsDep, StoreDep
from corral.server.services import unix_identity

router = APIRouter(prefix="/api/v1", tags=["users"])
User = Annotated[Principal, Depends(require_user)]


@router.get("/users/{name}/unix", response_model=UnixIdentityOut)
def get_unix_identity(name: str, caller: User, store: StoreDep, settings: SettingsDep) -> UnixIdentityOut:
    """Whom the user's jobs run as on every node: an admin's mapping, else START + user id of CORRAL_JOB_UIDS."""
    return unix_identity.load_unix_identity(store, caller, name, settings.job_uid_range)


@router.put("/users/{name}/unix", response_model=UnixIdentityOut)
def set_unix_identity(
    name: str, body: UnixIdentityIn, caller: User, store: StoreDep, settings: SettingsDep
) -> UnixIdentityOut:
    """Map the user to an existing Unix account (admins only; never uid/gid below 1000 or inside CORRAL_JOB_UIDS,
    never an account another tenant's user is mapped to)."""
    return unix_identity.set_unix_identity(store, caller, name, body, settings.job_uid_range)


@router.delete("/users/{name}/unix", response_model=UnixIdentityOut)
def clear_unix_identity(name: str, caller: User, store: StoreDep, settings: SettingsDep) -> UnixIdentityOut:
    """Remove the mapping (admins only): the user's jobs run as a UID from CORRAL_JOB_UIDS again."""
    return unix_identity.clear_unix_identity(store, caller, name, settings.job_uid_range)
