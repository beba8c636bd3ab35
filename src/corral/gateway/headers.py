"""What headers cross the gateway, each way, and the gateway's own error answers. Pure: ASGI scopes in, lists out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.gateway.model import Endpoint

# Hop-by-hop headers (RFC 9110 7.6.1) and what the gateway sets itself. Host is the replica's; Content-Length is
# recomputed from the body read; Authorization and Cookie carry the caller's Corral credential, which never reaches
# a replica. X-Forwarded-* from the caller are replaced, not trusted (X-Forwarded-For is appended to, as is usual).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"authorization",
    b"cookie",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    b"x-forwarded-prefix",
}
# On a WebSocket, the handshake's own headers too (the client library makes them), and Origin and User-Agent, which
# are passed as the library's own arguments.
WS_NOT_FORWARDED = NOT_FORWARDED | {
    b"sec-websocket-key",
    b"sec-websocket-version",
    b"sec-websocket-extensions",
    b"sec-websocket-protocol",
    b"origin",
    b"user-agent",
}


def service_prefix(name: str) -> str:
    return f"/services/{name}"


def compute_upstream_target(scope: Mapping[str, Any]) -> bytes:
    """/rest?query: the path after /services/NAME and the query, as the caller sent them (still percent-encoded)."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    after = raw[raw.find(b"/services/") + len(b"/services/") :]
    slash = after.find(b"/")
    rest = after[slash:] if slash >= 0 else b"/"
    query: bytes = scope.get("query_string", b"")
    return rest + b"?" + query if query else rest


def compute_upstream_url(scheme: str, endpoint: Endpoint, scope: Mapping[str, Any]) -> str:
    """scheme://host:port/rest?query (compute_upstream_target on the endpoint)."""
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    return f"{scheme}://{host}:{endpoint.port}{compute_upstream_target(scope).decode('latin-1')}"


def compute_upstream_headers(
    scope: Mapping[str, Any], prefix: str, not_forwarded: frozenset[bytes] = NOT_FORWARDED
) -> list[tuple[bytes, bytes]]:
    """The caller's headers as the replica gets them: hop-by-hop ones (and those the caller's Connection header
    names) and credentials dropped, X-Forwarded-For/-Proto/-Host/-Prefix set."""
    raw: Iterable[tuple[bytes, bytes]] = scope["headers"]
    out: list[tuple[bytes, bytes]] = []
    forwarded_for = host = b""
    named: set[bytes] = set()
    for key, value in raw:
        if key == b"connection":
            named.update(t.strip().lower() for t in value.split(b","))
        elif key == b"x-forwarded-for":
            forwarded_for = value
        elif key == b"host":
            host = value
    for key, value in raw:
        if key not in not_forwarded and key not in named:
            out.append((key, value))
    client = scope.get("client")
    if client:
        peer = str(client[0]).encode()
        forwarded_for = forwarded_for + b", " + peer if forwarded_for else peer
    if forwarded_for:
        out.append((b"x-forwarded-for", forwarded_for))
    secure = scope.get("scheme") in ("https", "wss")
    out.append((b"x-forwarded-proto", b"https" if secure else b"http"))
    if host:
        out.append((b"x-forwarded-host", host))
    out.append((b"x-forwarded-prefix", prefix.encode()))
    return out


# A replica never sets cookies: browsers scope them by host, not port, so a replica's Set-Cookie would land on the
# portal's host (a forged corral_session or corral_csrf: session fixation, login CSRF).
NOT_RETURNED = HOP_BY_HOP | {b"set-cookie", b"set-cookie2"}
# On the API port (CORRAL_GATEWAY_PORT=0) a replica's page shares the portal's origin: it is sandboxed into an origin
# of its own (scripts run, but cannot read the portal's cookies nor call the API as whoever opens it).
SANDBOX = (b"content-security-policy", b"sandbox allow-scripts allow-forms allow-popups allow-downloads")


def compute_response_headers(
    raw: Iterable[tuple[bytes, bytes]], job_id: int, sandbox: bool = False
) -> list[tuple[bytes, bytes]]:
    """The replica's response headers as the caller gets them: hop-by-hop ones and cookies dropped (the body is
    passed as the raw bytes the replica sent, so Content-Length and Content-Encoding stay, except a Content-Length
    beside a Transfer-Encoding, which framed the body instead: RFC 9112 6.3), X-Corral-Replica added, and with
    `sandbox` a CSP sandbox."""
    raw = list(raw)
    chunked = any(k.lower() == b"transfer-encoding" for k, _ in raw)
    out = [(k, v) for k, v in raw if k.lower() not in NOT_RETURNED and not (chunked and k.lower() == b"content-length")]
    out.append((b"x-corral-replica", str(job_id).encode()))
    if sandbox:
        out.append(SANDBOX)
    return out


def error_response(
    status: int, code: str, message: str, extra_headers: Iterable[tuple[bytes, bytes]] = ()
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) of the gateway's own error answer, in the server's error shape
    {"error": {"code", "message", "field"}} (server/errors.py)."""
    body = json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.extend(extra_headers)
    return status, headers, body
