"""/web/login, /web/logout, /web/session: cookie sessions for the portal (HttpOnly session + CSRF token)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from corral.core.errors import AuthError
from corral.server.auth import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    Principal,
    authenticate,
    csrf_for,
    hash_token,
)
from corral.server.context import context_of
from corral.server.services.sessions import SESSION_TOKEN_NAME, SESSION_TTL, SessionOut, open_session, session_out
from corral.store.records import User

router = APIRouter(prefix="/web", tags=["web session"])


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


def _now() -> datetime:
    return datetime.now(UTC)


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _user_for_password(request: Request, username: str, password: str) -> tuple[User, datetime, int | None]:
    guard = context_of(request.app).logins
    return guard.check_password(username, password, client_address(request)), _now() + SESSION_TTL, None


def _user_for_token(request: Request, secret: str) -> tuple[User, datetime, int | None]:
    """An API token opens a session of its user that never outlives the token itself: it expires with it, and
    revoking the token (or any session it was opened from) revokes the session."""
    guard = context_of(request.app).logins
    user, token = guard.check_token(hash_token(secret.strip()), client_address(request))
    expires = _now() + SESSION_TTL
    if token.expires_at is not None:
        expires = min(expires, token.expires_at)
    return user, expires, token.id


@router.post("/login", response_model=SessionOut)
def web_login(body: WebLogin, request: Request, response: Response) -> SessionOut:
    """Open a session: a fresh login token (12 h at most) held in an HttpOnly, SameSite=Strict cookie. Failed
    logins back off per user name and per address (429 with Retry-After)."""
    if body.token:
        user, expires, parent_id = _user_for_token(request, body.token)
    else:
        user, expires, parent_id = _user_for_password(request, body.username or "", body.password or "")
    return open_session(request, response, user, expires, parent_id)


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
    return session_out(request, caller.user, csrf_for(secret), caller.token.expires_at)


@router.post("/logout", status_code=204)
def web_logout(request: Request, caller: Caller) -> Response:
    """End the session: revoke its login token (CSRF-checked like any unsafe call) and clear the cookies."""
    if caller is not None and "authorization" not in request.headers and caller.token.name == SESSION_TOKEN_NAME:
        context_of(request.app).store.revoke_token(caller.token.id)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")
    return response
