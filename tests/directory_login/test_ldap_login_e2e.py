"""End to end: a real `corral up` configured for a real slapd; an admin maps groups with the CLI and alice logs
in with `corral login` on her own machine (her own HOME)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from e2e.conftest import Corral, corral_factory  # noqa: F401  (the fixture)

from .conftest import SEED_USERS, Slapd, ldap_env

pytestmark = pytest.mark.e2e


def test_corral_login_with_ldap_lands_in_the_mapped_tenant(slapd: Slapd, corral_factory: Callable[..., Corral]) -> None:  # noqa: F811
    c = corral_factory("c")
    c.env.update(ldap_env(slapd))
    c.start()
    for args in (
        ["tenants", "create", "vision"],
        ["directory", "map", "vision", "--tenant", "vision"],
        ["directory", "map", "nlp", "--tenant", "vision", "--role", "viewer"],
    ):
        r = c.cli(*args)
        assert r.returncode == 0, r.stderr
    assert [(m["group"], m["tenant"], m["role"]) for m in c.cli_json("directory", "groups")] == [
        ("vision", "vision", "member"),
        ("nlp", "vision", "viewer"),
    ]

    home = c.root / "alice-home"
    alice = dict(c.env, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), CORRAL_PASSWORD=SEED_USERS["alice"])
    r = c.cli("login", "alice", "--url", c.url, env=alice)
    assert r.returncode == 0, r.stderr
    r = c.cli("whoami", "--json", env=alice)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"user": "alice", "role": "member", "tenant": "vision"}

    r = c.cli("login", "alice", "--url", c.url, env=dict(alice, CORRAL_PASSWORD="not-her-password"))
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith("error:") and "wrong user name or password" in r.stderr
    r = c.cli("login", "carol", "--url", c.url, env=dict(alice, CORRAL_PASSWORD=SEED_USERS["carol"]))
    assert r.returncode != 0 and "no directory group" in r.stderr
