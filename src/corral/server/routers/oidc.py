"""/web/oidc/login and /web/oidc/callback: portal login through an OpenID Connect provider (docs/directory-login.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse
from pydantic import BaseModel

from corral.core.errors import AuthError, NotFoundError
from corral.server.context import context_of
from corral.server.deps import OidcDep
from corral.server.directory.oidc import PENDING_TTL_S, OidcClient
from corral.server.services.directory import provision_directory_user
from corral.server.services.sessions import SESSION_TTL, open_session

router = APIRouter(prefix="/web/oidc", tags=["web session"])
BROWSER_COOKIE = "corral_oidc"  # binds a login in progress to the browser that started it


def _param(required: bool = False) -> Any:
    """A bounded query parameter of the provider's answer (one Query object per parameter: FastAPI keeps state in it)."""
    return Query(... if required else None, max_length=2048, pattern=r"^[^\x00]*$")


class OidcStatus(BaseModel):
    enabled: bool
    login_url: str | None = None


def _client(request: Request) -> OidcClient:
    client = context_of(request.app).oidc
    if client is None:
        raise NotFoundError("OpenID Connect login", "(not configured: CORRAL_OIDC_ISSUER)")
    return client


def _redirect_url(request: Request, client: OidcClient) -> str:
    return client.config.redirect_url or str(request.url_for("oidc_callback"))


@router.get("", response_model=OidcStatus)
def oidc_status(request: Request, oidc: OidcDep) -> OidcStatus:
    """Whether the portal offers single sign-on, and where it starts."""
    enabled = oidc is not None
    return OidcStatus(enabled=enabled, login_url=str(request.url_for("oidc_login")) if enabled else None)


@router.get("/login", name="oidc_login", status_code=303, response_class=RedirectResponse)
def oidc_login(request: Request) -> RedirectResponse:
    """Send the browser to the provider (authorization code flow, PKCE S256, state and nonce)."""
    client = _client(request)
    url, browser = client.begin(_redirect_url(request, client))
    response = RedirectResponse(url, status_code=303)
    # Lax, not Strict: the provider's redirect back is a cross-site top-level GET, which must carry it.
    response.set_cookie(
        BROWSER_COOKIE,
        browser,
        max_age=int(PENDING_TTL_S),
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/web/oidc",
    )
    return response


@router.get("/callback", name="oidc_callback", status_code=303, response_class=RedirectResponse)
def oidc_callback(
    request: Request,
    state: str = _param(required=True),
    code: str | None = _param(),
    error: str | None = _param(),
    iss: str | None = _param(),
) -> RedirectResponse:
    """The provider's answer: check state (once, same browser), exchange the code, verify the ID token, provision
    the user from its groups and open a portal session; then back to the portal."""
    client = _client(request)
    if error or not code:
        raise AuthError(f"the provider did not log you in: {error or 'no code'}")
    if iss is not None and iss != client.config.issuer:  # RFC 9207: an answer from another provider (mix-up)
        raise AuthError("the login answer comes from another issuer")
    identity = client.finish(state, code, request.cookies.get(BROWSER_COOKIE, ""))
    user = provision_directory_user(context_of(request.app).store, identity)
    response = RedirectResponse("/", status_code=303)
    open_session(request, response, user, datetime.now(UTC) + SESSION_TTL)
    response.delete_cookie(BROWSER_COOKIE, path="/web/oidc")
    return response
