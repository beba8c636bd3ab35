"""Real TLS against the server's real listeners (uvicorn on threads, loopback): the agent port's mutual TLS
hands the verified client certificate to the app (corral.server.tls.TlsH11Protocol), a certificate from
another CA never gets through the handshake, the join pins the CA to the token's fingerprint, renewal works
over mutual TLS, and the people's port serves HTTPS with the CA's certificate when asked."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from corral.agent.identity import CertRenewer, NodeTlsFiles, join, mtls_context
from corral.api.schemas import AgentRegister, AgentSync
from corral.api.tls import JoinToken, parse_join_token
from corral.sdk.client import AgentClient, CorralAPIError, CorralClient
from corral.sdk.join import JoinError, trust_ssl_context
from corral.server.ca import CertificateAuthority
from corral.server.runtime import ServerThread
from corral.server.settings import Settings
from ports import free_port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    settings = Settings(
        data_dir=tmp_path / "data",
        port=free_port(),
        job_ui_port=0,
        gateway_port=0,
        agent_port=free_port(),
        tls="on",
        schedule_interval_s=0.2,
    )
    srv = ServerThread(settings)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def admin(srv: ServerThread) -> CorralClient:
    return CorralClient(srv.settings.url, srv.credentials.admin_token, verify=trust_ssl_context(srv.ca.cert_pem))


def joined(srv: ServerThread, tmp_path: Path, node: str) -> tuple[NodeTlsFiles, AgentClient]:
    files = NodeTlsFiles(tmp_path / node / "tls")
    join(files, srv.settings.agent_url, srv.credentials.join_token, node)
    return files, AgentClient(srv.settings.agent_url, "", verify=mtls_context(files))


def test_the_agent_port_knows_the_node_from_its_certificate_over_real_tls(server: ServerThread, tmp_path: Path) -> None:
    files, agent = joined(server, tmp_path, "n1")
    assert agent.register(AgentRegister(name="n1", backend="simulated")).name == "n1"
    assert agent.sync("n1", AgentSync(wait_s=0)).assignments == []
    with pytest.raises(CorralAPIError) as e:  # its own certificate does not speak for another node
        agent.sync("n2", AgentSync(wait_s=0))
    assert e.value.status == 403
    # no client certificate: the handshake passes (a joining agent has none), the agent routes do not
    anonymous = httpx.post(
        f"{server.settings.agent_url}/api/v1/agents/n1/sync", json={}, verify=trust_ssl_context(server.ca.cert_pem)
    )
    assert anonymous.status_code == 401
    assert sorted((files.directory).iterdir()) and all(p.stat().st_mode & 0o077 == 0 for p in files.directory.iterdir())


def test_an_agent_keeps_its_connection_between_requests_seconds_apart(server: ServerThread, tmp_path: Path) -> None:
    """An agent sends telemetry every 5 s: were its connection closed after 5 s idle (uvicorn's and httpx's
    default), each batch would cost the server a new TLS handshake (200 a second for 1,000 agents)."""
    _, agent = joined(server, tmp_path, "n1")
    agent.register(AgentRegister(name="n1", backend="simulated"))
    verify = agent.verify
    assert isinstance(verify, ssl.SSLContext)
    handshakes = verify.session_stats()["connect"]
    time.sleep(6.5)  # longer than the 5 s both sides used to keep an idle connection
    assert agent.sync("n1", AgentSync(wait_s=0)).assignments == []
    assert verify.session_stats()["connect"] == handshakes  # no new TLS connection


def test_recycled_connections_are_new_ones_and_keep_the_agent_working(server: ServerThread, tmp_path: Path) -> None:
    """After its certificate is renewed an agent recycles its connections: the next request opens a new TLS
    connection (presenting the new certificate), on the same server with the same pool limits, and the old pool is
    closed after the grace period (a long poll in flight on it finishes first)."""
    _, agent = joined(server, tmp_path, "n1")
    agent.register(AgentRegister(name="n1", backend="simulated"))
    verify = agent.verify
    assert isinstance(verify, ssl.SSLContext)
    old = agent._http  # noqa: SLF001 (the pool recycling swaps)
    handshakes = verify.session_stats()["connect"]
    agent.recycle_connections(grace_s=0.2)
    assert agent.sync("n1", AgentSync(wait_s=0)).assignments == []
    assert verify.session_stats()["connect"] == handshakes + 1
    assert agent._http is not old and agent._http.base_url == old.base_url  # noqa: SLF001
    pool = agent._http._transport._pool  # noqa: SLF001 (httpx keeps the limits on its pool)
    assert (pool._max_connections, pool._max_keepalive_connections, pool._keepalive_expiry) == (100, 20, 50.0)  # noqa: SLF001
    time.sleep(0.5)
    assert old.is_closed


def test_a_certificate_from_another_ca_fails_the_handshake(server: ServerThread, tmp_path: Path) -> None:
    rogue = CertificateAuthority.load_or_create(tmp_path / "rogue")
    key_pem, cert = rogue.issue_node_key("n1", timedelta(hours=1))
    (tmp_path / "k.pem").write_bytes(key_pem)
    (tmp_path / "c.pem").write_text(cert.pem)
    ctx = trust_ssl_context(server.ca.cert_pem)
    ctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        r = httpx.post(f"{server.settings.agent_url}/api/v1/agents/n1/sync", json={}, verify=ctx)
        pytest.fail(f"answered {r.status_code}")  # TLS 1.3 may report the alert at the first read


def test_the_join_refuses_a_server_whose_ca_is_not_the_tokens(server: ServerThread, tmp_path: Path) -> None:
    token = parse_join_token(server.credentials.join_token)
    lying = str(JoinToken(token.id, token.secret, "sha256:" + "ab" * 32))
    with pytest.raises(JoinError, match="refusing to join"):
        join(NodeTlsFiles(tmp_path / "x"), server.settings.agent_url, lying, "x")
    assert not (tmp_path / "x" / "node.crt").exists()


def test_renewal_over_mutual_tls_replaces_the_certificate_and_the_agent_goes_on(
    server: ServerThread, tmp_path: Path
) -> None:
    files, agent = joined(server, tmp_path, "n1")
    agent.register(AgentRegister(name="n1", backend="simulated"))
    ctx = agent.verify
    assert isinstance(ctx, ssl.SSLContext)
    renewer = CertRenewer(files, agent, ctx, "n1")
    before = files.certificate().serial_number
    assert not renewer.renew_if_due()  # fresh: not due
    assert renewer.renew_if_due(now=datetime.now(UTC) + timedelta(days=6))  # at 2/3 of a week it is
    assert files.certificate().serial_number != before
    assert agent.sync("n1", AgentSync(wait_s=0)).cancels == []  # new connections present the new certificate
    # the old certificate is still valid until it expires (requests in flight finish); revoking cuts both
    admin(server).revoke_node("n1")
    with pytest.raises(CorralAPIError) as e:
        agent.sync("n1", AgentSync(wait_s=0))
    assert e.value.status == 401


def test_people_get_https_with_the_cluster_ca_and_the_cli_pins_it(server: ServerThread) -> None:
    assert server.settings.url.startswith("https://")
    with admin(server) as c:
        assert c.whoami().user == "admin"
    with pytest.raises(httpx.ConnectError):  # the system's CAs do not know this cluster's
        httpx.get(f"{server.settings.url}/healthz")
    ca = httpx.get(f"{server.settings.url}/api/v1/ca", verify=False).json()
    assert ca["fingerprint"] == server.ca.fingerprint


def test_the_operators_certificate_is_served_to_people(tmp_path: Path) -> None:
    operator = CertificateAuthority.load_or_create(tmp_path / "operator")
    cert, key = operator.ensure_server_cert(["127.0.0.1", "localhost"])
    settings = Settings(
        data_dir=tmp_path / "data",
        port=free_port(),
        job_ui_port=0,
        gateway_port=0,
        agent_port=free_port(),
        tls_cert=str(cert),
        tls_key=str(key),
    )
    assert settings.serves_https  # CORRAL_TLS=auto: an operator's certificate turns HTTPS on
    srv = ServerThread(settings)
    srv.start()
    try:
        assert httpx.get(f"{settings.url}/healthz", verify=trust_ssl_context(operator.cert_pem)).status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{settings.url}/healthz", verify=trust_ssl_context(srv.ca.cert_pem))
    finally:
        srv.stop()
