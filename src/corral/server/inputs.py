"""Checks every request makes before any route sees it: a body size limit (413) and no NUL byte anywhere in the
path, the query or a JSON body (422 naming the field), for every route present and future. A NUL reaching a job's
argv or environment killed the shim; in a name or a path it truncates what C code and files see.

Every request body is read here, whole, before the app runs, whatever its method, content type or framing (a
declared Content-Length or chunked): FastAPI reads a route's body before it checks the caller's credential, so a
bound the guard did not apply to every body would let an unauthenticated caller make the process hold whatever it
sends. A body is bounded three ways:
- each, to `max_body_bytes` (8 MiB): one declared larger is answered 413 before a byte of it is read, one sent
  without a length (chunked) as soon as it passes;
- all the bodies held at once by this guard (one per listener), to `max_bodies_bytes` (128 MiB): only bytes received
  count (a declared length reserves nothing), and a body that would pass what is left is answered 503 `busy` with
  Retry-After: 1 (before it is read when its declared length says so, else as soon as it passes). A body's bytes
  are given back when its request's handling ends, on every way out;
- in time: a body that sends nothing for `body_idle_s` (30 s), or is not whole within `body_deadline_s` (120 s), is
  answered 408.
Those three answers close the connection (the rest of the body is not read). No route streams its request body: the
largest Corral takes is an agent's log chunk (1 MiB), read whole by its route.

Bodies under `passthrough` (the services' gateway mounted on the API port: /services) go to their app unread: they
are a tenant's replica's, not Corral's, and the gateway reads them itself, within its own bounds (gateway/app.py); a
guard reading them first would hold them outside the gateway's budget. With `check_nul` off (the jobs' web UIs'
port, whose bodies are a job's page's, not Corral's) the guard only bounds bodies."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from corral.api.bounds import MAX_REQUEST_BODIES_BYTES, MAX_REQUEST_BYTES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# JSON can carry a NUL only as the escape \u0000 (a raw NUL byte is invalid JSON and refused by the parser); an
# escaped backslash before "u0000" is literal text, hence the even run of backslashes.
_JSON_NUL = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u0000")

BODY_IDLE_S = 30.0  # the longest a request body may send nothing
BODY_DEADLINE_S = 120.0  # the longest a whole request body may take
_CLOSE = [(b"connection", b"close")]  # an answer sent before the body was read whole: the rest of it is not wanted
_BUSY_HEADERS = [(b"retry-after", b"1"), *_CLOSE]


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


async def _send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    field: str | None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps({"error": {"code": code, "message": message, "field": field}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Share:
    """The bytes one request's body holds of its guard's budget (given back when the request's handling ends)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class _Refusal(Exception):
    """The guard's answer to a body it will not read on: status, code, message, extra headers."""

    def __init__(self, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]]) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


class _Gone(Exception):
    """The caller went away before its body was whole: nobody to answer."""


# After this many bytes of request bodies are given back, the collector's young generations are collected (below).
COLLECT_AFTER_BODY_BYTES = 16 * 1024 * 1024


class InputGuard:
    """Pure ASGI middleware (no buffering of responses; streaming and websockets pass through untouched)."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int = MAX_REQUEST_BYTES,
        passthrough: str | None = None,
        *,
        max_bodies_bytes: int = MAX_REQUEST_BODIES_BYTES,  # all the bodies held at once (the module's docstring)
        body_idle_s: float = BODY_IDLE_S,
        body_deadline_s: float = BODY_DEADLINE_S,
        check_nul: bool = True,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.passthrough = passthrough  # a path prefix whose bodies pass unread (the module's docstring)
        self.max_bodies_bytes = max_bodies_bytes
        self.body_idle_s = body_idle_s
        self.body_deadline_s = body_deadline_s
        self.check_nul = check_nul
        self._held = 0  # bytes of the bodies held now (all on the event loop's thread)
        self._given_back = 0  # bytes of bodies whose requests ended since the young generations were last collected

    @property
    def held_bytes(self) -> int:
        """Bytes of request bodies held now (at most max_bodies_bytes)."""
        return self._held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        field = nul_in_path_or_query(scope) if self.check_nul else None
        if field is not None:
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008, "reason": "NUL byte in the request"})
            return await _send_error(send, 422, "invalid", f"{field}: NUL bytes are not allowed", field)
        if scope["type"] == "websocket" or self._passes(scope.get("path", "")):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers", []))
        share = _Share()
        try:
            try:
                chunks = await self._read_body(receive, headers.get(b"content-length", b""), share)
            except _Refusal as r:
                return await _send_error(send, r.status, r.code, r.message, None, r.headers)
            except _Gone:
                return None
            if (
                self.check_nul
                and scope.get("method") in ("POST", "PUT", "PATCH")
                and b"json" in headers.get(b"content-type", b"")
            ):
                body = b"".join(chunks)
                chunks = [body]
                field = nul_in_json(body)
                del body
                if field is not None:
                    return await _send_error(send, 422, "invalid", f"{field}: NUL bytes are not allowed", field)
            return await self.app(scope, _replay(chunks, receive), send)
        finally:
            self._give_back(share)

    def _passes(self, path: str) -> bool:
        p = self.passthrough
        return p is not None and (path == p or path.startswith(p + "/"))

    async def _read_body(self, receive: Receive, declared: bytes, share: _Share) -> list[bytes]:
        """The whole body as it came, its bytes reserved in `share` as they come; _Refusal or _Gone otherwise."""
        limit = min(self.max_body_bytes, self.max_bodies_bytes)  # one over the whole budget could never fit
        if declared.isdigit():
            if int(declared) > limit:
                raise _too_large(limit)
            if self._held + int(declared) > self.max_bodies_bytes:  # refused before a byte of it is read
                raise self._busy()
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.body_deadline_s
        while True:
            wait_s = min(self.body_idle_s, deadline - time.monotonic())
            try:
                async with asyncio.timeout(max(wait_s, 0.0)):  # no task per read, as wait_for would make
                    message = await receive()
            except TimeoutError:
                raise _Refusal(408, "request_timeout", "the request body did not come in time", _CLOSE) from None
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            if chunk:
                if self._held + len(chunk) > self.max_bodies_bytes:
                    raise self._busy()
                self._held += len(chunk)
                share.bytes += len(chunk)
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks

    def _give_back(self, share: _Share) -> None:
        self._held -= share.bytes
        self._given_back += share.bytes
        share.bytes = 0
        if self._given_back >= COLLECT_AFTER_BODY_BYTES:
            # A request that failed (a 422 before any credential is checked) leaves reference cycles that hold its
            # body (an exception, its traceback, the frames that read it) until the collector runs; a settled heap
            # (server/runtime.settle_heap) runs young collections 50,000 allocations apart: hundreds of such bodies.
            self._given_back = 0
            gc.collect(1)

    def _busy(self) -> _Refusal:
        return _Refusal(
            503, "busy", "the server holds all the request bodies it may at once; retry shortly", _BUSY_HEADERS
        )


def _too_large(limit: int) -> _Refusal:
    return _Refusal(413, "too_large", f"the request body is over {limit} bytes", _CLOSE)


def _replay(chunks: list[bytes], receive: Receive) -> Receive:
    """The body's messages again, as they came (each dropped here once handed over), then the server's own."""
    pending = list(chunks)
    chunks.clear()
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            chunk = pending.pop(0) if pending else b""
            sent = not pending
            return {"type": "http.request", "body": chunk, "more_body": not sent}
        return await receive()  # after the body: wait for the disconnect, as the server's own receive would

    return replay
