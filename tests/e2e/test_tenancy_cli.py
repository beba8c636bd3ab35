"""Tenancy through the real CLI: an admin creates a tenant and a user, who logs in and sees only its jobs."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Corral

pytestmark = pytest.mark.e2e


def test_admin_creates_tenant_user_and_quota_user_logs_in(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    assert c.cli("tenants", "create", "vision", "--weight", "2").returncode == 0
    assert c.cli("tenants", "quota", "vision", "--guaranteed", "4", "--max", "8", "--gpu-model", "H100").returncode == 0
    assert c.cli_json("tenants", "quotas", "vision") == [
        {"tenant": "vision", "gpu_model": "H100", "guaranteed_gpus": 4, "max_gpus": 8}
    ]
    r = c.cli(
        "users",
        "create",
        "alice",
        "--tenant",
        "vision",
        "--password",
        env=dict(c.env, CORRAL_PASSWORD="alice-secret-1"),
    )
    assert r.returncode == 0, r.stderr
    admin_job = c.submit("--", "true")

    alice_home = c.root / "alice"
    alice_env = {k: v for k, v in c.env.items() if k not in ("CORRAL_PORT",)}
    alice_env.update(
        HOME=str(alice_home),
        XDG_CONFIG_HOME=str(alice_home / ".config"),
        CORRAL_URL=c.url,
        CORRAL_PASSWORD="alice-secret-1",
    )
    r = c.cli("login", "alice", env=alice_env)
    assert r.returncode == 0, r.stderr
    alice_env.pop("CORRAL_PASSWORD")
    assert c.cli_json_as(alice_env, "whoami") == {"user": "alice", "role": "member", "tenant": "vision"}
    r = c.cli("submit", "--", "sh", "-c", "echo from alice", env=alice_env)
    assert r.returncode == 0, r.stderr
    mine = int(r.stdout)
    assert [j["id"] for j in c.cli_json_as(alice_env, "jobs", "--all")] == [mine]
    r = c.cli("show", str(admin_job), env=alice_env)
    assert r.returncode != 0 and r.stderr.strip() == f"error: job '{admin_job}' not found"
    assert c.cli("wait", str(mine), "--timeout", "60", env=alice_env).returncode == 0
    assert c.cli("logs", str(mine), env=alice_env).stdout == "from alice\n"

    r = c.cli("login", "alice", env=dict(alice_env, CORRAL_PASSWORD="wrong-password"))
    assert r.returncode != 0 and "wrong user name or password" in r.stderr


def test_every_noun_lists_when_bare(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    assert c.cli("tenants", "create", "vision").returncode == 0
    for noun, header in (("tenants", "TENANT"), ("users", "USER"), ("tokens", "ID")):
        bare = c.cli(noun)
        assert bare.returncode == 0 and f" {header} " in bare.stdout, (noun, bare.stdout, bare.stderr)
        assert c.cli_json(noun) == c.cli_json(noun, "list"), noun
    assert any(t["name"] == "vision" for t in c.cli_json("tenants"))
