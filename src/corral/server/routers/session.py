"""/web/login, /web/logout, /web/session: cookie sessions for the portal (HttpOnly session + CSRF token)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from corral.core.errors import AuthError
from corral.server.auth import (
    CSRF_COOKIE, SESSION_COOKIE, Principal, authenticate, csrf_for, hash_token, new_token,
)
from corral.server.passwords import verify_password
from corral.store.records import User

router = APIRouter(prefix="/web", tags=["web session"])
SESSION_TTL = timedelta(hours=12)
SESSION_TOKEN_NAME = "web session"


class WebLogin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str | None = Field(None, max_length=64)
    password: str | None = Field(None, max_length=1024)
    token: str | None = Field(None, max_length=512, description="an API token instead of a password")

    @model_validator(mode="after")
    def _one_way(self) -> WebLogin:
        if not self.token and not (self.username and self.password):
            raise ValueError("give a user name and password, or an API token")
        return self


class SessionOut(BaseModel):
    authenticated: bool
    user: str | None = None
    role: str | None = None
    tenant: str | None = None
    csrf: str | None = Field(None, description="send as X-CSRF-Token on POST/PUT/PATCH/DELETE")
    expires_at: datetime | None = None


def _now() -> datetime:
    return datetime.now(UTC)


def _user_for_password(request: Request, username: str, password: str) -> tuple[User, datetime]:
    user = request.app.state.store.find_user(username)
    if user is None or not verify_password(user.password_hash, password):
        raise AuthError("wrong user name or password")
    return user, _now() + SESSION_TTL


def _user_for_token(request: Request, secret: str) -> tuple[User, datetime]:
    """An API token opens a session of its user that never outlives the token itself."""
    store = request.app.state.store
    token = store.find_token(hash_token(secret.strip()))
    if token is None or token.kind != "user" or token.user_id is None:
        raise AuthError("invalid or revoked token")
    expires = _now() + SESSION_TTL
    if token.expires_at is not None:
        if token.expires_at <= _now():
            raise AuthError("token expired")
        expires = min(expires, token.expires_at)
    user = store.get_user(token.user_id)
    if user is None:
        raise AuthError("invalid or revoked token")
    return user, expires


def _session_out(request: Request, user: User, csrf: str, expires_at: datetime | None) -> SessionOut:
    tenant = request.app.state.store.get_tenant(user.tenant_id) if user.tenant_id else None
    return SessionOut(authenticated=True, user=user.name, role=user.role, tenant=tenant.name if tenant else None,
                      csrf=csrf, expires_at=expires_at)


@router.post("/login", response_model=SessionOut)
def web_login(body: WebLogin, request: Request, response: Response) -> SessionOut:
    """Open a session: a fresh login token (12 h at most) held in an HttpOnly, SameSite=Strict cookie."""
    if body.token:
        user, expires = _user_for_token(request, body.token)
    else:
        user, expires = _user_for_password(request, body.username or "", body.password or "")
    secret = new_token("user")
    request.app.state.store.create_token(hash_token(secret), "user", SESSION_TOKEN_NAME, user.id, _now(),
                                         expires_at=expires)
    csrf = csrf_for(secret)
    secure = request.url.scheme == "https"
    max_age = max(1, int((expires - _now()).total_seconds()))
    response.set_cookie(SESSION_COOKIE, secret, max_age=max_age, httponly=True, samesite="strict", secure=secure,
                        path="/")
    response.set_cookie(CSRF_COOKIE, csrf, max_age=max_age, httponly=False, samesite="strict", secure=secure,
                        path="/")
    return _session_out(request, user, csrf, expires)


def _optional_principal(request: Request) -> Principal | None:
    try:
        return authenticate(request)
    except AuthError:
        return None


Caller = Annotated[Principal | None, Depends(_optional_principal)]


@router.get("/session", response_model=SessionOut)
def web_session(request: Request, caller: Caller) -> SessionOut:
    """Who the cookie belongs to; 200 either way so the login page can ask without an error."""
    secret = request.cookies.get(SESSION_COOKIE)
    if caller is None or caller.user is None or caller.is_agent or not secret or "authorization" in request.headers:
        return SessionOut(authenticated=False)
    return _session_out(request, caller.user, csrf_for(secret), caller.token.expires_at)


@router.post("/logout", status_code=204)
def web_logout(request: Request, caller: Caller) -> Response:
    """End the session: revoke its login token (CSRF-checked like any unsafe call) and clear the cookies."""
    if caller is not None and "authorization" not in request.headers and caller.token.name == SESSION_TOKEN_NAME:
        request.app.state.store.revoke_token(caller.token.id)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")
    return response
