"""The job proxy's WebSocket relay in one process: Starlette's test client on one side, a real `websockets`
server on the other (the whole route, with real server, agent and job, is in tests/e2e/test_proxy_websocket.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from corral.server.routers.proxy import _relay, _same_origin, _wire_code


Closes = list[tuple[int | None, str | None]]


@pytest.fixture
def echo() -> Iterator[tuple[Server, Closes]]:
    """A WebSocket echo server on a free loopback port, and the close codes its clients sent."""
    closes: Closes = []

    def handler(ws: ServerConnection) -> None:
        try:
            for message in ws:
                ws.send(message)
        except ConnectionClosed:
            pass
        closes.append((ws.close_code, ws.close_reason))

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server, closes
        server.shutdown()
        thread.join(5)


def _app(port: int, expires_in_s: float | None) -> Starlette:
    async def endpoint(websocket: WebSocket) -> None:
        upstream = await connect(f"ws://127.0.0.1:{port}/", proxy=None)
        await websocket.accept()
        expires = None if expires_in_s is None else datetime.now(UTC) + timedelta(seconds=expires_in_s)
        await _relay(websocket, upstream, expires)

    return Starlette(routes=[WebSocketRoute("/ws", endpoint)])


def test_relay_passes_frames_and_the_clients_close_code(echo: tuple[Server, Closes]) -> None:
    server, closes = echo
    with TestClient(_app(server.socket.getsockname()[1], None)) as client, client.websocket_connect("/ws") as ws:
        ws.send_text("text")
        assert ws.receive_text() == "text"
        ws.send_bytes(b"\x00bytes")
        assert ws.receive_bytes() == b"\x00bytes"
        ws.close(4005, "done here")
        # Wait inside the block: leaving it cancels the app (the test client's doing, not uvicorn's), which
        # could cut the relay off before it passed the close on.
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while not closes and datetime.now(UTC) < deadline:
            threading.Event().wait(0.05)
    assert closes == [(4005, "done here")]


def test_relay_closes_when_the_credential_expires(echo: tuple[Server, Closes]) -> None:
    server, closes = echo
    with TestClient(_app(server.socket.getsockname()[1], 1.0)) as client, client.websocket_connect("/ws") as ws:
        ws.send_text("still here")
        assert ws.receive_text() == "still here"
        with pytest.raises(WebSocketDisconnect) as e:
            ws.receive_text()  # nothing more comes: the session ends after a second
        assert (e.value.code, e.value.reason) == (1008, "your Corral session expired")
    assert closes == [(1001, "the Corral session expired")]


@pytest.mark.parametrize(("origin", "host", "same"), [
    ("http://corral.example:8600", "corral.example:8600", True),
    ("https://Corral.Example", "corral.example:443", True),
    ("http://corral.example", "corral.example", True),
    ("http://127.0.0.1:8600", "127.0.0.1:8600", True),
    ("http://[::1]:8600", "[::1]:8600", True),
    ("https://corral.example", "corral.example", True),  # Host without a port: TLS ended in front, on 443
    ("https://corral.example", "corral.example:80", False),
    ("http://evil.example:8600", "corral.example:8600", False),
    ("http://corral.example.evil.example", "corral.example", False),
    ("http://corral.example:8601", "corral.example:8600", False),
    ("null", "corral.example", False),
    ("", "corral.example", False),
    ("http://corral.example:99999", "corral.example:99999", False),
    ("file://corral.example", "corral.example", False),
])
def test_same_origin(origin: str, host: str, same: bool) -> None:
    assert _same_origin(origin, host) is same


def test_close_codes_that_may_not_be_sent_are_replaced() -> None:
    assert _wire_code(4001, "bye", 1011, "why") == (4001, "bye")
    assert _wire_code(1000, "", 1011, "why") == (1000, "")
    assert _wire_code(1005, "", 1011, "why") == (1000, "")  # a close frame without a code
    assert _wire_code(1006, "", 1011, "dropped") == (1011, "dropped")
    assert _wire_code(None, "", 1001, "gone") == (1001, "gone")
    assert _wire_code(1015, "", 1011, "tls") == (1011, "tls")
    code, reason = _wire_code(1000, "é" * 100, 1011, "why")
    assert code == 1000 and len(reason.encode()) <= 123
