"""OpenID Connect portal login against a real provider (panva's oidc-provider on node): the code flow with PKCE
end to end, and every ID token or callback that must not open a session refused."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey
from starlette.testclient import TestClient

from corral.core.errors import AuthError
from corral.server.directory.oidc import OidcClient, OidcConfig
from corral.server.settings import Settings
from corral.store.sql import SqlStore

from .conftest import OIDC_ACCOUNTS, Provider, provider_login
from .test_ldap_login_api import Cluster, make_cluster

CALLBACK = "http://testserver/web/oidc/callback"


@dataclass
class Portal:
    cluster: Cluster
    op: Provider
    browser: TestClient  # the person's browser on Corral's side (cookies)
    at_provider: httpx.Client  # and on the provider's side

    def start(self) -> str:
        r = self.browser.get("/web/oidc/login", follow_redirects=False)
        assert r.status_code == 303, r.text
        return r.headers["location"]

    def callback_url(self, user: str, password: str | None = None) -> str:
        r = provider_login(self.at_provider, self.start(), user, password or OIDC_ACCOUNTS[user]["password"])
        assert r.status_code == 303 and r.headers["location"].startswith(CALLBACK), (r.status_code, r.text[:300])
        return r.headers["location"]

    def finish(self, callback_url: str) -> Any:
        return self.browser.get(callback_url.removeprefix("http://testserver"), follow_redirects=False)


@pytest.fixture
def portal(oidc_provider: Callable[[list[str]], Provider], tmp_path: Path, database_url: str) -> Iterator[Portal]:
    op = oidc_provider([CALLBACK])
    (tmp_path / "oidc-secret").write_text(op.client_secret + "\n")
    cluster, store = make_cluster(
        tmp_path,
        database_url,
        oidc_issuer=op.issuer,
        oidc_client_id=op.client_id,
        oidc_client_secret_file=str(tmp_path / "oidc-secret"),
    )
    cluster.map("vision", "vision")
    cluster.map("nlp", "nlp", "tenant-admin")
    with httpx.Client(timeout=10) as at_provider:
        yield Portal(cluster, op, TestClient(cluster.api.app), at_provider)
    store.close()


def session(p: Portal) -> dict[str, Any]:
    return p.browser.get("/web/session").json()  # type: ignore[no-any-return]


def test_oidc_login_end_to_end_opens_a_session_in_the_mapped_tenant(portal: Portal) -> None:
    assert portal.browser.get("/web/oidc").json()["enabled"] is True
    authorize = portal.start()
    assert "code_challenge_method=S256" in authorize and "nonce=" in authorize and "state=" in authorize
    r = portal.finish(portal.callback_url("bob"))
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    me = session(portal)
    assert (me["authenticated"], me["user"], me["tenant"], me["role"]) == (True, "bob", "nlp", "tenant-admin")
    user = portal.cluster.store.find_user("bob")
    assert user is not None and user.directory == "oidc" and not user.password_hash
    # the session works for the API too, like any portal session
    assert portal.browser.get("/api/v1/whoami").json() == {"user": "bob", "role": "tenant-admin", "tenant": "nlp"}


def test_a_replayed_state_is_refused(portal: Portal) -> None:
    url = portal.callback_url("alice")
    browser_cookie = portal.browser.cookies["corral_oidc"]
    assert portal.finish(url).status_code == 303
    portal.browser.cookies.clear()
    portal.browser.cookies.set("corral_oidc", browser_cookie, path="/web/oidc")  # the same browser, again
    r = portal.finish(url)
    assert r.status_code == 401 and "already used" in r.json()["error"]["message"]
    assert session(portal)["authenticated"] is False


def test_a_callback_in_another_browser_is_refused(portal: Portal) -> None:
    """Login CSRF: an attacker's callback URL (its code and state) opened in the victim's browser."""
    url = portal.callback_url("alice")
    victim = TestClient(portal.cluster.api.app)
    r = victim.get(url.removeprefix("http://testserver"), follow_redirects=False)
    assert r.status_code == 401 and "another browser" in r.json()["error"]["message"]
    assert "corral_session" not in victim.cookies


def test_a_forged_state_and_another_issuer_are_refused(portal: Portal) -> None:
    url = portal.callback_url("alice")
    forged = url.replace("state=", "state=x")
    assert portal.finish(forged).status_code == 401
    other = portal.callback_url("alice").replace("iss=", "iss=https%3A%2F%2Fevil.example%2F&was=")
    r = portal.finish(other)
    assert r.status_code == 401 and "another issuer" in r.json()["error"]["message"]


def test_a_wrong_password_at_the_provider_gives_no_code(portal: Portal) -> None:
    r = provider_login(portal.at_provider, portal.start(), "alice", "not-her-password")
    assert r.status_code == 401 and "wrong login or password" in r.text


def test_a_user_in_no_mapped_group_is_refused(portal: Portal) -> None:
    r = portal.finish(portal.callback_url("carol"))
    assert r.status_code == 401 and "no directory group" in r.json()["error"]["message"]
    assert portal.cluster.store.find_user("carol") is None


def test_a_provider_user_name_that_is_no_corral_name_is_refused(portal: Portal) -> None:
    r = portal.finish(portal.callback_url("mallory"))
    assert r.status_code == 401 and "not a valid Corral user name" in r.json()["error"]["message"]


def test_not_configured_is_a_404(tmp_path: Path, database_url: str) -> None:
    cluster, store = make_cluster(tmp_path, database_url)
    try:
        assert cluster.api.get("/web/oidc").json() == {"enabled": False, "login_url": None}
        assert cluster.api.get("/web/oidc/login", follow_redirects=False).status_code == 404
    finally:
        store.close()


# ---- the ID token itself ----------------------------------------------------------------------------------
@pytest.fixture
def rp(oidc_provider: Callable[[list[str]], Provider]) -> tuple[OidcClient, Provider]:
    op = oidc_provider([CALLBACK])
    return OidcClient(OidcConfig(issuer=op.issuer, client_id=op.client_id, client_secret=op.client_secret)), op


def mint(op: Provider, key: Any = None, alg: str = "RS256", **override: Any) -> str:
    """An ID token as the provider would make it (signed with its own key unless `key` is given)."""
    now = int(time.time())
    claims = {
        "iss": op.issuer,
        "aud": op.client_id,
        "sub": "alice",
        "preferred_username": "alice",
        "groups": ["vision"],
        "nonce": "n-1",
        "iat": now,
        "exp": now + 300,
    } | override
    claims = {k: v for k, v in claims.items() if v is not None}
    key = key or RSAKey.import_key(op.signing_jwk)
    return jwt.encode({"alg": alg, "kid": "test-key-1"}, claims, key, algorithms=[alg])


def test_a_token_the_provider_signed_is_accepted(rp: tuple[OidcClient, Provider]) -> None:
    client, op = rp
    assert client.identity(client.verify_id_token(mint(op), "n-1")).groups == {"vision"}


@pytest.mark.parametrize(
    ("case", "override"),
    [
        ("expired", {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}),
        ("wrong audience", {"aud": "other-app"}),
        ("several audiences, azp not ours", {"aud": ["other-app", "corral"], "azp": "other-app"}),
        ("wrong issuer", {"iss": "https://evil.example"}),
        ("wrong nonce", {"nonce": "n-2"}),
        ("no nonce", {"nonce": None}),
        ("no expiry", {"exp": None}),
    ],
)
def test_id_tokens_with_wrong_claims_are_refused(
    rp: tuple[OidcClient, Provider], case: str, override: dict[str, Any]
) -> None:
    client, op = rp
    with pytest.raises(AuthError, match="refused"):
        client.verify_id_token(mint(op, **override), "n-1")


def test_forged_signatures_are_refused(rp: tuple[OidcClient, Provider]) -> None:
    client, op = rp
    attacker = RSAKey.generate_key(2048, parameters={"kid": "test-key-1"})
    with pytest.raises(AuthError, match="refused"):
        client.verify_id_token(mint(op, key=attacker), "n-1")
    with pytest.raises(AuthError, match="refused"):  # HS256 with the (known to the client) client secret
        client.verify_id_token(mint(op, key=OctKey.import_key(op.client_secret.encode() * 2), alg="HS256"), "n-1")
    header, payload, _ = mint(op).split(".")
    with pytest.raises(AuthError, match="refused"):  # alg "none" and a stripped signature
        client.verify_id_token(f"{header}.{payload}.", "n-1")
    with pytest.raises(AuthError, match="refused"):  # a real token's payload swapped
        forged_payload = mint(op, preferred_username="admin").split(".")[1]
        client.verify_id_token(f"{header}.{forged_payload}.{mint(op).split('.')[2]}", "n-1")


def test_a_token_issued_to_another_client_through_the_real_flow_is_refused(rp: tuple[OidcClient, Provider]) -> None:
    """A real ID token for `other-app` (the same provider, another relying party) cannot open Corral."""
    client, op = rp
    other = OidcClient(OidcConfig(issuer=op.issuer, client_id=op.other_client_id, client_secret=op.other_client_secret))
    url, browser = other.begin(CALLBACK)
    nonce = url.split("nonce=")[1].split("&")[0]
    with httpx.Client(timeout=10) as http:
        r = provider_login(http, url, "alice", str(OIDC_ACCOUNTS["alice"]["password"]))
    assert r.status_code == 303
    callback = httpx.URL(r.headers["location"])
    state, code = callback.params["state"], callback.params["code"]
    pending = other._take_pending(state, browser)  # noqa: SLF001  (the code exchange, by hand, to get the token)
    token = httpx.post(
        str(other.metadata()["token_endpoint"]),
        auth=(op.other_client_id, op.other_client_secret),
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": CALLBACK,
            "code_verifier": pending.verifier,
        },
    ).json()["id_token"]
    assert other.verify_id_token(token, nonce)["aud"] == op.other_client_id  # valid for the app it was made for
    with pytest.raises(AuthError, match="refused"):
        client.verify_id_token(token, nonce)


def test_settings_are_checked_at_start() -> None:
    from corral.core.errors import ValidationError
    from corral.server.directory.oidc import build_oidc_client

    with pytest.raises(ValidationError) as e:
        build_oidc_client(Settings(oidc_issuer="https://idp.example", oidc_client_id="c", oidc_scopes="profile"))
    assert e.value.field == "oidc_scopes"
    with pytest.raises(ValidationError) as e:
        build_oidc_client(
            Settings(
                oidc_issuer="https://idp.example", oidc_client_id="c", oidc_client_secret_file="/nonexistent/secret"
            )
        )
    assert e.value.field == "oidc_client_secret_file"


_ = SqlStore  # the store type the cluster fixture holds
