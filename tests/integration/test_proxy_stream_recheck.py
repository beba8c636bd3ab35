"""A long response streamed through the job proxy ends when the caller's access does (a revoked token, a
logout), as an open WebSocket does: the app over a real SQLite store, the job's web UI a real HTTP server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

CHUNK_EVERY_S = 0.05
STREAM_FOR_S = 30.0  # the whole stream; a test that waits for it to end on its own fails on the join below


class _Ticker(BaseHTTPRequestHandler):
    """A log tail: one line every CHUNK_EVERY_S for STREAM_FOR_S, chunked; counts what it got out."""

    protocol_version = "HTTP/1.1"
    sent: list[int]
    written: list[int]  # one entry (the stream's id) per tick written so far
    stop: threading.Event

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = 0
        try:
            while n * CHUNK_EVERY_S < STREAM_FOR_S and not self.stop.is_set():
                line = f"tick {n}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                self.written.append(id(self))
                n += 1
                time.sleep(CHUNK_EVERY_S)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the proxy hung up
            pass
        self.sent.append(n)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Ticks:
    """The ticker's port, how many ticks each stream got out, and the test's reader threads."""

    port: int
    sent: list[int]
    readers: list[threading.Thread] = field(default_factory=list)
    written: list[int] = field(default_factory=list)


@pytest.fixture
def streamed(proxy_app: Callable[[int], Any]) -> Iterator[tuple[Any, Ticks]]:
    """The app (conftest's ProxyApp) with a RUNNING job whose web UI is the ticker."""
    stop = threading.Event()
    ticks = Ticks(0, [])
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Ticker", (_Ticker,), {"sent": ticks.sent, "stop": stop, "written": ticks.written})
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ticks.port = server.server_address[1]
    yield proxy_app(ticks.port), ticks
    stop.set()  # streams still open end, and their readers with them, before the store closes
    for reader in ticks.readers:
        reader.join(10)
    server.shutdown()


def _read_in_background(s: Any, ticks: Ticks, headers: dict[str, str]) -> tuple[threading.Thread, list[str]]:
    body: list[str] = []

    def read() -> None:
        r = s.ui.get(f"/proxy/jobs/{s.job}/log", headers=headers)  # the body comes once the app has finished
        body.append(r.text)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    ticks.readers.append(thread)
    return thread, body


def _wait_for_ticks(ticks: Ticks, thread: threading.Thread) -> None:
    """Poll until every reader's stream has had at least two ticks written (a deadline, no fixed sleep)."""
    deadline = time.monotonic() + 10
    while sum(ticks.written.count(s) >= 2 for s in set(ticks.written)) < len(ticks.readers):
        assert time.monotonic() < deadline, f"the streams never got going: {len(ticks.written)} ticks"
        time.sleep(0.02)
    assert thread.is_alive() and not ticks.sent, "the stream ended before access was withdrawn"


def test_a_revoked_token_ends_a_streaming_response(streamed: tuple[Any, Ticks]) -> None:
    s, ticks = streamed
    token_id, secret = s.new_token(name="tail")
    thread, body = _read_in_background(s, ticks, {"Authorization": f"Bearer {secret}"})
    _wait_for_ticks(ticks, thread)
    assert s.api.delete(f"/api/v1/tokens/{token_id}", headers=s.admin).status_code == 204
    thread.join(15)
    assert not thread.is_alive(), "the response went on after the token was revoked"
    assert body[0].startswith("tick 0\ntick 1\n")
    deadline = time.monotonic() + 10
    while not ticks.sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ticks.sent and ticks.sent[0] * CHUNK_EVERY_S < STREAM_FOR_S / 2  # the job's side was hung up on too


def test_a_logout_ends_a_streaming_response_and_others_go_on(streamed: tuple[Any, Ticks]) -> None:
    s, ticks = streamed
    cookie, csrf = s.login()
    thread, _ = _read_in_background(s, ticks, cookie)
    other, _ = _read_in_background(s, ticks, s.admin)
    _wait_for_ticks(ticks, thread)
    assert s.api.post("/web/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
    thread.join(15)
    assert not thread.is_alive(), "the response went on after the logout"
    assert other.is_alive(), "a response on another, valid token was cut too"


def test_a_session_opened_with_a_token_ends_its_stream_when_that_token_is_revoked(streamed: tuple[Any, Ticks]) -> None:
    """The stream recheck follows the session rule: revoking the API token a web session was opened with ends
    the session, and the session's streams with it (the old code let the session live on)."""
    s, ticks = streamed
    token_id, secret = s.new_token(name="laptop")
    assert s.api.post("/web/login", json={"token": secret}).status_code == 200
    thread, _ = _read_in_background(s, ticks, {"Cookie": f"corral_session={s.api.cookies['corral_session']}"})
    _wait_for_ticks(ticks, thread)
    assert s.api.delete(f"/api/v1/tokens/{token_id}", headers=s.admin).status_code == 204
    thread.join(15)
    assert not thread.is_alive(), "the session's stream went on after the token it came from was revoked"
