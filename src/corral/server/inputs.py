"""Checks every request makes before any route sees it: a body size limit (413) and no NUL byte anywhere in the
path, the query or a JSON body (422 naming the field), for every route present and future. A NUL reaching a job's
argv or environment killed the shim; in a name or a path it truncates what C code and files see.

Bodies under `passthrough` (the services' gateway mounted on the API port: /services) go to their app unread: they
are a tenant's replica's, not Corral's, and the gateway reads them itself, within its own bounds (gateway/app.py); a
guard reading them first would hold up to MAX_REQUEST_BYTES per connection outside any budget."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from corral.api.bounds import MAX_REQUEST_BYTES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# JSON can carry a NUL only as the escape \u0000 (a raw NUL byte is invalid JSON and refused by the parser); an
# escaped backslash before "u0000" is literal text, hence the even run of backslashes.
_JSON_NUL = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u0000")


class RequestTooLarge(Exception):
    pass


def find_nul(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The path to the first string (key or value) holding a NUL in a decoded JSON document, or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for k, v in value.items():
            if "\x00" in k:
                return path
            found = find_nul(v, (*path, k))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = find_nul(v, (*path, str(i)))
            if found is not None:
                return found
    return None


def nul_in_path_or_query(scope: Scope) -> str | None:
    """The field (a query parameter, or `path`) holding a NUL byte, or None."""
    if "\x00" in scope.get("path", ""):
        return "path"
    raw = scope.get("query_string", b"")
    if b"%00" in raw or b"\x00" in raw:
        for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
            if "\x00" in key or "\x00" in value:
                return key.replace("\x00", "") or "query"
    return None


def nul_in_json(body: bytes) -> str | None:
    """The dotted field of a JSON body holding a NUL (`body` for the whole document), or None."""
    if not _JSON_NUL.search(body):
        return None
    try:
        found = find_nul(json.loads(body))
    except ValueError:
        return None  # not JSON after all: the route's parser answers
    return ".".join(found) if found else "body" if found is not None else None


async def _send_error(send: Send, status: int, code: str, message: str, field: str | None) -> None:
    body = json.dumps({"error": {"code": code, "message": message, "field": field}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class InputGuard:
    """Pure ASGI middleware (no buffering of responses; streaming and websockets pass through untouched)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_REQUEST_BYTES, passthrough: str | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.passthrough = passthrough  # a path prefix whose bodies pass unread (the module's docstring)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        field = nul_in_path_or_query(scope)
        if field is not None:
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008, "reason": "NUL byte in the request"})
            return await _send_error(send, 422, "invalid", f"{field}: NUL bytes are not allowed", field)
        if scope["type"] == "websocket" or self._passes(scope.get("path", "")):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return await _send_error(
                send, 413, "too_large", f"the request body is over {self.max_body_bytes} bytes", None
            )
        if scope.get("method") not in ("POST", "PUT", "PATCH") or b"json" not in headers.get(b"content-type", b""):
            return await self.app(scope, receive, send)  # streamed bodies (log chunks): the declared size is checked
        try:
            body = await _read_body(receive, self.max_body_bytes)
        except RequestTooLarge:
            return await _send_error(
                send, 413, "too_large", f"the request body is over {self.max_body_bytes} bytes", None
            )
        field = nul_in_json(body)
        if field is not None:
            return await _send_error(send, 422, "invalid", f"{field}: NUL bytes are not allowed", field)
        return await self.app(scope, _replay(body, receive), send)

    def _passes(self, path: str) -> bool:
        p = self.passthrough
        return p is not None and (path == p or path.startswith(p + "/"))


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server's own receive would

    return replay
