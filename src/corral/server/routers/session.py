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
from corral.server.services.login import LoginGuard
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


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _user_for_password(request: Request, username: str, password: str) -> tuple[User, datetime, int | None]:
    guard: LoginGuard = request.app.state.logins
    return guard.check_password(username, password, client_address(request)), _now() + SESSION_TTL, None


def _user_for_token(request: Request, secret: str) -> tuple[User, datetime, int | None]:
    """An API token opens a session of its user that never outlives the token itself: it expires with it, and
    revoking the token (or any session it was opened from) revokes the session."""
    guard: LoginGuard = request.app.state.logins
    user, token = guard.check_token(hash_token(secret.strip()), client_address(request))
    expires = _now() + SESSION_TTL
    if token.expires_at is not None:
        expires = min(expires, token.expires_at)
    return user, expires, token.id


def _session_out(request: Request, user: User, csrf: str, expires_at: datetime | None) -> SessionOut:
    tenant = request.app.state.store.get_tenant(user.tenant_id) if user.tenant_id else None
    return SessionOut(authenticated=True, user=user.name, role=user.role, tenant=tenant.name if tenant else None,
                      csrf=csrf, expires_at=expires_at)


@router.post("/login", response_model=SessionOut)
def web_login(body: WebLogin, request: Request, response: Response) -> SessionOut:
    """Open a session: a fresh login token (12 h at most) held in an HttpOnly, SameSite=Strict cookie. Failed
    logins back off per user name and per address (429 with Retry-After)."""
    if body.token:
        user, expires, parent_id = _user_for_token(request, body.token)
    else:
        user, expires, parent_id = _user_for_password(request, body.username or "", body.password or "")
    return open_session(request, response, user, expires, parent_id)


def open_session(request: Request, response: Response, user: User, expires: datetime,
                 parent_id: int | None = None) -> SessionOut:
    """A session of `user` (a password, token or OpenID Connect login): its token and the two cookies."""
    secret = new_token("user")
    request.app.state.store.create_token(hash_token(secret), "user", SESSION_TOKEN_NAME, user.id, _now(),
                                         expires_at=expires, is_session=True, parent_id=parent_id)
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
