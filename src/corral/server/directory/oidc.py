"""OpenID Connect login for the portal: the authorization code flow with PKCE, state and nonce, and the ID token
verified (signature against the provider's JWKS, issuer, audience, expiry, nonce) with joserfc."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from corral.core.directory import DirectoryIdentity
from corral.core.errors import AuthError, UnavailableError, ValidationError
from corral.core.tenancy import check_name
from corral.server.directory.ldap import read_secret_file
from corral.server.settings import Settings

# Asymmetric algorithms only: "none" and HS* (signed with the client secret) are never accepted for an ID token.
SAFE_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
PENDING_TTL_S = 600.0  # a login started must come back within 10 minutes
MAX_PENDING = 10_000  # logins started and not finished, kept at most (oldest dropped first)
METADATA_TTL_S = 3600.0
CLOCK_LEEWAY_S = 60


@dataclass(frozen=True, slots=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str
    scopes: str = "openid profile email groups"
    groups_claim: str = "groups"
    username_claim: str = "preferred_username"
    redirect_url: str = ""  # "" = <the portal's URL>/web/oidc/callback
    ca_file: str = ""
    timeout_s: float = 10.0

    def check(self) -> None:
        if not self.issuer.startswith(("https://", "http://")):
            raise ValidationError("oidc_issuer", f"expected an https:// URL, got {self.issuer!r}")
        if not self.client_id:
            raise ValidationError("oidc_client_id", "is required with CORRAL_OIDC_ISSUER")
        if "openid" not in self.scopes.split():
            raise ValidationError("oidc_scopes", "must include openid")


@dataclass(frozen=True, slots=True)
class PendingLogin:
    """What the callback must match: the browser that started the login (a hash of its cookie), the nonce the
    ID token must carry, and the PKCE verifier."""

    browser_hash: str
    nonce: str
    verifier: str
    redirect_url: str
    started: float  # time.monotonic()


@dataclass
class _Cache:
    metadata: dict[str, Any] = field(default_factory=dict)
    metadata_at: float = 0.0
    keys: KeySet | None = None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class OidcClient:
    """One relying party. Thread-safe; blocking HTTP calls to the provider (call from worker threads)."""

    source = "oidc"

    def __init__(self, config: OidcConfig, transport: httpx.BaseTransport | None = None) -> None:
        config.check()
        self.config = config
        self._http = httpx.Client(timeout=config.timeout_s, verify=config.ca_file or True, transport=transport)
        self._pending: dict[str, PendingLogin] = {}
        self._lock = threading.Lock()
        self._cache = _Cache()

    # ---- the provider's documents --------------------------------------------------
    def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            r = self._http.get(url)
            r.raise_for_status()
            body = r.json()
        except (httpx.HTTPError, ValueError) as e:
            raise UnavailableError(f"the OpenID Connect provider's {what} ({url}) cannot be read: {e}") from e
        if not isinstance(body, dict):
            raise UnavailableError(f"the OpenID Connect provider's {what} is not a JSON object")
        return body

    def metadata(self) -> dict[str, Any]:
        """The discovery document, cached for an hour; its issuer must be exactly the configured one."""
        with self._lock:
            if self._cache.metadata and time.monotonic() - self._cache.metadata_at < METADATA_TTL_S:
                return self._cache.metadata
        doc = self._get_json(self.config.issuer.rstrip("/") + "/.well-known/openid-configuration", "discovery document")
        if doc.get("issuer") != self.config.issuer:
            raise UnavailableError(
                f"the discovery document names issuer {doc.get('issuer')!r}, not "
                f"{self.config.issuer!r} (CORRAL_OIDC_ISSUER must match exactly)"
            )
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(doc.get(key), str):
                raise UnavailableError(f"the discovery document has no {key}")
        with self._lock:
            self._cache = _Cache(metadata=doc, metadata_at=time.monotonic())
        return doc

    def _keys(self, refresh: bool = False) -> KeySet:
        with self._lock:
            keys = self._cache.keys
        if keys is None or refresh:
            jwks = self._get_json(str(self.metadata()["jwks_uri"]), "JWKS")
            try:
                keys = KeySet.import_key_set(jwks)  # type: ignore[arg-type]  # a JSON object from the provider
            except (JoseError, ValueError, KeyError, TypeError) as e:
                raise UnavailableError(f"the provider's JWKS cannot be read: {e}") from e
            with self._lock:
                self._cache.keys = keys
        return keys

    # ---- the flow ---------------------------------------------------------------------
    def begin(self, redirect_url: str) -> tuple[str, str]:
        """Start a login: (the provider's authorization URL to send the browser to, the secret for the browser's
        cookie that binds this login to it). State, nonce and PKCE verifier are kept here, used once."""
        meta = self.metadata()
        state, nonce, verifier, browser = (secrets.token_urlsafe(32) for _ in range(4))
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        now = time.monotonic()
        with self._lock:
            for k in [k for k, p in self._pending.items() if now - p.started > PENDING_TTL_S]:
                del self._pending[k]
            while len(self._pending) >= MAX_PENDING:
                del self._pending[next(iter(self._pending))]
            self._pending[state] = PendingLogin(_digest(browser), nonce, verifier, redirect_url, now)
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.config.client_id,
                "redirect_uri": redirect_url,
                "scope": self.config.scopes,
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        return f"{meta['authorization_endpoint']}?{query}", browser

    def _take_pending(self, state: str, browser: str) -> PendingLogin:
        """The login this state started, removed (a replayed state finds nothing); it must come from the same
        browser (its cookie) and within PENDING_TTL_S."""
        with self._lock:
            pending = self._pending.pop(state, None)
        if pending is None:
            raise AuthError("unknown or already used login state; start the login again")
        if not hmac.compare_digest(pending.browser_hash, _digest(browser)):
            raise AuthError("this login was started in another browser; start the login again")
        if time.monotonic() - pending.started > PENDING_TTL_S:
            raise AuthError("the login took too long; start it again")
        return pending

    def finish(self, state: str, code: str, browser: str) -> DirectoryIdentity:
        """The callback: exchange the code (with the PKCE verifier) and verify the ID token."""
        pending = self._take_pending(state, browser)
        meta = self.metadata()
        try:
            r = self._http.post(
                str(meta["token_endpoint"]),
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": pending.redirect_url,
                    "code_verifier": pending.verifier,
                },
                auth=(self.config.client_id, self.config.client_secret),
            )
        except httpx.HTTPError as e:
            raise UnavailableError(f"the OpenID Connect token endpoint cannot be reached: {e}") from e
        if r.status_code != 200:
            raise AuthError(f"the provider refused the login code ({r.status_code}: {r.text[:200]})")
        id_token = (
            r.json().get("id_token") if r.headers.get("content-type", "").startswith("application/json") else None
        )
        if not isinstance(id_token, str):
            raise AuthError("the provider's answer has no ID token")
        return self.identity(self.verify_id_token(id_token, pending.nonce))

    def verify_id_token(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The claims of an ID token whose signature (a key of the provider's JWKS, an asymmetric algorithm),
        issuer, audience (and azp), expiry and nonce are right; AuthError otherwise."""
        algorithms = [
            a for a in self.metadata().get("id_token_signing_alg_values_supported", ["RS256"]) if a in SAFE_ALGORITHMS
        ] or ["RS256"]
        try:
            try:
                token = jwt.decode(id_token, self._keys(), algorithms=algorithms)
            except JoseError:  # maybe a key the cached set lacks (the provider rotated): read the JWKS again, once
                token = jwt.decode(id_token, self._keys(refresh=True), algorithms=algorithms)
            registry = jwt.JWTClaimsRegistry(
                leeway=CLOCK_LEEWAY_S,
                iss={"essential": True, "value": self.config.issuer},
                aud={"essential": True, "value": self.config.client_id},
                exp={"essential": True},
                sub={"essential": True},
                nonce={"essential": True, "value": nonce},
            )
            registry.validate(token.claims)
        except (JoseError, ValueError) as e:
            raise AuthError(f"the ID token was refused: {e}") from e
        claims = dict(token.claims)
        aud = claims.get("aud")
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != self.config.client_id:
            raise AuthError("the ID token was refused: several audiences and azp is not this client")
        return claims

    def identity(self, claims: dict[str, Any]) -> DirectoryIdentity:
        """The user name and groups the claims give; the name must be a valid Corral user name."""
        name = claims.get(self.config.username_claim)
        if not isinstance(name, str):
            raise AuthError(f"the ID token has no {self.config.username_claim} claim (CORRAL_OIDC_USERNAME_CLAIM)")
        try:
            check_name("username", name)
        except ValidationError as e:
            raise AuthError(f"the provider's user name {name[:64]!r} is not a valid Corral user name") from e
        groups = claims.get(self.config.groups_claim) or []
        if isinstance(groups, str):
            groups = [groups]
        if not isinstance(groups, list):
            raise AuthError(f"the ID token's {self.config.groups_claim} claim is not a list")
        return DirectoryIdentity(
            username=name,
            groups=frozenset(str(g) for g in groups),
            source=self.source,
            email=str(claims.get("email") or ""),
        )


def build_oidc_client(settings: Settings) -> OidcClient | None:
    """The server's OpenID Connect client, or None without CORRAL_OIDC_ISSUER. Bad settings raise at start."""
    if not settings.oidc_issuer:
        return None
    return OidcClient(
        OidcConfig(
            issuer=settings.oidc_issuer,
            client_id=settings.oidc_client_id,
            client_secret=read_secret_file("oidc_client_secret_file", settings.oidc_client_secret_file),
            scopes=settings.oidc_scopes,
            groups_claim=settings.oidc_groups_claim,
            username_claim=settings.oidc_username_claim,
            redirect_url=settings.oidc_redirect_url,
            ca_file=settings.oidc_ca_file,
        )
    )
