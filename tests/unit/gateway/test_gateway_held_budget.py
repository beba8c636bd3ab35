"""The gateway runs in the server's process: the answers it holds whole at one time are bounded in all
(max_held_bytes), whatever a tenant's replicas answer, and each held answer gives its share back on every way out."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conftest import SIZED_BYTES, StaticRoutes, bearer_authorize, make_route, wait_until
from corral.gateway import Endpoint, Gateway
from corral.gateway.app import HELD_SLICE_BYTES


def test_an_answer_that_would_pass_the_held_budget_streams(replicas, gateway_server) -> None:
    rep = replicas(91)
    source = StaticRoutes()
    source.put(make_route("svc", rep.endpoint))
    gs = gateway_server(source, max_held_bytes=SIZED_BYTES)  # room for one /sized answer, not two
    gs.wait_ready(rep)
    whole = b"a" * (SIZED_BYTES // 2) + b"b" * (SIZED_BYTES - SIZED_BYTES // 2)
    first: list[httpx.Response] = []
    held = threading.Thread(target=lambda: first.append(httpx.get(f"{gs.url}/services/svc/sized", timeout=15)))
    held.start()
    try:
        wait_until(lambda: gs.gateway.held_bytes == SIZED_BYTES, 5, "the first answer held")
        # the budget is spent: the second answer goes out as it comes (headers and first half before the rest)
        with httpx.Client(timeout=3) as client, client.stream("GET", f"{gs.url}/services/svc/sized") as r:
            assert r.status_code == 200 and r.headers["content-length"] == str(SIZED_BYTES)
            chunks = r.iter_raw()
            got = next(chunks)
            assert got and "/sized: the rest" not in rep.hits
            assert gs.gateway.held_bytes == SIZED_BYTES
            rep.release.set()
            got += b"".join(chunks)
        assert got == whole
    finally:
        rep.release.set()
        held.join(15)
    assert first and first[0].status_code == 200 and first[0].content == whole
    # given back when the gateway's send of the last byte returns, which may be just after the caller has read it
    wait_until(lambda: gs.gateway.held_bytes == 0, 3, "the held share given back")


def test_the_held_share_is_given_back_when_the_caller_goes_away(replicas, gateway_server) -> None:
    rep = replicas(92)
    source = StaticRoutes()
    source.put(make_route("svc", rep.endpoint))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    try:
        with pytest.raises(httpx.ReadTimeout):  # the caller gives up while the replica holds the rest of its body
            httpx.get(f"{gs.url}/services/svc/sized", timeout=httpx.Timeout(10, read=0.5))
        # at once, not when the replica ends its answer (it waits up to 10 s for `release`)
        wait_until(lambda: gs.gateway.held_bytes == 0, 3, "the held share given back")
        wait_until(lambda: gs.gateway.snapshot()[1].outstanding == 0, 3, "the request ended")
        assert "/sized: the rest" not in rep.hits
    finally:
        rep.release.set()


def test_a_broken_off_answer_gives_its_held_share_back(replicas, gateway_server) -> None:
    good, cut = replicas(94), replicas(95, break_off=True)
    source = StaticRoutes()
    source.put(make_route("svc", good.endpoint, cut.endpoint))
    gs = gateway_server(source, probe_interval_s=30.0)
    gs.wait_ready(good, cut)
    with httpx.Client() as client:
        assert [client.get(f"{gs.url}/services/svc/x").status_code for _ in range(4)] == [200] * 4
        assert any(client.post(f"{gs.url}/services/svc/x", content=b"{}").status_code == 502 for _ in range(4))
    assert cut.hits
    wait_until(lambda: gs.gateway.held_bytes == 0, 3, "the held shares given back")


def test_a_held_answer_keeps_its_share_until_a_slow_caller_took_it_in_slices(replicas) -> None:
    """A caller who does not read: the server's send waits for it before each slice, so what it has not taken is
    still the gateway's, counted in the budget (one send of the whole would sit in the connection's buffer)."""
    rep = replicas(93)
    source = StaticRoutes()
    source.put(make_route("svc", rep.endpoint))
    payload = "x" * 200_000

    async def main() -> None:
        gw = Gateway(source, bearer_authorize, refresh_s=0.05, probe_interval_s=0.1)
        await gw.start()
        try:
            while not gw.prober.ready(93, 1):
                await asyncio.sleep(0.02)
            sent: list[dict[str, Any]] = []
            taken = asyncio.Event()
            messages = [{"type": "http.request", "body": payload.encode(), "more_body": False}]

            async def receive() -> dict[str, Any]:
                if messages:
                    return messages.pop()
                await asyncio.Event().wait()  # the caller stays
                raise AssertionError

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)
                if len(sent) == 3:
                    await taken.wait()  # a caller slow to read the second slice

            scope = {
                "type": "http",
                "method": "POST",
                "path": "/services/svc/big",
                "raw_path": b"/services/svc/big",
                "query_string": b"",
                "headers": [(b"host", b"gw")],
                "path_params": {"name": "svc", "path": "big"},
                "client": ("127.0.0.1", 5000),
                "scheme": "http",
            }
            task = asyncio.create_task(gw.handle_http(scope, receive, send))
            while len(sent) < 3:
                assert not task.done(), sent[:1]
                await asyncio.sleep(0.01)
            length = int(dict(sent[0]["headers"])[b"content-length"])
            assert length > 200_000 and gw.held_bytes == length
            taken.set()
            await asyncio.wait_for(task, 5)
            assert gw.held_bytes == 0
            bodies = [m["body"] for m in sent[1:]]
            assert len(bodies) > 1 and all(len(b) <= HELD_SLICE_BYTES for b in bodies)
            assert [m["more_body"] for m in sent[1:]] == [True] * (len(bodies) - 1) + [False]
            assert json.loads(b"".join(bodies))["body"] == payload
        finally:
            await gw.stop()

    asyncio.run(main())


class LyingReplica:
    """A raw HTTP/1.1 server: /healthz answers ok; any other path answers `Content-Length: 1` and a chunked body
    (which is how it is framed) of CHUNKS chunks of 64 KiB, the first at once, the others once `release` is set."""

    CHUNKS = 64  # 4 MiB: four times what the gateway holds of one answer

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.release = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    got = conn.recv(65536)
                    if not got:
                        return
                    data += got
                head, data = data.split(b"\r\n\r\n", 1)
                if head.split(b" ")[1] == b"/healthz":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
                for i in range(self.CHUNKS):
                    if i == 1:
                        self.release.wait(10)
                    conn.sendall(b"10000\r\n" + bytes([65 + i % 26]) * 0x10000 + b"\r\n")
                conn.sendall(b"0\r\n\r\n")
                return

    def close(self) -> None:
        self.release.set()
        self.sock.close()


@pytest.fixture
def liar() -> Iterator[LyingReplica]:
    rep = LyingReplica()
    yield rep
    rep.close()


def test_an_answer_framed_by_chunks_is_streamed_whatever_content_length_it_claims(liar, gateway_server) -> None:
    """Its body is as long as its chunks say (httpcore reads it so): held for its Content-Length of 1, the gateway
    read gigabytes into the server's memory if the replica sent them."""
    source = StaticRoutes()
    source.put(make_route("svc", Endpoint(96, 1, "127.0.0.1", liar.port, revision=1)))
    gs = gateway_server(source)
    wait_until(lambda: gs.gateway.prober.ready(96, 1), what="the replica ready")
    with httpx.Client(timeout=5) as client, client.stream("GET", f"{gs.url}/services/svc/x") as r:
        assert r.status_code == 200 and "content-length" not in r.headers  # the caller's body is chunked too
        chunks = r.iter_raw()
        got = next(chunks)  # before the replica sent the rest: not held
        assert got and gs.gateway.held_bytes == 0
        liar.release.set()
        got += b"".join(chunks)
    assert len(got) == LyingReplica.CHUNKS * 0x10000
