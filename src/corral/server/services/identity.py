"""Node identity use-cases: join tokens, the join exchange (token + CSR -> node certificate), renewal,
revocation, and resolving the client certificate of an agent request to the node it speaks for."""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from corral.api.tls import NODE_NAME_RE, JoinToken, parse_join_token
from corral.core.errors import AuthError, ConflictError, ForbiddenError, NotFoundError, ValidationError
from corral.core.tenancy import Action
from corral.server.auth import Principal
from corral.server.ca import CertificateAuthority, CsrError, IssuedCert
from corral.server.health.consequences import requeue_after_failure
from corral.server.services.agents import check_agent_name
from corral.server.services.audit import record_audit
from corral.store.identity import JoinTokenRecord, NodeCertRecord
from corral.store.protocols import AuditStore, JobStore, NodeIdentityStore, NodeStore, OperationsStore, PoolStore

MAX_JOIN_TTL_S = 30 * 86400
MAX_JOIN_USES = 10_000


class NodeIdentityAdminStore(NodeIdentityStore, NodeStore, JobStore, OperationsStore, AuditStore, PoolStore, Protocol):
    """Joining, renewing and revoking nodes: tokens and certificates, the node and its jobs, events, audit."""


def hash_secret(secret: str) -> str:
    return hashlib.sha256(b"corral-join:" + secret.encode()).hexdigest()


def create_join_token(
    store: NodeIdentityAdminStore,
    ca: CertificateAuthority,
    caller: Principal,
    ttl_s: float,
    uses: int,
    description: str = "",
) -> tuple[str, JoinTokenRecord]:
    """A new join token (admins). The secret is returned once and stored hashed."""
    caller.require(Action.MANAGE_CLUSTER)
    now = datetime.now(UTC)
    secret = secrets.token_urlsafe(24)
    who = caller.user.name if caller.user else caller.token.name
    record = store.create_join_token(hash_secret(secret), description, who, now, now + timedelta(seconds=ttl_s), uses)
    record_audit(store, caller, "join_token.create", str(record.id), f"ttl {ttl_s:g} s, {uses} use(s)")
    return str(JoinToken(id=record.id, secret=secret, ca_fingerprint=ca.fingerprint)), record


@runtime_checkable
class JoinTokenStore(Protocol):
    def create_join_token(
        self, secret_hash: str, description: str, created_by: str, now: datetime, expires_at: datetime, max_uses: int
    ) -> JoinTokenRecord:
        """See corral.store.identity.NodeIdentityMethods."""


def create_local_join_token(store: JoinTokenStore, ca: CertificateAuthority, ttl_s: float, uses: int) -> str:
    """The convenience token `corral up` writes at first start (listed and expiring like any other)."""
    now = datetime.now(UTC)
    secret = secrets.token_urlsafe(24)
    record = store.create_join_token(
        hash_secret(secret),
        "written by corral up at first start",
        "corral up",
        now,
        now + timedelta(seconds=ttl_s),
        uses,
    )
    return str(JoinToken(id=record.id, secret=secret, ca_fingerprint=ca.fingerprint))


def create_pool_join_token(
    store: JoinTokenStore, ca: CertificateAuthority, ttl_s: float, description: str
) -> tuple[str, int]:
    """A one-time token for a node a cloud pool starts (the autoscaler binds it to the node's name: join_node
    refuses it for any other name). Returns (token text, token id)."""
    now = datetime.now(UTC)
    secret = secrets.token_urlsafe(24)
    record = store.create_join_token(
        hash_secret(secret), description, "autoscaler", now, now + timedelta(seconds=ttl_s), 1
    )
    return str(JoinToken(id=record.id, secret=secret, ca_fingerprint=ca.fingerprint)), record.id


def revoke_join_token(store: NodeIdentityAdminStore, caller: Principal, token_id: int) -> JoinTokenRecord:
    caller.require(Action.MANAGE_CLUSTER)
    if store.get_join_token(token_id) is None:
        raise NotFoundError("join token", str(token_id))
    store.revoke_join_token(token_id, datetime.now(UTC))
    record_audit(store, caller, "join_token.revoke", str(token_id))
    record = store.get_join_token(token_id)
    assert record is not None
    return record


def join_node(
    store: NodeIdentityAdminStore,
    ca: CertificateAuthority,
    token_text: str,
    node: str,
    csr_pem: str,
    lifetime: timedelta,
) -> IssuedCert:
    """Spend one use of a join token for a certificate bound to `node`. A node that still holds a live
    certificate cannot be joined again (that would let any token holder take over a real node's name):
    revoke it first (`corral nodes revoke NODE`)."""
    if not NODE_NAME_RE.fullmatch(node):
        raise ValidationError("node", "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
    check_agent_name(store, node)  # a Slurm or Kubernetes pool's node: its jobs are the cluster's to run
    try:
        token = parse_join_token(token_text)
    except ValueError as e:
        raise AuthError(str(e)) from e
    if token.ca_fingerprint != ca.fingerprint:
        raise AuthError("this join token was made for another cluster (its CA fingerprint differs)")
    now = datetime.now(UTC)
    if any(c.live_at(now) for c in store.list_node_certs(node)):
        raise ConflictError(
            f"node {node} already has a live certificate; revoke it first "
            f"(corral nodes revoke {node}) to join a machine under that name again",
            "node",
        )
    bound = store.pool_node_for_token(token.id)
    if bound is not None and bound.name != node:
        raise AuthError("this join token was made for another node; a cloud pool's token joins only its own node")
    if not store.use_join_token(token.id, hash_secret(token.secret), now):
        raise AuthError("join token invalid, expired, used up or revoked")
    cert = _sign(ca, csr_pem, node, lifetime)
    store.record_node_cert(cert.serial, cert.fingerprint, node, now, cert.not_after, token.id)
    store.add_node_event(node, None, "joined", f"certificate {cert.serial} (join token {token.id})", now)
    return cert


def renew_node_cert(
    store: NodeIdentityStore, ca: CertificateAuthority, node: str, csr_pem: str, lifetime: timedelta
) -> IssuedCert:
    """A fresh certificate for a node that proved its identity with its current one."""
    cert = _sign(ca, csr_pem, node, lifetime)
    store.record_node_cert(cert.serial, cert.fingerprint, node, datetime.now(UTC), cert.not_after, None)
    return cert


def issue_local_node_cert(
    store: NodeIdentityStore, ca: CertificateAuthority, node: str, lifetime: timedelta
) -> tuple[bytes, IssuedCert]:
    """Key + certificate for the in-process agent of `corral up` (the server trusts itself)."""
    key, cert = ca.issue_node_key(node, lifetime)
    store.record_node_cert(cert.serial, cert.fingerprint, node, datetime.now(UTC), cert.not_after, None)
    return key, cert


def _sign(ca: CertificateAuthority, csr_pem: str, node: str, lifetime: timedelta) -> IssuedCert:
    try:
        return ca.sign_node_csr(csr_pem, node, lifetime)
    except CsrError as e:
        raise ValidationError("csr", str(e)) from e


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """The node an agent request speaks for, proven by its client certificate."""

    node: str
    serial: str
    not_after: datetime


class NodeIdentities:
    """Resolves client-certificate fingerprints to live node certificates. Positive answers are cached in
    memory for `cache_s`; `forget_node` (revocation through this server) drops them at once, so a revoked node's
    next request is refused."""

    def __init__(self, store: NodeIdentityStore, cache_s: float = 10.0) -> None:
        self.store = store
        self.cache_s = cache_s  # bounds how long a revocation made elsewhere (another process) goes unseen
        self._cache: dict[str, tuple[NodeCertRecord, datetime]] = {}
        self._lock = threading.Lock()

    def resolve(self, fingerprint: str, now: datetime) -> NodeIdentity:
        """Raises AuthError when the certificate was not issued here, was revoked or expired."""
        with self._lock:
            cached = self._cache.get(fingerprint)
        cert = cached[0] if cached and (now - cached[1]).total_seconds() < self.cache_s else None
        if cert is None:
            cert = self.store.find_node_cert(fingerprint)
            if cert is None:
                raise AuthError("client certificate not issued by this cluster")
            if cert.revoked_at is None:
                with self._lock:
                    self._cache[fingerprint] = (cert, now)
        if cert.revoked_at is not None:
            raise AuthError(f"the certificate of node {cert.node} was revoked")
        if not cert.live_at(now):
            raise AuthError(f"the certificate of node {cert.node} expired; join again with a new token")
        return NodeIdentity(node=cert.node, serial=cert.serial, not_after=cert.not_after)

    def forget_node(self, node: str) -> None:
        with self._lock:
            for fp in [fp for fp, (c, _) in self._cache.items() if c.node == node]:
                del self._cache[fp]


def revoke_node(
    store: NodeIdentityAdminStore, identities: NodeIdentities, caller: Principal, node: str, backoff_s: float
) -> list[str]:
    """Cut a node off at once: its certificates are revoked, it is marked LOST and its jobs go back to the
    queue as for a lost node. Returns the revoked serials. Admins only."""
    caller.require(Action.MANAGE_CLUSTER)
    certs = store.list_node_certs(node)
    if store.get_node(node) is None and not certs:
        raise NotFoundError("node", node)
    now = datetime.now(UTC)
    serials = store.revoke_node_certs(node, now)
    identities.forget_node(node)
    store.mark_node_lost(node)
    store.add_node_event(node, None, "revoked", f"certificates {', '.join(serials) or '(none live)'} revoked", now)
    for job in store.list_node_jobs(node):
        requeue_after_failure(store, job, f"node {node} revoked", now, backoff_s)
    record_audit(store, caller, "node.revoke", node, f"serials {serials}")
    return serials


def require_node_match(identity: NodeIdentity, node: str) -> None:
    """An agent speaks only for the node its certificate names."""
    if identity.node != node:
        raise ForbiddenError(f"this certificate belongs to node {identity.node}, not {node}")
