"""The cluster's certificate authority: created at first start in the data dir, it signs the server's TLS
certificate and each node's client certificate (bound to the node name: CN and SAN)."""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from corral.api.tls import fingerprint_der

CA_DIR = "ca"
CA_LIFETIME = timedelta(days=3650)
SERVER_LIFETIME = timedelta(days=365)
SERVER_RENEW_BEFORE = timedelta(days=30)
CLOCK_SKEW = timedelta(minutes=5)  # certificates start a little in the past: clocks of nodes differ


class CsrError(ValueError):
    """A CSR that cannot be signed (malformed, bad signature, or for another name)."""


@dataclass(frozen=True, slots=True)
class IssuedCert:
    pem: str
    serial: str  # hex
    fingerprint: str  # sha256:<hex> of the DER
    not_after: datetime


def write_private(path: Path, data: bytes) -> None:
    """Write `data` readable by the owner only (0600), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def issued(cert: x509.Certificate) -> IssuedCert:
    return IssuedCert(
        pem=cert_pem(cert),
        serial=format(cert.serial_number, "x"),
        fingerprint=fingerprint_der(cert.public_bytes(serialization.Encoding.DER)),
        not_after=cert.not_valid_after_utc,
    )


def default_server_names(host: str) -> list[str]:
    """Names the server's certificate covers: loopback, this machine's names and the bind address."""
    names = ["localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()]
    if host not in ("", "0.0.0.0", "::"):
        names.append(host)
    return list(dict.fromkeys(n for n in names if n))


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


class CertificateAuthority:
    """Files under `<data_dir>/ca/`: ca.key (0600), ca.crt, server.key (0600), server.crt (chain)."""

    def __init__(self, directory: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.dir = directory
        self.key = key
        self.cert = cert
        self.cert_pem = cert_pem(cert)
        self.fingerprint = fingerprint_der(cert.public_bytes(serialization.Encoding.DER))

    @classmethod
    def load_or_create(cls, data_dir: Path, now: datetime | None = None) -> CertificateAuthority:
        """Load the CA of this data dir, or create it (first start). Idempotent."""
        directory = data_dir / CA_DIR
        key_path, cert_path = directory / "ca.key", directory / "ca.crt"
        if key_path.exists() and cert_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path}: expected an EC private key")
            return cls(directory, key, x509.load_pem_x509_certificate(cert_path.read_bytes()))
        now = now or datetime.now(UTC)
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Corral cluster CA {os.urandom(4).hex()}")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        write_private(key_path, key_pem(key))
        write_private(cert_path, cert_pem(cert).encode())
        return cls(directory, key, cert)

    def _sign(
        self,
        subject: str,
        public_key: ec.EllipticCurvePublicKey,
        names: list[str],
        usage: x509.ObjectIdentifier,
        lifetime: timedelta,
        now: datetime,
    ) -> x509.Certificate:
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(self.cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(
                now - min(CLOCK_SKEW, max(lifetime, timedelta(0)) / 10)
            )  # short-lived ones: renewal time stays sane
            .not_valid_after(min(now + lifetime, self.cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(_san(names), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def ensure_server_cert(self, names: list[str], now: datetime | None = None) -> tuple[Path, Path]:
        """(cert chain path, key path) of the server's certificate for `names`; re-issued when missing, when
        the names changed or when it expires within 30 days."""
        now = now or datetime.now(UTC)
        cert_path, key_path = self.dir / "server.crt", self.dir / "server.key"
        if cert_path.exists() and key_path.exists():
            current = x509.load_pem_x509_certificate(cert_path.read_bytes())
            try:
                have = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            except x509.ExtensionNotFound:
                have = None
            if (
                have == _san(names)
                and current.not_valid_after_utc - now > SERVER_RENEW_BEFORE
                and current.issuer == self.cert.subject
            ):
                return cert_path, key_path
        key = _new_key()
        cert = self._sign(
            names[0] if names else "corral-server",
            key.public_key(),
            names,
            ExtendedKeyUsageOID.SERVER_AUTH,
            SERVER_LIFETIME,
            now,
        )
        write_private(key_path, key_pem(key))
        write_private(cert_path, (cert_pem(cert) + self.cert_pem).encode())
        return cert_path, key_path

    def sign_node_csr(self, csr_pem: str, node: str, lifetime: timedelta, now: datetime | None = None) -> IssuedCert:
        """A client certificate for `node` (CN and SAN) over the CSR's key. The CSR's own subject is ignored:
        the name is the one the caller was authorised for. Raises CsrError."""
        try:
            csr = x509.load_pem_x509_csr(csr_pem.encode())
        except ValueError as e:
            raise CsrError(f"not a PEM certificate signing request: {e}") from e
        if not csr.is_signature_valid:
            raise CsrError("the CSR's signature does not match its key")
        public_key = csr.public_key()
        if not isinstance(public_key, ec.EllipticCurvePublicKey):
            raise CsrError("node keys must be EC (P-256) keys")
        return issued(
            self._sign(node, public_key, [node], ExtendedKeyUsageOID.CLIENT_AUTH, lifetime, now or datetime.now(UTC))
        )

    def issue_node_key(self, node: str, lifetime: timedelta, now: datetime | None = None) -> tuple[bytes, IssuedCert]:
        """A new key and certificate for a node the server trusts itself (the local agent of `corral up`)."""
        key = _new_key()
        cert = self._sign(
            node, key.public_key(), [node], ExtendedKeyUsageOID.CLIENT_AUTH, lifetime, now or datetime.now(UTC)
        )
        return key_pem(key), issued(cert)

    @property
    def cert_path(self) -> Path:
        return self.dir / "ca.crt"
