"""/api/v1/users, /api/v1/tokens, /api/v1/login, /api/v1/whoami."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from corral.api.schemas import LoginIn, TokenIn, TokenOut, UserIn, UserOut, UserPatch, WhoAmI
from corral.server.auth import Principal, require_user
from corral.server.deps import LoginsDep, PasswordsDep, StoreDep
from corral.server.params import Id
from corral.server.services import tenancy

router = APIRouter(prefix="/api/v1", tags=["users"])
User = Annotated[Principal, Depends(require_user)]


@router.get("/whoami", response_model=WhoAmI)
def whoami(caller: User, store: StoreDep) -> WhoAmI:
    tenant = store.get_tenant(caller.tenant_id) if caller.tenant_id else None
    return WhoAmI(
        user=caller.user.name if caller.user else None, role=caller.role.value, tenant=tenant.name if tenant else None
    )


@router.get("/users", response_model=list[UserOut])
def list_users(caller: User, store: StoreDep) -> list[UserOut]:
    return tenancy.list_users(store, caller)


@router.post("/users", status_code=201, response_model=UserOut)
def create_user(body: UserIn, caller: User, store: StoreDep, passwords: PasswordsDep) -> UserOut:
    return tenancy.create_user(store, caller, body, passwords)


@router.patch("/users/{name}", response_model=UserOut)
def update_user(
    name: str, body: UserPatch, request: Request, caller: User, store: StoreDep, logins: LoginsDep
) -> UserOut:
    address = request.client.host if request.client else "unknown"
    return tenancy.update_user(store, caller, name, body, logins, address)


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(caller: User, store: StoreDep) -> list[TokenOut]:
    return tenancy.list_tokens(store, caller)


@router.post("/tokens", status_code=201, response_model=TokenOut)
def create_token(body: TokenIn, caller: User, store: StoreDep) -> TokenOut:
    return tenancy.create_token(store, caller, body)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: Id, caller: User, store: StoreDep) -> Response:
    tenancy.revoke_token(store, caller, token_id)
    return Response(status_code=204)


@router.post("/login", response_model=TokenOut)
def login(body: LoginIn, request: Request, logins: LoginsDep) -> TokenOut:
    """Exchange a user name and password for a session token that expires in 12 hours (and ends when the
    password changes). Failed logins back off per user name and per address: 429 with Retry-After."""
    address = request.client.host if request.client else "unknown"
    return tenancy.login(logins, body.username, body.password, address)
