"""The input guard's NUL detection on raw requests: where a NUL is, and what only looks like one; the bodies it
leaves to the services' gateway (mounted on the API port), which bounds them itself; and the bounds it puts on every
other body before any route (authentication included) runs: each (413, chunked too, whatever the content type), all
held at once (503 busy; only bytes received count, given back when the request ends) and in time (408)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.inputs import InputGuard, nul_in_json, nul_in_path_or_query
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store


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


# ---- bodies bounded before any route runs: each, all at once, in time (real HTTP, uvicorn on a loopback port) ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until(check: Callable[[], bool], timeout_s: float = 10.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class _Served:
    """An ASGI app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: Any, lifespan: str = "off") -> None:
        self.port = _free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan=lifespan)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        _wait_until(lambda: self.server.started, 30, f"uvicorn on port {self.port}")
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class _Toy:
    """What the guard lets through: /echo answers the body's length; /hold answers once `release` is set. `seen`
    lists the paths whose body the app got."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.release = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.seen.append(scope["path"])
        if scope["path"] == "/hold":
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        answer = json.dumps({"size": len(body)}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture
def guarded() -> Iterator[Callable[..., tuple[InputGuard, _Toy, _Served]]]:
    started: list[tuple[_Toy, _Served]] = []

    def start(**kw: Any) -> tuple[InputGuard, _Toy, _Served]:
        toy = _Toy()
        guard = InputGuard(toy, **kw)
        served = _Served(guard)
        started.append((toy, served))
        return guard, toy, served

    yield start
    for toy, served in started:
        toy.release.set()
        served.stop()


def _refused(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.json() == {"error": {"code": code, "message": r.json()["error"]["message"], "field": None}}
    assert r.headers["connection"] == "close"


def _raw_post(port: int, path: str, head: str, sent: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + sent)
    return sock


def _answer(sock: socket.socket) -> bytes:
    """What comes back until the server closes the connection (a reset once the answer came: the server closed with
    some of the body unread)."""
    sock.settimeout(5)
    answer = b""
    while True:
        try:
            got = sock.recv(4096)
        except ConnectionResetError:
            if not answer:
                raise
            return answer
        if not got:
            return answer
        answer += got


def test_a_chunked_body_of_any_content_type_is_bounded_and_never_reaches_the_app(guarded) -> None:
    guard, toy, served = guarded(max_body_bytes=1_000)
    for ctype in ("text/plain", "application/octet-stream", "application/json"):
        r = httpx.post(
            f"{served.url}/api/v1/jobs", content=iter([b"x" * 600, b"x" * 600]), headers={"content-type": ctype}
        )
        _refused(r, 413, "too_large")
        assert "1000 bytes" in r.json()["error"]["message"]
    # a chunked body within the bound goes through whole, as it came
    r = httpx.post(f"{served.url}/echo", content=iter([b"x" * 500, b"y" * 500]), headers={"content-type": "text/plain"})
    assert r.status_code == 200 and r.json() == {"size": 1_000}
    assert toy.seen == ["/echo"]
    _wait_until(lambda: guard.held_bytes == 0, 5, "the bytes given back")  # once the app returned, after its answer


def test_bodies_held_at_once_are_bounded_in_all_and_given_back(guarded) -> None:
    guard, toy, served = guarded(max_body_bytes=8_000, max_bodies_bytes=10_000)
    held: list[httpx.Response] = []
    first = threading.Thread(target=lambda: held.append(httpx.post(f"{served.url}/hold", content=b"h" * 6_000)))
    first.start()
    try:
        _wait_until(lambda: "/hold" in toy.seen, 5, "the first body held")
        assert guard.held_bytes == 6_000
        # a second body that fits alone but not beside the first: busy, whether its length is declared or not
        _refused(httpx.post(f"{served.url}/echo", content=b"s" * 6_000), 503, "busy")
        r = httpx.post(f"{served.url}/echo", content=iter([b"s" * 3_000, b"s" * 3_000]))
        _refused(r, 503, "busy")
        assert r.headers["retry-after"] == "1"
        assert toy.seen == ["/hold"]
        _wait_until(lambda: guard.held_bytes == 6_000, 5, "the refused bodies' bytes given back")
    finally:
        toy.release.set()
        first.join(10)
    assert held and held[0].status_code == 200 and held[0].json() == {"size": 6_000}
    _wait_until(lambda: guard.held_bytes == 0, 5, "the held body given back")
    # the budget is whole again: a third body that would not have fit beside the first goes through
    r = httpx.post(f"{served.url}/echo", content=b"t" * 8_000)
    assert r.status_code == 200 and r.json() == {"size": 8_000}
    _wait_until(lambda: guard.held_bytes == 0, 5, "every body given back")


def test_a_declared_length_reserves_nothing_only_bytes_received_count(guarded) -> None:
    guard, toy, served = guarded(max_body_bytes=10_000, max_bodies_bytes=10_000)
    # declares the whole budget, sends 1,000 bytes, then nothing
    sock = _raw_post(served.port, "/echo", "Content-Length: 9000\r\n", b"p" * 1_000)
    try:
        _wait_until(lambda: guard.held_bytes == 1_000, 5, "the bytes received counted")
        r = httpx.post(f"{served.url}/echo", content=b"y" * 8_000)  # fits beside what was received
        assert r.status_code == 200 and r.json() == {"size": 8_000}
        _refused(httpx.post(f"{served.url}/echo", content=b"y" * 9_500), 503, "busy")  # over what is left: at once
    finally:
        sock.close()
    _wait_until(lambda: guard.held_bytes == 0, 5, "the bytes given back when the caller went away")
    assert toy.seen == ["/echo"]


def test_a_body_that_stops_coming_is_answered_408_and_given_back(guarded) -> None:
    guard, toy, served = guarded(body_idle_s=0.3)
    sock = _raw_post(served.port, "/echo", "Content-Length: 10000\r\nContent-Type: text/plain\r\n", b"p" * 1_000)
    try:
        answer = _answer(sock)  # the guard closes the connection: it does not wait for the rest
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"connection: close" in answer.lower() and b'"code": "request_timeout"' in answer
    _wait_until(lambda: guard.held_bytes == 0, 5, "the bytes given back")
    assert toy.seen == []


def test_a_body_must_be_whole_within_its_deadline_however_it_trickles(guarded) -> None:
    guard, toy, served = guarded(body_idle_s=5.0, body_deadline_s=0.5)
    sock = _raw_post(served.port, "/echo", "Transfer-Encoding: chunked\r\n")
    try:
        sock.settimeout(0.1)
        answer = b""
        for _ in range(50):  # a byte every 0.1 s: never idle for body_idle_s, never whole
            try:
                sock.sendall(b"1\r\nt\r\n")
                answer += sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if answer:
                break
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    _wait_until(lambda: guard.held_bytes == 0, 5, "the bytes given back")
    assert toy.seen == []


@pytest.fixture
def real_app(tmp_path: Path) -> Iterator[tuple[_Served, _Served, SqlStore]]:
    """The real app (SQLite), its API port and its jobs' web UIs' port, each under uvicorn."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url)
    ensure_credentials(store, tmp_path)
    app = create_app(Settings(data_dir=tmp_path, database_url=url, gateway_port=0, port=18600), store)
    api = _Served(app, lifespan="on")
    ui = _Served(app.state.job_ui_app)
    try:
        yield api, ui, store
    finally:
        ui.stop()
        api.stop()


def test_an_unauthenticated_big_chunked_body_is_refused_before_any_route_runs(real_app) -> None:
    api, ui, store = real_app
    # 32 MiB of text/plain, chunked, no credential: FastAPI would read it whole before it checks the credential
    total, piece = 32 * 1024 * 1024, b"a" * 65_536
    sock = _raw_post(api.port, "/api/v1/jobs", "Transfer-Encoding: chunked\r\nContent-Type: text/plain\r\n")
    sent = 0
    try:
        try:
            while sent < total:
                sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                sent += len(piece)
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server closed the connection once the body passed the bound
        answer = _answer(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"code": "too_large"' in answer and b"connection: close" in answer.lower()
    assert sent < total  # refused as it came, not once whole
    assert store.list_jobs() == []
    # the jobs' web UIs' port bounds the proxy's bodies too (a declared length past its bound: refused unread)
    sock = _raw_post(ui.port, "/proxy/jobs/1/upload", f"Content-Length: {64 * 1024 * 1024 + 1}\r\n")
    try:
        answer = _answer(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
