"""Node identity between real processes: `corral up`, `corral agent --join` with a token file, mutual TLS on the
agent port, a spent token refused, an agent restart reusing its certificate, renewal, and `corral nodes revoke`
cutting a node off at once."""

from __future__ import annotations

import signal
import ssl
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from cryptography import x509

from .conftest import CORRAL, Corral, wait_for

pytestmark = pytest.mark.e2e


def node(c: Corral, name: str) -> dict[str, Any] | None:
    return next((n for n in c.cli_json("nodes") if n["name"] == name), None)


def serial(c: Corral, name: str) -> int:
    return x509.load_pem_x509_certificate((c.agent_tls_dir(name) / "node.crt").read_bytes()).serial_number


def test_an_agent_joins_over_mutual_tls_runs_work_restarts_without_a_token_and_is_revoked(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.start()
    token_file = c.join_token(uses=1)
    agent = c.start_agent("w1", "sim:2xL4-24GB", token_file)
    wait_for(lambda: node(c, "w1"), 60, "w1 registered over mutual TLS")
    token = token_file.read_text().strip()
    assert all(token not in " ".join(p.cmdline()) for p in psutil.process_iter() if p.pid == agent.pid)
    job = c.submit("--gpus", "1", "--", "sh", "-c", "echo over-mtls")
    assert c.cli("wait", str(job), "--timeout", "60").returncode == 0
    assert "over-mtls" in c.cli("logs", str(job)).stdout
    assert all(p.stat().st_mode & 0o077 == 0 for p in c.agent_tls_dir("w1").iterdir())

    # the one-use token is spent: a second machine cannot join with it
    again = c.spawn([*_agent_args(c, "w2"), "--token-file", str(token_file)], env=c.agent_env("w2"), log_name="w2")
    assert again.wait(60) != 0
    assert "join token invalid, expired, used up or revoked" in (c.root / f"w2-{c.procs.index(again)}.log").read_text()

    # a restart needs no token: the certificate kept in the agent's data dir is reused
    before = serial(c, "w1")
    agent.send_signal(signal.SIGKILL)
    agent.wait(10)
    restarted = c.start_agent("w1", "sim:2xL4-24GB", Path())
    first_beat = node(c, "w1")["last_heartbeat_at"]  # type: ignore[index]
    wait_for(lambda: node(c, "w1")["last_heartbeat_at"] != first_beat, 60, "w1 back")  # type: ignore[index]
    assert serial(c, "w1") == before and restarted.poll() is None

    # revoked: cut off at once, its work goes back to the queue
    long_job = c.submit("--gpus", "1", "--", "sleep", "600")
    wait_for(lambda: c.job(long_job)["state"] == "RUNNING", 60, "running on w1")
    r = c.cli("nodes", "revoke", "w1")
    assert r.returncode == 0, r.stderr
    assert node(c, "w1")["state"] == "LOST"  # type: ignore[index]
    assert c.job(long_job)["state"] == "PENDING"
    wait_for(
        lambda: "revoked" in (c.root / f"agent-w1-{c.procs.index(restarted)}.log").read_text(),
        30,
        "the agent told it was revoked",
    )
    assert node(c, "w1")["state"] == "LOST"  # type: ignore[index]


def test_without_a_client_certificate_the_agent_port_refuses_and_argv_tokens_are_refused(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.start()
    ca = (c.data_dir / "ca" / "ca.crt").read_text()
    ctx = ssl.create_default_context(cadata=ca)
    r = httpx.post(f"{c.agent_url}/api/v1/agents/register", json={"name": "x", "backend": "simulated"}, verify=ctx)
    assert r.status_code == 401
    admin = (c.data_dir / "admin-token").read_text().strip()
    r = httpx.post(
        f"{c.agent_url}/api/v1/agents/register",
        json={"name": "x", "backend": "simulated"},
        verify=ctx,
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert r.status_code == 401  # an admin's token does not make anyone a node
    out = c.cli("agent", "--join", c.agent_url, "--token", "crj1.1.abcdefghijklmnopqrstuvwxyz.00")
    assert out.returncode != 0 and out.stderr.count("error:") == 1 and "--token-file" in out.stderr

    token_file = c.join_token(uses=3)
    token_id = int(token_file.read_text().split(".")[1])
    assert any(t["id"] == token_id and t["state"] == "usable" for t in c.cli_json("tokens", "join", "list"))
    assert c.cli("tokens", "join", "revoke", str(token_id)).returncode == 0
    late = c.cli(
        "agent",
        "--join",
        c.agent_url,
        "--token-file",
        str(token_file),
        "--node-name",
        "late",
        "--gpus",
        "none",
        env=c.agent_env("late"),
    )
    assert late.returncode != 0 and "revoked" in late.stderr and late.stderr.count("error:") == 1


def test_an_agent_renews_its_certificate_before_it_expires(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.env["CORRAL_NODE_CERT_TTL_S"] = "12"  # renewed at 2/3: every 8 s
    c.start()
    c.start_agent("w1", "sim:1xL4-24GB")
    wait_for(lambda: node(c, "w1"), 60, "w1 registered")
    first = serial(c, "w1")
    wait_for(lambda: serial(c, "w1") != first, 30, "certificate renewed")
    # past the first certificate's expiry the node still heartbeats, with the renewed one
    beat = node(c, "w1")["last_heartbeat_at"]  # type: ignore[index]
    wait_for(
        lambda: node(c, "w1")["last_heartbeat_at"] != beat and node(c, "w1")["state"] == "READY",
        30,
        "w1 heartbeating after renewal",
    )
    job = c.submit("--gpus", "1", "--", "sh", "-c", "echo renewed")
    assert c.cli("wait", str(job), "--timeout", "60").returncode == 0


def _agent_args(c: Corral, name: str) -> list[str]:
    return [CORRAL, "agent", "--join", c.agent_url, "--gpus", "sim:1xL4-24GB", "--node-name", name]


def test_people_reach_an_https_server_through_the_cluster_ca_only(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.env["CORRAL_TLS"] = "on"  # what binding beyond loopback does by default
    c.url = c.url.replace("http://", "https://")
    c.start()  # `corral up` wrote the CA into the CLI config: the CLI verifies the server with it
    fingerprint = next(w for w in (c.root / "up-0.log").read_text().split() if w.startswith("sha256:")).rstrip(")")
    env_pw = dict(c.env, CORRAL_PASSWORD="correct horse battery")
    assert c.cli("users", "create", "alice", "--password", env=env_pw).returncode == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{c.url}/healthz")  # nobody else trusts it blindly

    other = c.root / "laptop"  # a user's own machine: no config yet
    env = dict(env_pw, HOME=str(other), XDG_CONFIG_HOME=str(other / ".config"))
    unknown = c.cli("login", "alice", "--url", c.url, env=env)
    assert unknown.returncode != 0 and "--ca-fingerprint" in unknown.stderr and unknown.stderr.count("error:") == 1
    wrong = c.cli("login", "alice", "--url", c.url, "--ca-fingerprint", "sha256:" + "ab" * 32, env=env)
    assert wrong.returncode != 0 and "refusing" in wrong.stderr
    ok = c.cli("login", "alice", "--url", c.url, "--ca-fingerprint", fingerprint, env=env)
    assert ok.returncode == 0, ok.stderr
    assert c.cli_json_as(env, "whoami")["user"] == "alice"
