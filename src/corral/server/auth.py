"""Who is calling: API tokens (stored hashed, revocable, optional expiry) and what their role allows."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from corral.core.errors import AuthError, ForbiddenError, NotFoundError
from corral.core.tenancy import Action, Role, can
from corral.server.context import context_of, job_ui_app_of
from corral.store.records import TokenRecord, User

TOKEN_PREFIX = {"user": "crl_", "join": "crj_", "metrics": "crm_"}  # metrics: can only scrape /metrics
SESSION_COOKIE = "corral_session"  # HttpOnly: the secret of a login token, set by POST /web/login
CSRF_COOKIE = "corral_csrf"  # readable by the page, which echoes it in X-CSRF-Token on unsafe methods
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


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

    @property
    def role(self) -> Role:
        return Role(self.user.role) if self.user else Role.VIEWER

    @property
    def tenant_id(self) -> int | None:
        return self.user.tenant_id if self.user else None

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def require(self, action: Action) -> None:
        if not can(self.role, action):
            who = ", ".join(r.value for r in Role if can(r, action))
            raise ForbiddenError(f"your role ({self.role.value}) may not {ACTION_WORDS[action]}; that takes: {who}")

    def tenant_scope(self) -> int | None:
        """None: every tenant (admins); otherwise the one tenant this caller may see."""
        return None if self.is_admin else self.tenant_id

    def check_tenant(self, tenant_id: int | None, kind: str, ident: str) -> None:
        """Another tenant's object is reported as missing, never as forbidden: its existence is private."""
        if not self.is_admin and tenant_id != self.tenant_id:
            raise NotFoundError(kind, ident)


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise AuthError("missing bearer token (Authorization: Bearer <token>)")
    return value.strip()


def csrf_for(session_secret: str) -> str:
    """The CSRF token bound to one session: derived from its secret, so nothing is stored and a page on
    another origin (which cannot read the HttpOnly cookie) cannot compute it."""
    return hashlib.sha256(b"corral-csrf:" + session_secret.encode()).hexdigest()


# What each action lets a role do, in the words an error shows (not the action's code).
ACTION_WORDS = {
    Action.READ: "see this tenant's jobs, nodes and quotas",
    Action.SUBMIT: "submit or cancel jobs",
    Action.MANAGE_TENANT: "manage the users and tokens of a tenant",
    Action.MANAGE_CLUSTER: "manage the cluster (tenants, quotas, queues, nodes)",
}


def _credential(request: Request, csrf: bool = True) -> str:
    """A bearer header wins; without one a session cookie may stand in, but then every unsafe method must
    carry the session's CSRF token in X-CSRF-Token (the cookie alone would let other sites post as the user)."""
    if "authorization" in request.headers:
        return _bearer(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return _bearer(request)  # raises the usual "missing bearer token"
    if csrf and request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), csrf_for(cookie).encode()):
            raise ForbiddenError("missing or wrong X-CSRF-Token for a cookie session")
    return cookie


# Credential cache: every API call would otherwise look up its token and its user (two queries) before the
# endpoint runs. An entry is a valid token and its user as read at most CREDENTIAL_TTL_S ago; it is dropped at
# once when this server writes the tokens or users table (revocation, disabling, role or tenant change: the
# store's `auth_epoch`, see SqlStore). A revocation made through ANOTHER server replica is seen here at most
# CREDENTIAL_TTL_S later: that is the whole cost of the cache. Unknown or revoked tokens are never cached, expiry
# and `disabled` are checked on every call, and an entry is keyed by the hash of its secret, so it is only ever
# handed to the holder of that secret (its own user and tenant scope). Stores without `auth_epoch` are not cached.
CREDENTIAL_TTL_S = 3.0
CREDENTIAL_CACHE_SIZE = 10_000
_clock = time.monotonic
_credentials: weakref.WeakKeyDictionary[object, dict[str, tuple[float, int, TokenRecord, User | None]]] = (
    weakref.WeakKeyDictionary()
)


def _lookup(store: Any, token_hash: str) -> tuple[TokenRecord | None, User | None]:
    epoch = getattr(store, "auth_epoch", None)
    cache = _credentials.get(store) if epoch is not None else None
    hit = cache.get(token_hash) if cache is not None else None
    if hit is not None and hit[0] > _clock() and hit[1] == epoch:
        return hit[2], hit[3]
    token = store.find_token(token_hash)
    user = store.get_user(token.user_id) if token is not None and token.user_id is not None else None
    if token is not None and epoch is not None and getattr(store, "auth_epoch", None) == epoch:
        if cache is None:
            cache = _credentials.setdefault(store, {})
        if len(cache) >= CREDENTIAL_CACHE_SIZE:
            cache.clear()
        cache[token_hash] = (_clock() + CREDENTIAL_TTL_S, epoch, token, user)
    return token, user


def authenticate(request: Request, csrf: bool = True) -> Principal:
    """The caller. `csrf=False` only where the session cookie is SameSite=Strict and the route serves no
    portal or API (the job-UI origin: a job's own app posts without Corral's CSRF header)."""
    return _principal(context_of(request.app).store, _credential(request, csrf))


def _principal(store: Any, secret: str) -> Principal:
    """Who holds `secret` (a token), from the credential cache. Raises AuthError."""
    token, user = _lookup(store, hash_token(secret))
    if token is None:
        raise AuthError("invalid or revoked token")
    if token.expires_at is not None and token.expires_at <= datetime.now(UTC):
        raise AuthError("token expired")
    if user is not None and user.disabled:
        raise AuthError("user disabled")
    return Principal(token=token, user=user)


def authenticate_bearer(store: Any, authorization: str) -> Principal:
    """The caller of an `Authorization: Bearer <token>` header (the services' gateway: tokens only, no cookie).
    Raises AuthError."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise AuthError("missing bearer token (Authorization: Bearer <token>)")
    return _principal(store, value.strip())


def _person(p: Principal) -> Principal:
    if p.is_agent:
        raise ForbiddenError("an agent join token cannot use the user API")
    if p.token.kind != "user" or p.user is None:
        raise ForbiddenError(f"a {p.token.kind} token cannot use the user API")
    return p


def require_user(request: Request) -> Principal:
    return _person(authenticate(request))


def require_job_ui_user(request: Request) -> Principal:
    """A user on the job-UI origin: cookie sessions need no CSRF header there (see `authenticate`)."""
    return _person(authenticate(request, csrf=request.app is not job_ui_app_of(request.app)))


def require_metrics_reader(request: Request) -> Principal:
    """/metrics: a metrics token, or the token or session of an admin (cluster-wide figures are admins' to see)."""
    p = authenticate(request)
    if p.token.kind == "metrics" or (p.token.kind == "user" and p.is_admin):
        return p
    raise ForbiddenError("/metrics needs a metrics token or an admin's token (corral tokens create --metrics)")


# Agent routes authenticate nodes by their client certificate (corral.server.node_auth.require_node), never by
# a bearer token: neither a join token nor an admin's token can act as a node.
