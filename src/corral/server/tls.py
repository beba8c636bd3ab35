"""TLS listeners: SSL contexts for the agents' mutual-TLS port and the people's HTTPS ports, and a uvicorn
HTTP protocol that hands the verified client certificate to the app as the ASGI TLS extension
(`scope["extensions"]["tls"]["client_cert_chain"]`), which uvicorn does not do by itself."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

TLS_MIN = ssl.TLSVersion.TLSv1_2


def agent_ssl_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    """The agent port: the server's certificate; client certificates signed by the cluster CA are verified
    when sent (CERT_OPTIONAL: a joining agent has none yet; every route but the join refuses it then)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_MIN
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(cafile=str(ca))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def https_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The API, portal and job-UI ports: people authenticate with tokens and sessions, not certificates."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_MIN
    ctx.load_cert_chain(cert, key)
    return ctx


def tls_extension(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """The ASGI TLS extension for one connection (None on plain TCP). Only a certificate the handshake
    verified is ever present: with CERT_OPTIONAL an unverifiable one fails the handshake."""
    ssl_object: ssl.SSLObject | None = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    cipher = ssl_object.cipher()
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": None,
        "cipher_suite": None,
        "corral_cipher": cipher[0] if cipher else None,
    }


class TlsH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, plus the TLS extension in every request's scope of a TLS connection."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ext = tls_extension(transport)
        if ext is None:
            return
        inner = self.app

        async def with_tls(scope: Any, receive: Any, send: Any) -> None:
            scope.setdefault("extensions", {})["tls"] = ext
            await inner(scope, receive, send)

        self.app = with_tls
