"""The job proxy's WebSocket relay in one process: Starlette's test client on one side, a real `websockets`
server on the other (the whole route, with real server, agent and job, is in tests/e2e/test_proxy_websocket.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient, WebSocketTestSession
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from corral.gateway.wsrelay import wire_code as _wire_code
from corral.server.routers import proxy
from corral.server.routers.proxy import Recheck, _relay, _same_origin

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


def _app(port: int, expires_in_s: float | None, recheck: Recheck | None = None) -> Starlette:
    async def endpoint(websocket: WebSocket) -> None:
        upstream = await connect(f"ws://127.0.0.1:{port}/", proxy=None)
        await websocket.accept()
        expires = None if expires_in_s is None else datetime.now(UTC) + timedelta(seconds=expires_in_s)
        await _relay(websocket, upstream, expires, recheck)

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
        # The upstream close is sent as the relay ends; wait for the echo server to see it inside the block
        # (leaving it cancels the app, which on a loaded machine came before the close was recorded: CI flake).
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while not closes and datetime.now(UTC) < deadline:
            threading.Event().wait(0.05)
    assert closes == [(1001, "the Corral session expired")]


def _wait_closed(ws: WebSocketTestSession, timeout_s: float = 15.0) -> tuple[int, str]:
    """Echo frames through the socket until the proxy closes it: its close code and reason."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ws.send_text("still open?")
        message = ws.receive()
        if message["type"] == "websocket.close":
            return int(message.get("code", 1000)), str(message.get("reason", ""))
        assert message["text"] == "still open?"
        time.sleep(0.05)
    raise AssertionError(f"the socket is still open after {timeout_s} s")


def _wait_for(closes: Closes, timeout_s: float = 10.0) -> Closes:
    deadline = time.monotonic() + timeout_s
    while not closes and time.monotonic() < deadline:
        time.sleep(0.05)
    return closes


def test_relay_rechecks_and_rides_out_a_recheck_that_fails(
    echo: tuple[Server, Closes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that does not answer for a while does not end the socket; the next answer that withdraws the
    caller's access does."""
    server, closes = echo
    monkeypatch.setattr(proxy, "ACCESS_RECHECK_S", 0.05)
    calls: list[int] = []

    async def recheck() -> str | None:
        calls.append(1)
        if len(calls) <= 3:
            raise RuntimeError("database is locked")
        return "access withdrawn" if len(calls) > 5 else None

    with (
        TestClient(_app(server.socket.getsockname()[1], None, recheck)) as client,
        client.websocket_connect("/ws") as ws,
    ):
        assert _wait_closed(ws) == (1008, "access withdrawn")
        assert _wait_for(closes) == [(1001, "the Corral session ended")]
    assert len(calls) == 6


@pytest.fixture
def proxied(proxy_app: Callable[[int], Any], echo: tuple[Server, Closes]) -> Any:
    """The app (conftest's ProxyApp) with a RUNNING job whose web UI is the echo server."""
    return proxy_app(echo[0].socket.getsockname()[1])


def test_a_revoked_token_closes_the_sockets_it_opened(proxied: Any, echo: tuple[Server, Closes]) -> None:
    p, (_, closes) = proxied, echo
    token_id, secret = p.new_token(name="notebook")
    path = f"/proxy/jobs/{p.job}/ws"
    with (
        p.ui.websocket_connect(path, headers={"Authorization": f"Bearer {secret}"}) as ws,
        p.ui.websocket_connect(path, headers=p.admin) as other,
    ):
        ws.send_text("hello")
        assert ws.receive_text() == "hello"
        assert p.api.delete(f"/api/v1/tokens/{token_id}", headers=p.admin).status_code == 204
        assert _wait_closed(ws) == (1008, "your Corral session ended")
        assert _wait_for(closes) == [(1001, "the Corral session ended")]
        other.send_text("another token's socket stays open")
        assert other.receive_text() == "another token's socket stays open"


def test_a_logout_closes_the_sessions_sockets(proxied: Any, echo: tuple[Server, Closes]) -> None:
    p, (_, closes) = proxied, echo
    cookie, csrf = p.login()
    with p.ui.websocket_connect(f"/proxy/jobs/{p.job}/ws", headers={**cookie, "Origin": "http://testserver"}) as ws:
        ws.send_text("hello")
        assert ws.receive_text() == "hello"
        assert p.api.post("/web/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
        assert _wait_closed(ws) == (1008, "your Corral session ended")
    assert _wait_for(closes) == [(1001, "the Corral session ended")]


def test_a_caller_who_may_no_longer_see_the_job_is_closed_out(proxied: Any, echo: tuple[Server, Closes]) -> None:
    p, (_, closes) = proxied, echo
    assert p.api.post("/api/v1/tenants", json={"name": "vision"}, headers=p.admin).status_code == 201
    r = p.api.post("/api/v1/users", json={"name": "bob", "role": "admin", "tenant": "vision"}, headers=p.admin)
    assert r.status_code == 201, r.text
    _, secret = p.new_token(user="bob")
    with p.ui.websocket_connect(f"/proxy/jobs/{p.job}/ws", headers={"Authorization": f"Bearer {secret}"}) as ws:
        ws.send_text("an admin sees every tenant's jobs")
        assert ws.receive_text() == "an admin sees every tenant's jobs"
        r = p.api.patch("/api/v1/users/bob", json={"role": "member"}, headers=p.admin)
        assert r.status_code == 200, r.text
        assert _wait_closed(ws) == (1008, f"access to job {p.job} was withdrawn")
    assert _wait_for(closes) == [(1001, "the Corral session ended")]


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
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
    ],
)
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
