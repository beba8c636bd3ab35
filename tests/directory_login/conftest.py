"""Real directory services for the login tests: Debian's OpenLDAP `slapd` (started here from a slapd.conf in a tmp
dir, on free ports, with StartTLS and ldaps:// on a throw-away CA) and a real OpenID Connect provider."""

from __future__ import annotations

import html
import ipaddress
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from e2e.conftest import free_port, wait_for
from realparts import missing_real_part

BASE_DN = "dc=corral,dc=test"
PEOPLE = f"ou=people,{BASE_DN}"
GROUPS = f"ou=groups,{BASE_DN}"
HOW_SLAPD = "install Debian's slapd and ldap-utils (`make test` does: apt-get install slapd ldap-utils)"


@dataclass(frozen=True)
class Slapd:
    url: str  # ldap://127.0.0.1:PORT (StartTLS offered)
    ldaps_url: str  # ldaps://127.0.0.1:PORT
    ca_file: Path  # the throw-away CA that signed the server's certificate


def _write_ca_and_cert(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 / localhost (what slapd serves for StartTLS and ldaps)."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corral test LDAP CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = d / "ca.pem", d / "server.pem", d / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def _hash(password: str) -> str:
    return subprocess.run(["slappasswd", "-s", password], capture_output=True, text=True, check=True).stdout.strip()


def _person(uid: str, password: str) -> str:
    return (
        f"dn: uid={uid},{PEOPLE}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()}\nsn: {uid[0].upper()}\n"
        f"mail: {uid}@corral.test\nuserPassword: {_hash(password)}\n"
    )


def _group(cn: str, *members: str) -> str:
    return f"dn: cn={cn},{GROUPS}\nobjectClass: groupOfNames\ncn: {cn}\n" + "".join(
        f"member: uid={m},{PEOPLE}\n" for m in members
    )


SEED_USERS = {"alice": "alicepw-1", "bob": "bobpw-123", "carol": "carolpw-1", "dave": "davepw-12"}
# alice: vision (member); bob: nlp; carol: interns (never mapped); dave: vision and nlp-leads (two tenants)
SEED_GROUPS = {"vision": ("alice", "dave"), "nlp": ("bob",), "interns": ("carol",), "nlp-leads": ("dave",)}


@pytest.fixture(scope="session")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    """One slapd for the session (about a second to start): the recipe of /work/shared/recipes/ldap-local.sh."""
    if not (shutil.which("slapd") or Path("/usr/sbin/slapd").exists()) or not shutil.which("slappasswd"):
        missing_real_part("OpenLDAP slapd", HOW_SLAPD)
    slapd_bin = shutil.which("slapd") or "/usr/sbin/slapd"
    d = tmp_path_factory.mktemp("slapd")
    (d / "db").mkdir()
    ca, cert, key = _write_ca_and_cert(d)
    (d / "slapd.conf").write_text(f"""include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
pidfile {d}/slapd.pid
TLSCACertificateFile {ca}
TLSCertificateFile {cert}
TLSCertificateKeyFile {key}
database mdb
maxsize 104857600
suffix "{BASE_DN}"
rootdn "cn=admin,{BASE_DN}"
rootpw {_hash("adminpw")}
directory {d}/db
overlay memberof
memberof-group-oc groupOfNames
memberof-member-ad member
memberof-memberof-ad memberOf
access to attrs=userPassword by self write by anonymous auth by * none
access to * by * read
""")
    seed = [
        f"dn: {BASE_DN}\nobjectClass: dcObject\nobjectClass: organization\no: corral\ndc: corral\n",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    seed += [_person(u, p) for u, p in SEED_USERS.items()]
    (d / "seed.ldif").write_text("\n".join(seed))
    # groups are added once slapd runs, so its memberof overlay fills the people's memberOf (slapadd skips overlays)
    (d / "groups.ldif").write_text("\n".join(_group(g, *m) for g, m in SEED_GROUPS.items()))
    subprocess.run(
        ["slapadd", "-f", str(d / "slapd.conf"), "-l", str(d / "seed.ldif")], check=True, capture_output=True
    )
    port, tls_port = free_port(), free_port()
    url, ldaps_url = f"ldap://127.0.0.1:{port}", f"ldaps://127.0.0.1:{tls_port}"
    proc = subprocess.Popen(
        [slapd_bin, "-d", "0", "-f", str(d / "slapd.conf"), "-h", f"{url}/ {ldaps_url}/"],
        stdout=subprocess.DEVNULL,
        stderr=open(d / "slapd.log", "wb"),
    )

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"slapd exited: {(d / 'slapd.log').read_text()[-2000:]}")
        return (
            subprocess.run(["ldapsearch", "-x", "-H", url, "-b", BASE_DN, "-s", "base"], capture_output=True).returncode
            == 0
        )

    try:
        wait_for(answers, 20, "slapd answering")
        subprocess.run(
            ["ldapadd", "-x", "-H", url, "-D", f"cn=admin,{BASE_DN}", "-w", "adminpw", "-f", str(d / "groups.ldif")],
            check=True,
            capture_output=True,
        )
        yield Slapd(url=url, ldaps_url=ldaps_url, ca_file=ca)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def ldap_env(s: Slapd) -> dict[str, str]:
    """The server settings (as CORRAL_* variables) of a DN-template LDAP login against the test slapd."""
    return {
        "CORRAL_LDAP_URL": s.url,
        "CORRAL_LDAP_USER_DN_TEMPLATE": f"uid={{username}},{PEOPLE}",
        "CORRAL_LDAP_GROUP_SEARCH_BASE": GROUPS,
    }


# ---- OpenID Connect -----------------------------------------------------------------------------------------
OP_DIR = Path(__file__).resolve().parent / "oidc_provider"
HOW_OP = (
    "node 20+ and the provider's npm package: `make oidc-provider` (npm ci in tests/directory_login/oidc_provider; "
    "`make test` does it)"
)
OIDC_ACCOUNTS = {
    "alice": {"password": "alice-op-pw", "groups": ["vision"]},
    "bob": {"password": "bob-op-pw", "groups": ["nlp", "staff"]},
    "carol": {"password": "carol-op-pw", "groups": ["interns"]},
    "mallory": {"password": "mallory-op-pw", "groups": ["vision"], "username": "Mallory@evil"},
}


@dataclass(frozen=True)
class Provider:
    issuer: str
    client_id: str
    client_secret: str
    other_client_id: str  # a second client of the same provider (tokens for it must not open Corral)
    other_client_secret: str
    signing_jwk: dict[str, Any]  # the provider's private key: tests mint tokens it could have made


def start_oidc_provider(d: Path, redirect_uris: list[str]) -> tuple[Provider, subprocess.Popen[bytes]]:
    """panva's oidc-provider in a node process on a free port, with clients `corral` and `other-app`."""
    node = shutil.which("node")
    if node is None or not (OP_DIR / "node_modules" / "oidc-provider").is_dir():
        missing_real_part("an OpenID Connect provider (oidc-provider on node)", HOW_OP)
    from joserfc.jwk import RSAKey

    key = RSAKey.generate_key(2048, parameters={"kid": "test-key-1", "use": "sig", "alg": "RS256"})
    jwk = key.as_dict(private=True)
    port = free_port()
    op = Provider(
        issuer=f"http://127.0.0.1:{port}",
        client_id="corral",
        client_secret="corral-client-secret",
        other_client_id="other-app",
        other_client_secret="other-app-secret",
        signing_jwk=jwk,
    )
    clients = [
        {"client_id": op.client_id, "client_secret": op.client_secret, "redirect_uris": redirect_uris},
        {"client_id": op.other_client_id, "client_secret": op.other_client_secret, "redirect_uris": redirect_uris},
    ]
    env = dict(
        os.environ, OIDC_ACCOUNTS=json.dumps(OIDC_ACCOUNTS), OIDC_CLIENTS=json.dumps(clients), OIDC_JWK=json.dumps(jwk)
    )
    proc = subprocess.Popen(
        [node, str(OP_DIR / "server.mjs"), str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(d / f"oidc-provider-{port}.log", "wb"),
    )

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the OIDC provider exited: {(d / f'oidc-provider-{port}.log').read_text()[-2000:]}")
        try:
            return httpx.get(f"{op.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answers, 30, "OIDC provider answering")
    return op, proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def oidc_provider(tmp_path: Path) -> Iterator[Callable[[list[str]], Provider]]:
    """A factory: `oidc_provider([redirect_uri, ...])` starts a provider that accepts these redirect URIs."""
    procs: list[subprocess.Popen[bytes]] = []

    def make(redirect_uris: list[str]) -> Provider:
        op, proc = start_oidc_provider(tmp_path, redirect_uris)
        procs.append(proc)
        return op

    yield make
    for p in procs:
        stop(p)


def provider_login(http: httpx.Client, authorize_url: str, user: str, password: str) -> httpx.Response:
    """A person at the provider: open the authorization URL, fill in the login form, and follow the provider's
    redirects up to (not into) the relying party. Returns the last response (a 303 to the callback, or the form
    again after a wrong password). A client whose provider session is open gets the 303 without a form."""
    origin = httpx.URL(authorize_url).copy_with(path="/", query=None)

    def follow(r: httpx.Response) -> httpx.Response:
        while (
            r.status_code in (302, 303) and r.url.join(r.headers["location"]).copy_with(path="/", query=None) == origin
        ):
            r = http.get(r.url.join(r.headers["location"]))
        return r

    r = follow(http.get(authorize_url))
    if r.status_code in (302, 303):  # the provider's own session is still open (single sign-on): no form
        return r
    action = re.search(r'action="([^"]+)"', r.text)
    assert r.status_code == 200 and action, r.text[:500]
    return follow(http.post(r.url.join(html.unescape(action.group(1))), data={"login": user, "password": password}))
