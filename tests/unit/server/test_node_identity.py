"""Node identity in-process (ASGI), on SQLite and PostgreSQL: each attack of issue 11 made with a join token or a
fake agent, now refused. Certificates are real (issued by the app's CA through the join exchange); only the TLS
handshake is replaced by the ASGI TLS extension (tests/unit/server/node_certs.py). Real TLS: test_tls_listeners.py
and tests/e2e/test_node_tls.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi.testclient import TestClient
from node_certs import NodeCertApp, cert_headers, issue_node_cert

from corral.agent.identity import new_key_and_csr
from corral.api.tls import JoinToken, parse_join_token
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuSample, TelemetryBatch, batch_to_dict
from corral.server.app import create_agent_app, create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.identity import hash_secret
from corral.server.settings import Settings
from corral.store.sql import open_store


@dataclass
class World:
    api: TestClient  # the API port
    agents: TestClient  # the agent port (join + agent routes)
    admin: dict[str, str]
    tmp: Path

    def call(self, method: str, path: str, **kw: Any) -> Any:
        return self.api.request(method, "/api/v1" + path, headers=self.admin, **kw)

    def new_token(self, uses: int = 1, ttl_s: int = 3600) -> str:
        r = self.call("POST", "/join-tokens", json={"ttl_s": ttl_s, "uses": uses})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def join(self, token: str, node: str) -> Any:
        _, csr = new_key_and_csr(node)
        return self.agents.post("/api/v1/join", json={"token": token, "node": node, "csr": csr})

    def joined(self, node: str) -> dict[str, str]:
        """Join `node` with a fresh token; headers that present its certificate."""
        r = self.join(self.new_token(), node)
        assert r.status_code == 200, r.text
        return cert_headers(r.json()["cert"])

    def register(self, headers: dict[str, str], name: str, gpus: int, address: str = "10.0.0.1") -> Any:
        body = {
            "name": name,
            "backend": "simulated",
            "address": address,
            "gpus": [
                {"index": i, "uuid": f"GPU-{name}-{i}", "model": "H100-80GB", "memory_mib": 81920} for i in range(gpus)
            ],
        }
        return self.agents.post("/api/v1/agents/register", json=body, headers=headers)

    def job(self, job_id: int) -> dict[str, Any]:
        return self.call("GET", f"/jobs/{job_id}").json()  # type: ignore[no-any-return]

    def running_job_on_n1(self) -> int:
        job = self.call("POST", "/jobs", json={"command": ["sleep", "1000"], "gpus": 1}).json()["id"]
        deadline = time.monotonic() + 10
        while self.job(job)["state"] != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        assert self.job(job)["node"] == "n1"
        return int(job)


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[tuple[World, dict[str, str]]]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    settings = Settings(data_dir=tmp_path, database_url=database_url, schedule_interval_s=0.1)
    app = create_app(settings, store)
    with TestClient(NodeCertApp(app)) as api, TestClient(NodeCertApp(create_agent_app(app))) as agents:
        w = World(api, agents, {"Authorization": f"Bearer {creds.admin_token}"}, tmp_path)
        n1 = w.joined("n1")
        assert w.register(n1, "n1", 2).status_code == 200
        yield w, n1


def test_a_forged_agent_without_a_certificate_is_refused(world: tuple[World, dict[str, str]]) -> None:
    w, _ = world
    join = (w.tmp / "join-token").read_text().strip()
    for headers in ({}, w.admin, {"Authorization": f"Bearer {join}"}):  # nothing, an admin's token, a join token
        assert w.register(headers, "n1", 64).status_code == 401
        assert w.agents.post("/api/v1/agents/n1/sync", json={}, headers=headers).status_code == 401
        # the API port has the same routes, and no client certificates there either
        assert w.api.post("/api/v1/agents/n1/sync", json={}, headers=headers).status_code == 401
    assert [g["index"] for g in w.call("GET", "/gpus").json()] == [0, 1]


def test_a_certificate_not_issued_by_the_cluster_is_refused(world: tuple[World, dict[str, str]]) -> None:
    """Even if TLS let one through: a self-signed certificate naming n1 is not one the CA issued."""
    w, _ = world
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "n1")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    forged = cert_headers(cert.public_bytes(serialization.Encoding.PEM).decode())
    r = w.agents.post("/api/v1/agents/n1/sync", json={}, headers=forged)
    assert r.status_code == 401 and "not issued" in r.json()["error"]["message"]


def test_a_fake_agent_cannot_register_or_readdress_another_node(world: tuple[World, dict[str, str]]) -> None:
    w, _ = world
    fake = w.joined("fake")  # a token holder joins a machine of its own: that much a token allows
    r = w.register(fake, "n1", 64)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert w.register(fake, "n1", 2, address="203.0.113.66").status_code == 403
    n1 = w.call("GET", "/nodes/n1").json()
    assert n1["gpus_total"] == 2
    assert w.api.app.state.ctx.store.get_node("n1").address == "10.0.0.1"


def test_a_forged_sync_cannot_fail_another_nodes_jobs(world: tuple[World, dict[str, str]]) -> None:
    w, _ = world
    job = w.running_job_on_n1()
    fake = w.joined("fake")
    exits = {"exits": [{"job_id": job, "attempt": 1, "exit_code": 1}], "running": []}
    assert w.agents.post("/api/v1/agents/n1/sync", json=exits, headers=fake).status_code == 403
    # its own name does not help either: the report is about a run not placed on it
    assert w.register(fake, "fake", 1).status_code == 200
    w.agents.post("/api/v1/agents/fake/sync", json=exits, headers=fake)
    assert w.job(job)["state"] == "RUNNING"


def test_a_fake_xid_for_another_nodes_gpu_is_refused(world: tuple[World, dict[str, str]]) -> None:
    w, _ = world
    fake = w.joined("fake")
    now = time.time()
    batch = TelemetryBatch(
        node="n1",
        ts=now,
        host=None,
        gpu_count=2,
        gpus=(GpuSample(ts=now, index=0, uuid="GPU-n1-0", utilization_percent=0.0),),
        events=(GpuEvent(ts=now, kind=GpuEventKind.XID, gpu_index=0, xid=79, detail="fallen off"),),
    )
    r = w.agents.post("/api/v1/agents/n1/telemetry", json=batch_to_dict(batch), headers=fake)
    assert r.status_code == 403
    assert all(g["health"] == "HEALTHY" for g in w.call("GET", "/gpus").json())


def test_a_node_cannot_write_into_another_nodes_job_log(world: tuple[World, dict[str, str]]) -> None:
    w, n1 = world
    job = w.running_job_on_n1()
    fake = w.joined("fake")
    assert w.register(fake, "fake", 1).status_code == 200
    for node in ("n1", "fake"):
        r = w.agents.post(
            f"/api/v1/agents/{node}/jobs/{job}/logs", params={"offset": 0}, content=b"pwned\n", headers=fake
        )
        assert r.status_code == 403
    assert w.call("GET", f"/jobs/{job}/logs").content == b""
    ok = w.agents.post(f"/api/v1/agents/n1/jobs/{job}/logs", params={"offset": 0}, content=b"mine\n", headers=n1)
    assert ok.status_code == 200 and w.call("GET", f"/jobs/{job}/logs").content == b"mine\n"


def test_join_tokens_are_spent_revocable_expiring_and_bound_to_this_cluster(
    world: tuple[World, dict[str, str]],
) -> None:
    w, _ = world
    once = w.new_token(uses=1)
    assert w.join(once, "a").status_code == 200
    r = w.join(once, "b")  # reused
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"

    revoked = w.new_token(uses=5)
    token_id = parse_join_token(revoked).id
    assert w.call("DELETE", f"/join-tokens/{token_id}").json()["state"] == "revoked"
    assert w.join(revoked, "c").status_code == 401

    store = w.api.app.state.ctx.store
    now = datetime.now(UTC)
    record = store.create_join_token(
        hash_secret("s" * 32), "", "test", now - timedelta(hours=2), now - timedelta(seconds=1), 10
    )
    expired = str(JoinToken(record.id, "s" * 32, w.api.app.state.ctx.ca.fingerprint))
    assert w.join(expired, "d").status_code == 401

    valid = parse_join_token(w.new_token(uses=5))
    other_cluster = str(JoinToken(valid.id, valid.secret, "sha256:" + "0" * 64))
    r = w.join(other_cluster, "e")
    assert r.status_code == 401 and "another cluster" in r.json()["error"]["message"]
    wrong_secret = str(JoinToken(valid.id, "x" * 32, valid.ca_fingerprint))
    assert w.join(wrong_secret, "e").status_code == 401

    listed = {t["id"]: t for t in w.call("GET", "/join-tokens").json()}
    assert listed[parse_join_token(once).id]["state"] == "used up" and listed[token_id]["state"] == "revoked"
    assert listed[record.id]["state"] == "expired" and all(t["token"] is None for t in listed.values())


def test_a_token_cannot_take_over_a_node_name_that_has_a_live_certificate(world: tuple[World, dict[str, str]]) -> None:
    w, _ = world
    r = w.join(w.new_token(), "n1")
    assert r.status_code == 409 and r.json()["error"]["field"] == "node"


def test_only_admins_manage_join_tokens(world: tuple[World, dict[str, str]]) -> None:
    w, _ = world
    assert w.call("POST", "/users", json={"name": "mem", "role": "member", "tenant": "default"}).status_code == 201
    token = w.call("POST", "/tokens", json={"name": "t", "user": "mem"}).json()["token"]
    member = {"Authorization": f"Bearer {token}"}
    assert w.api.post("/api/v1/join-tokens", json={}, headers=member).status_code == 403
    assert w.api.get("/api/v1/join-tokens", headers=member).status_code == 403
    assert w.api.post("/api/v1/nodes/n1/revoke", headers=member).status_code == 403


def test_a_revoked_node_is_cut_off_at_once_and_its_jobs_requeue(world: tuple[World, dict[str, str]]) -> None:
    w, n1 = world
    job = w.running_job_on_n1()
    assert (
        w.agents.post(
            "/api/v1/agents/n1/sync", json={"running": [{"job_id": job, "attempt": 1}]}, headers=n1
        ).status_code
        == 200
    )  # cached as valid: revocation must still win at once
    out = w.call("POST", "/nodes/n1/revoke").json()
    assert out["node"] == "n1" and len(out["revoked_serials"]) == 1
    r = w.agents.post("/api/v1/agents/n1/sync", json={}, headers=n1)
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    assert w.call("GET", "/nodes/n1").json()["state"] == "LOST"
    assert w.job(job)["state"] == "PENDING" and "revoked" in w.job(job)["reason"]
    assert any(e["kind"] == "revoked" for e in w.call("GET", "/nodes/n1/events").json())
    # the name may join again, with a new token the admin hands out
    assert w.join(w.new_token(), "n1").status_code == 200


def test_an_expired_certificate_is_refused(world: tuple[World, dict[str, str]]) -> None:
    w, _ = world
    pem = issue_node_cert(w.api.app, "old", lifetime_s=0.001)
    r = w.agents.post("/api/v1/agents/old/sync", json={}, headers=cert_headers(pem))
    assert r.status_code == 401 and "expired" in r.json()["error"]["message"]


def test_renewal_gives_a_working_certificate_for_the_same_node_only(world: tuple[World, dict[str, str]]) -> None:
    w, n1 = world
    _, csr = new_key_and_csr("n1")
    assert w.agents.post("/api/v1/agents/fake/renew", json={"csr": csr}, headers=n1).status_code == 403
    r = w.agents.post("/api/v1/agents/n1/renew", json={"csr": csr}, headers=n1)
    assert r.status_code == 200
    cert = x509.load_pem_x509_certificate(r.json()["cert"].encode())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "n1"
    assert w.agents.post("/api/v1/agents/n1/sync", json={}, headers=cert_headers(r.json()["cert"])).status_code == 200
    bad = w.agents.post("/api/v1/agents/n1/renew", json={"csr": "not a csr"}, headers=n1)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "csr"
