"""In-process node identities for ASGI tests. A TestClient cannot do TLS, so `NodeCertApp` wraps the app and
puts a client certificate into the request's ASGI TLS extension, exactly where corral.server.tls puts the one a
real mutual-TLS handshake verified. The certificates are real ones, issued by the app's own CA and recorded
like a join's: the server's checks (issued here, not revoked, not expired, node name) all run unchanged.

Test-only: the header is read by this wrapper in tests/, never by the server."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient

from corral.server.services.identity import issue_local_node_cert

HEADER = b"x-test-client-cert"


class NodeCertApp:
    """ASGI wrapper: `X-Test-Client-Cert: <base64 PEM>` becomes scope["extensions"]["tls"]; attributes (state,
    routes...) are the wrapped app's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            value = dict(scope["headers"]).get(HEADER)
            if value is not None:
                pem = base64.b64decode(value).decode()
                scope = dict(
                    scope,
                    extensions={
                        **(scope.get("extensions") or {}),
                        "tls": {"client_cert_chain": [pem], "client_cert_error": None},
                    },
                )
        await self.app(scope, receive, send)


def cert_headers(pem: str) -> dict[str, str]:
    return {HEADER.decode(): base64.b64encode(pem.encode()).decode()}


def issue_node_cert(app: Any, node: str, lifetime_s: float = 3600.0) -> str:
    """A certificate for `node` from the app's CA, recorded as issued (PEM)."""
    state = app.state.ctx
    _, cert = issue_local_node_cert(state.store, state.ca, node, timedelta(seconds=lifetime_s))
    return cert.pem


class NodeAgents:
    """`agents("n1")` -> request headers that present n1's certificate (issued on first use)."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self._pems: dict[str, str] = {}

    def __call__(self, node: str) -> dict[str, str]:
        if node not in self._pems:
            self._pems[node] = issue_node_cert(self.client.app, node)
        return cert_headers(self._pems[node])
