"""/api/v1/directory/groups: which directory groups map to which tenant and role (admins)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from corral.api.schemas import GroupMappingIn, GroupMappingOut
from corral.server.auth import Principal, require_user
from corral.server.deps import StoreDep
from corral.server.services import directory

router = APIRouter(prefix="/api/v1/directory", tags=["directory"])
User = Annotated[Principal, Depends(require_user)]


@router.get("/groups", response_model=list[GroupMappingOut])
def list_group_mappings(caller: User, store: StoreDep) -> list[GroupMappingOut]:
    return directory.list_mappings(store, caller)


@router.post("/groups", status_code=201, response_model=GroupMappingOut)
def create_group_mapping(body: GroupMappingIn, caller: User, store: StoreDep) -> GroupMappingOut:
    """Map a group; a user in several mapped groups gets the highest role, in that role's tenant (docs/directory-login.md)."""
    return directory.create_mapping(store, caller, body)


@router.delete("/groups/{mapping_id}", status_code=204)
def delete_group_mapping(
    mapping_id: Annotated[int, Path(ge=1, le=2**31 - 1)], caller: User, store: StoreDep
) -> Response:
    directory.delete_mapping(store, caller, mapping_id)
    return Response(status_code=204)
