"""API tokens: generated once, stored hashed, looked up per request."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from fastapi import Request

from corral.core.errors import AuthError, ForbiddenError
from corral.store.records import TokenRecord, User

TOKEN_PREFIX = {"user": "crl_", "join": "crj_"}


def new_token(kind: str) -> str:
    return TOKEN_PREFIX[kind] + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    token: TokenRecord
    user: User | None

    @property
    def is_agent(self) -> bool:
        return self.token.kind == "join"


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise AuthError("missing bearer token (Authorization: Bearer <token>)")
    return value.strip()


def authenticate(request: Request) -> Principal:
    store = request.app.state.store
    token = store.find_token(hash_token(_bearer(request)))
    if token is None:
        raise AuthError("invalid or revoked token")
    user = store.get_user(token.user_id) if token.user_id is not None else None
    return Principal(token=token, user=user)


def require_user(request: Request) -> Principal:
    p = authenticate(request)
    if p.is_agent:
        raise ForbiddenError("an agent join token cannot use the user API")
    return p


def require_agent(request: Request) -> Principal:
    p = authenticate(request)
    if not p.is_agent and (p.user is None or p.user.role != "admin"):
        raise ForbiddenError("agent endpoints need a join token or an admin token")
    return p
