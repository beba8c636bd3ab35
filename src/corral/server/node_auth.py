"""Which node an agent request speaks for: the client certificate of its mutual-TLS connection (the ASGI TLS
extension, filled in by corral.server.tls for the agent port), checked against the certificates the cluster
CA issued and not revoked. Bearer tokens (people's, admins' included) never act as a node."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from corral.api.tls import fingerprint_pem
from corral.core.errors import AuthError
from corral.server.context import context_of
from corral.server.services.identity import NodeIdentity


def client_cert_pem(scope: Any) -> str | None:
    """The verified client certificate of this request's connection, or None."""
    tls = (scope.get("extensions") or {}).get("tls")
    if not isinstance(tls, dict) or tls.get("client_cert_error"):
        return None
    chain = tls.get("client_cert_chain") or []
    return str(chain[0]) if chain else None


def require_node(request: Request) -> NodeIdentity:
    pem = client_cert_pem(request.scope)
    if pem is None:
        raise AuthError(
            "agent endpoints need the node's client certificate (mutual TLS on the agent port; "
            "join first: corral agent --join URL --token-file FILE)"
        )
    try:
        fingerprint = fingerprint_pem(pem)
    except ValueError as e:
        raise AuthError("unreadable client certificate") from e
    return context_of(request.app).identities.resolve(fingerprint, datetime.now(UTC))
