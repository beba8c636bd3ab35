"""The node's identity on disk (`<agent dir>/tls/`: node.key and node.crt 0600, ca.crt), the join that makes
it, the mutual-TLS context built from it, and the renewer that replaces the certificate at 2/3 of its life."""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from corral.api.schemas import NodeCertOut
from corral.sdk.client import AgentClient, CorralSDKError
from corral.sdk.join import join_cluster, trust_ssl_context

log = logging.getLogger("corral.agent")
RENEW_AT_FRACTION = 2 / 3


@dataclass(frozen=True, slots=True)
class NodeTlsFiles:
    directory: Path

    @property
    def key(self) -> Path:
        return self.directory / "node.key"

    @property
    def cert(self) -> Path:
        return self.directory / "node.crt"

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def exist(self) -> bool:
        return self.key.exists() and self.cert.exists() and self.ca.exists()

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert.read_bytes())

    def save(self, key_pem: bytes, reply: NodeCertOut) -> None:
        """Write key, certificate and CA (each 0600, atomically; the key first, the certificate last)."""
        for path, data in ((self.key, key_pem), (self.ca, reply.ca.encode()), (self.cert, reply.cert.encode())):
            _write_private(path, data)


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def new_key_and_csr(node: str) -> tuple[bytes, str]:
    """A fresh P-256 key (PEM) and a CSR for `node` over it."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, csr.public_bytes(serialization.Encoding.PEM).decode()


def join(files: NodeTlsFiles, url: str, token: str, node: str) -> NodeCertOut:
    """Join with a token: a new key, a CSR, the certificate back, all kept in `files`."""
    key_pem, csr = new_key_and_csr(node)
    reply = join_cluster(url, token, node, csr)
    files.save(key_pem, reply)
    log.info("joined as node %s: certificate %s valid until %s", node, reply.serial, reply.not_after.isoformat())
    return reply


def usable_identity(files: NodeTlsFiles, node: str, now: datetime | None = None) -> str | None:
    """None when the files hold a valid certificate for `node`; otherwise why not (for the log)."""
    if not files.exist():
        return "no certificate yet"
    cert = files.certificate()
    names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [node]:
        return f"the certificate in {files.directory} is for node {names[0] if names else '?'}, not {node}"
    if cert.not_valid_after_utc <= (now or datetime.now(UTC)):
        return f"the certificate expired at {cert.not_valid_after_utc.isoformat()}"
    return None


def mtls_context(files: NodeTlsFiles) -> ssl.SSLContext:
    """Verifies the server against the cluster CA and presents the node's certificate."""
    ctx = trust_ssl_context(files.ca.read_text())
    ctx.load_cert_chain(files.cert, files.key)
    return ctx


def renew_due_at(cert: x509.Certificate) -> datetime:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * RENEW_AT_FRACTION


class CertRenewer:
    """Renews the node's certificate at 2/3 of its lifetime, over mutual TLS with the current one, then
    loads it into the client's SSLContext and moves the client to new connections."""

    def __init__(
        self, files: NodeTlsFiles, client: AgentClient, ctx: ssl.SSLContext, node: str, check_interval_s: float = 60.0
    ) -> None:
        self.files, self.client, self.ctx, self.node = files, client, ctx, node
        self.check_interval_s = check_interval_s
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="corral-agent-renew", daemon=True)

    def renew_if_due(self, now: datetime | None = None) -> bool:
        """Renew when due. Returns whether it did. Raises CorralSDKError when the server refused or is away."""
        if (now or datetime.now(UTC)) < renew_due_at(self.files.certificate()):
            return False
        key_pem, csr = new_key_and_csr(self.node)
        reply = self.client.renew(self.node, csr)
        self.files.save(key_pem, reply)
        self.ctx.load_cert_chain(self.files.cert, self.files.key)
        self.client.recycle_connections()
        self.renewals += 1
        log.info("node certificate renewed: %s valid until %s", reply.serial, reply.not_after.isoformat())
        return True

    def _loop(self) -> None:
        while True:
            cert = self.files.certificate()
            wait_s = (renew_due_at(cert) - datetime.now(UTC)).total_seconds()
            if self._stop.wait(min(max(wait_s, 0.0), self.check_interval_s)):
                return
            try:
                self.renew_if_due()
            except CorralSDKError as e:
                log.warning("certificate renewal failed (%s); retrying", e)
                if self._stop.wait(min(self.check_interval_s, 5.0)):
                    return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
