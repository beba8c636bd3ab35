"""Portal sessions: a login token held in an HttpOnly cookie plus its CSRF token, opened by a password, token or
OpenID Connect login (the routers in routers/session.py and routers/oidc.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import Request, Response
from pydantic import BaseModel, Field

from corral.server.auth import CSRF_COOKIE, SESSION_COOKIE, csrf_for, hash_token, new_token
from corral.server.context import context_of
from corral.store.records import User

SESSION_TTL = timedelta(hours=12)
SESSION_TOKEN_NAME = "web session"


def _now() -> datetime:
    return datetime.now(UTC)


class SessionOut(BaseModel):
    authenticated: bool
    user: str | None = None
    role: str | None = None
    tenant: str | None = None
    csrf: str | None = Field(None, description="send as X-CSRF-Token on POST/PUT/PATCH/DELETE")
    expires_at: datetime | None = None


def session_out(request: Request, user: User, csrf: str, expires_at: datetime | None) -> SessionOut:
    tenant = context_of(request.app).store.get_tenant(user.tenant_id) if user.tenant_id else None
    return SessionOut(
        authenticated=True,
        user=user.name,
        role=user.role,
        tenant=tenant.name if tenant else None,
        csrf=csrf,
        expires_at=expires_at,
    )


def open_session(
    request: Request, response: Response, user: User, expires: datetime, parent_id: int | None = None
) -> SessionOut:
    """A session of `user` (a password, token or OpenID Connect login): its token and the two cookies."""
    secret = new_token("user")
    context_of(request.app).store.create_token(
        hash_token(secret),
        "user",
        SESSION_TOKEN_NAME,
        user.id,
        _now(),
        expires_at=expires,
        is_session=True,
        parent_id=parent_id,
    )
    csrf = csrf_for(secret)
    secure = request.url.scheme == "https"
    max_age = max(1, int((expires - _now()).total_seconds()))
    response.set_cookie(
        SESSION_COOKIE, secret, max_age=max_age, httponly=True, samesite="strict", secure=secure, path="/"
    )
    response.set_cookie(CSRF_COOKIE, csrf, max_age=max_age, httponly=False, samesite="strict", secure=secure, path="/")
    return session_out(request, user, csrf, expires)
