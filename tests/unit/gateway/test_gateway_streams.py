"""Streams through the gateway: server-sent events event by event, chunked bodies, WebSockets both ways."""

from __future__ import annotations

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from conftest import SIZED_BYTES, TOKEN, StaticRoutes, make_route


def test_server_sent_events_arrive_one_by_one(replicas, gateway_server) -> None:
    rep = replicas(71)
    source = StaticRoutes()
    source.put(make_route("llm", rep.endpoint, service_id=3))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    with httpx.Client(timeout=10) as client, client.stream("GET", f"{gs.url}/services/llm/sse") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        assert next(lines) == "data: one"  # the replica holds the second event until `release`
        rep.release.set()
        rest = [line for line in lines if line]
    assert rest == ["data: two"]
    assert sum(gs.gateway.snapshot()[3].latency_ms) == 1


def test_chunked_body_passes_through(replicas, gateway_server) -> None:
    rep = replicas(72)
    source = StaticRoutes()
    source.put(make_route("svc", rep.endpoint))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    r = httpx.get(f"{gs.url}/services/svc/chunked")
    assert r.status_code == 200 and r.text == "part0;part1;part2;part3;part4;"
    assert r.headers.get("transfer-encoding") == "chunked" and "content-length" not in r.headers


def test_an_answer_longer_than_the_gateway_holds_streams(replicas, gateway_server) -> None:
    rep = replicas(73)
    source = StaticRoutes()
    source.put(make_route("svc", rep.endpoint))
    gs = gateway_server(source, max_held_answer_bytes=SIZED_BYTES - 1)
    gs.wait_ready(rep)
    with httpx.Client(timeout=10) as client, client.stream("GET", f"{gs.url}/services/svc/sized") as r:
        assert r.status_code == 200 and r.headers["content-length"] == str(SIZED_BYTES)
        chunks = r.iter_raw()
        first = next(chunks)  # the replica holds the rest of its body until `release`
        assert first and "/sized: the rest" not in rep.hits
        rep.release.set()
        body = first + b"".join(chunks)
    assert body == b"a" * (SIZED_BYTES // 2) + b"b" * (SIZED_BYTES - SIZED_BYTES // 2)


def test_websocket_echo_and_close_code(replicas, gateway_server) -> None:
    rep = replicas(73)
    source = StaticRoutes()
    source.put(make_route("ws", rep.endpoint, public=False))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    url = f"ws://127.0.0.1:{gs.server.port}/services/ws/ws"
    with connect(url, subprotocols=["chat"], additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "chat"
        ws.send("hi")
        assert ws.recv(timeout=5) == "73:hi"
        ws.send(b"\x00\x01")
        assert ws.recv(timeout=5) == b"\x00\x01"
        ws.send("close-please")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "asked to")


def test_websocket_without_a_token_is_refused_before_the_handshake(replicas, gateway_server) -> None:
    rep = replicas(74)
    source = StaticRoutes()
    source.put(make_route("ws", rep.endpoint, public=False))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{gs.server.port}/services/ws/ws")
    assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as missing:
        connect(f"ws://127.0.0.1:{gs.server.port}/services/none/ws")
    assert missing.value.response.status_code == 404
