"""What the server, the agent and the CLI share about TLS: certificate fingerprints and the join token's format.

A join token is `crj1.<id>.<secret>.<hex>`: the id names its row (listed, revocable), the secret is stored
hashed, and `<hex>` is the SHA-256 of the cluster CA's certificate (DER), so a joining agent can verify the
server it talks to before it trusts it (as `kubeadm join --discovery-token-ca-cert-hash` does).
"""

from __future__ import annotations

import hashlib
import re
import ssl
from dataclasses import dataclass

JOIN_TOKEN_RE = re.compile(r"^crj1\.(\d{1,18})\.([A-Za-z0-9_-]{16,128})\.([0-9a-f]{64})$")
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
FINGERPRINT_RE = re.compile(r"^(sha256:)?([0-9a-fA-F:]{64,95})$")


def fingerprint_der(der: bytes) -> str:
    """`sha256:<hex>` of a certificate in DER form."""
    return "sha256:" + hashlib.sha256(der).hexdigest()


def fingerprint_pem(pem: str) -> str:
    """`sha256:<hex>` of the first certificate of a PEM string (raises ValueError when there is none)."""
    return fingerprint_der(ssl.PEM_cert_to_DER_cert(first_pem_cert(pem)))


def first_pem_cert(pem: str) -> str:
    end = "-----END CERTIFICATE-----"
    start = pem.find("-----BEGIN CERTIFICATE-----")
    stop = pem.find(end, start)
    if start < 0 or stop < 0:
        raise ValueError("no PEM certificate")
    return pem[start : stop + len(end)] + "\n"


def normalize_fingerprint(value: str) -> str:
    """Accepts `sha256:ab12...`, `AB:12:...` or bare hex; returns `sha256:<lowercase hex>`. Raises ValueError."""
    m = FINGERPRINT_RE.match(value.strip())
    hexpart = m.group(2).replace(":", "").lower() if m else ""
    if len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise ValueError("expected a SHA-256 fingerprint, e.g. sha256:3f5a... (64 hex digits)")
    return "sha256:" + hexpart


@dataclass(frozen=True, slots=True)
class JoinToken:
    id: int
    secret: str
    ca_fingerprint: str  # sha256:<hex>

    def __str__(self) -> str:
        return f"crj1.{self.id}.{self.secret}.{self.ca_fingerprint.removeprefix('sha256:')}"


def parse_join_token(value: str) -> JoinToken:
    """Raises ValueError (without echoing the secret) when `value` is not a join token."""
    m = JOIN_TOKEN_RE.match(value.strip())
    if m is None:
        raise ValueError("not a Corral join token (expected crj1.<id>.<secret>.<ca-fingerprint>)")
    return JoinToken(id=int(m.group(1)), secret=m.group(2), ca_fingerprint="sha256:" + m.group(3))
