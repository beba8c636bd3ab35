"""The input guard's NUL detection on raw requests: where a NUL is, and what only looks like one; and the bodies it
leaves to the services' gateway (mounted on the API port), which bounds them itself."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from corral.server.inputs import InputGuard, nul_in_json, nul_in_path_or_query


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(b'{"command": ["a\\u0000"]}', "command.0", id="in-a-list"),
        pytest.param(b'{"env": {"A": "x\\u0000y"}}', "env.A", id="in-a-value"),
        pytest.param(b'{"env": {"A\\u0000": "x"}}', "env", id="in-a-key"),
        pytest.param(b'"\\u0000"', "body", id="the-whole-document"),
        pytest.param(b'{"a": "\\\\\\u0000"}', "a", id="after-an-escaped-backslash"),
        pytest.param(b'{"a": "\\\\u0000"}', None, id="an-escaped-backslash-then-text"),
        pytest.param(b'{"a": "u0000 \\\\ 0000"}', None, id="no-escape-at-all"),
        pytest.param(b'{"a": "\\u0000', None, id="not-json-left-to-the-route"),
    ],
)
def test_nul_in_json(body: bytes, field: str | None) -> None:
    assert nul_in_json(body) == field


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        pytest.param("/api/v1/nodes/a\x00b", b"", "path", id="path"),
        pytest.param("/api/v1/jobs", b"node=a%00b&limit=3", "node", id="query-value"),
        pytest.param("/api/v1/jobs", b"no%00de=x", "node", id="query-name"),
        pytest.param("/api/v1/jobs", b"node=a%2500b", None, id="an-escaped-percent"),
    ],
)
def test_nul_in_path_or_query(path: str, query: bytes, field: str | None) -> None:
    assert nul_in_path_or_query({"path": path, "query_string": query}) == field


def _post(guard: InputGuard, path: str, chunks: list[bytes]) -> tuple[list[dict[str, Any]], list[int]]:
    """POST `chunks` (a JSON body) through the guard: (what the guard answered, the chunk sizes the app read)."""
    sent: list[dict[str, Any]] = []
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
    }
    read: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            read.append(len(message.get("body", b"")))
            if not message.get("more_body", False):
                return

    guard.app = app
    asyncio.run(guard(scope, receive, send))
    return sent, read


def test_the_gateways_bodies_pass_unread_and_corrals_are_still_bounded() -> None:
    guard = InputGuard(lambda *a: None, max_body_bytes=100, passthrough="/services")  # type: ignore[arg-type]
    body = [b"[" + b"1," * 200, b"1]"]
    # under /services the app reads the body itself, as it comes (the gateway bounds it), nothing refused
    sent, read = _post(guard, "/services/svc/upload", body)
    assert sent == [] and read == [len(body[0]), len(body[1])]
    # Corral's own routes, and a path that only begins like the prefix, are read and bounded by the guard
    for path in ("/api/v1/jobs", "/servicesx/upload"):
        sent, read = _post(guard, path, body)
        assert read == [] and sent[0]["status"] == 413, path
    # NUL bytes in the path are still refused everywhere
    sent, read = _post(guard, "/services/svc/a\x00b", [b"{}"])
    assert read == [] and sent[0]["status"] == 422
    # without a passthrough (the gateway on a port of its own), /services is bounded like the rest
    sent, _ = _post(InputGuard(lambda *a: None, max_body_bytes=100), "/services/svc/upload", body)  # type: ignore[arg-type]
    assert sent[0]["status"] == 413
