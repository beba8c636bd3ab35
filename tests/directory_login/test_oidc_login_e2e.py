"""End to end: a real `corral up` and a real OpenID Connect provider (two processes), a person's browser (httpx
with a cookie jar) going from the portal to the provider's login form and back with a session."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from e2e.conftest import Corral, corral_factory  # noqa: F401  (the fixture)

from .conftest import OIDC_ACCOUNTS, Provider, provider_login

pytestmark = pytest.mark.e2e


def test_portal_login_through_the_provider(
    oidc_provider: Callable[[list[str]], Provider], corral_factory: Callable[..., Corral]
) -> None:  # noqa: F811
    c = corral_factory("c")
    op = oidc_provider([f"{c.url}/web/oidc/callback"])
    (c.root / "oidc-secret").write_text(op.client_secret)
    c.env.update(
        CORRAL_OIDC_ISSUER=op.issuer,
        CORRAL_OIDC_CLIENT_ID=op.client_id,
        CORRAL_OIDC_CLIENT_SECRET_FILE=str(c.root / "oidc-secret"),
    )
    c.start()
    for args in (["tenants", "create", "vision"], ["directory", "map", "vision", "--tenant", "vision"]):
        r = c.cli(*args)
        assert r.returncode == 0, r.stderr

    with httpx.Client(timeout=20) as browser:
        r = browser.get(f"{c.url}/web/oidc/login")
        assert r.status_code == 303 and r.headers["location"].startswith(op.issuer)
        r = provider_login(browser, r.headers["location"], "alice", str(OIDC_ACCOUNTS["alice"]["password"]))
        assert r.status_code == 303 and r.headers["location"].startswith(f"{c.url}/web/oidc/callback")
        r = browser.get(r.headers["location"])
        assert r.status_code == 303 and r.headers["location"] == "/", r.text
        me = browser.get(f"{c.url}/web/session").json()
        assert (me["authenticated"], me["user"], me["tenant"], me["role"]) == (True, "alice", "vision", "member")
    users = {u["name"]: u for u in c.cli_json("users", "list")}
    assert users["alice"]["directory"] == "oidc"
