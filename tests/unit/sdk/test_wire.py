"""corral.sdk.wire, the CLI's HTTP/1.1 client, against a socket server that answers canned bytes: every way a body
can be framed, keep-alive, a kept-alive connection the server closed, broken answers; and against a real uvicorn
server through RestClient, over http and https."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.sdk.wire import ProtocolError, RemoteDisconnected, WireConnection


class Canned:
    """Answers each request with the next canned answer; `None` closes the connection without answering."""

    def __init__(self, answers: list[bytes | None], tls: ssl.SSLContext | None = None) -> None:
        self.answers, self.tls = answers, tls
        self.requests: list[bytes] = []
        self.connections = 0
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            self.connections += 1
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except ssl.SSLError:  # a client that did not trust us
                    conn.close()
                    continue
            with conn:
                buf = b""
                while self.answers:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            break
                        buf += data
                    if b"\r\n\r\n" not in buf:
                        break
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        ),
                        0,
                    )
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    self.requests.append(head + b"\r\n\r\n" + buf[:length])
                    buf = buf[length:]
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    conn.sendall(answer)
                    if b"Connection: close" in answer:
                        break

    def close(self) -> None:
        self.srv.close()


@pytest.fixture
def canned() -> Iterator[type[Canned]]:
    made: list[Canned] = []

    def make(answers: list[bytes | None], tls: ssl.SSLContext | None = None) -> Canned:
        c = Canned(answers, tls)
        made.append(c)
        return c

    yield make  # type: ignore[misc]
    for c in made:
        c.close()


def _exchange(
    conn: WireConnection, method: str = "GET", body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn.request(method, "/x?y=1", body=body, headers={"Authorization": "Bearer t"})
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def test_each_framing_of_a_body_and_keep_alive(canned) -> None:
    srv = canned(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello",
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nT: x\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n",  # to a HEAD: no body follows
            b"HTTP/1.1 200 OK\r\n\r\nto the end",
        ]
    )
    conn = WireConnection("127.0.0.1", srv.port, 5.0)
    assert _exchange(conn) == (200, {"content-length": "5", "x-a": "1"}, b"hello")
    assert _exchange(conn, "POST", b'{"a": 1}')[::2] == (201, b"abcde")
    assert _exchange(conn, "DELETE")[::2] == (204, b"")
    assert _exchange(conn)[::2] == (200, b"ok")
    assert _exchange(conn, "HEAD")[::2] == (200, b"")
    assert _exchange(conn)[::2] == (200, b"to the end")
    assert conn.sock is None, "a body that runs to the end closes the connection"
    assert srv.connections == 1, "the connection was not kept alive between answers"
    post = srv.requests[1]
    assert post.startswith(b"POST /x?y=1 HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:" in post and b"\r\nContent-Length: 8\r\n" in post and post.endswith(b'{"a": 1}')
    assert b"Authorization: Bearer t" in post
    conn.close()


def test_a_kept_alive_connection_the_server_closed_is_reported_as_such(canned) -> None:
    srv = canned(
        [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", None, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"]
    )
    conn = WireConnection("127.0.0.1", srv.port, 5.0)
    assert _exchange(conn)[2] == b"a"
    with pytest.raises(RemoteDisconnected):
        _exchange(conn)
    conn.close()
    assert _exchange(conn)[2] == b"b"  # opens a new one
    assert srv.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_what_is_not_an_http_answer_is_a_protocol_error(canned, answer: bytes) -> None:
    srv = canned([answer + b"Connection: close"])
    conn = WireConnection("127.0.0.1", srv.port, 5.0)
    with pytest.raises(ProtocolError):
        _exchange(conn)
    conn.close()


def test_a_large_body_arrives_whole_and_a_claimed_length_is_not_trusted(canned) -> None:
    big = bytes(range(256)) * 12_000  # ~3 MiB: read in pieces
    srv = canned(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big,
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\nConnection: close\r\n\r\nshort",
        ]
    )
    conn = WireConnection("127.0.0.1", srv.port, 5.0)
    assert _exchange(conn)[2] == big
    with pytest.raises(RemoteDisconnected):  # ~93 GiB claimed: not allocated, the answer ends short
        _exchange(conn)


def test_an_answer_cut_short_is_a_disconnect(canned) -> None:
    srv = canned([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc"])
    conn = WireConnection("127.0.0.1", srv.port, 5.0)
    with pytest.raises(RemoteDisconnected):
        _exchange(conn)
    assert conn.sock is None


def test_a_silent_server_times_out(canned) -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    try:
        conn = WireConnection("127.0.0.1", srv.getsockname()[1], 0.2)
        with pytest.raises(TimeoutError):
            _exchange(conn)
        conn.close()
    finally:
        srv.close()


def test_over_tls_the_server_certificate_is_checked(canned, tmp_path: Path) -> None:
    from corral.server.ca import CertificateAuthority

    ca = CertificateAuthority.load_or_create(tmp_path)
    cert, key = ca.ensure_server_cert(["127.0.0.1"])
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    srv = canned(
        [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
        server_ctx,
    )
    trusting = ssl.create_default_context(cafile=str(ca.cert_path))
    conn = WireConnection("127.0.0.1", srv.port, 5.0, trusting)
    assert _exchange(conn)[::2] == (200, b"ok")
    conn.close()
    strangers = WireConnection("127.0.0.1", srv.port, 5.0, ssl.create_default_context())  # the system's CAs only
    with pytest.raises(ssl.SSLCertVerificationError):
        _exchange(strangers)


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/x", {"Authorization": "Bearer t\r\nX-Admin: 1"}),
        ("/x", {"X-A\nB": "1"}),
        ("/x HTTP/1.1\r\nHost: evil\r\n\r\nGET /y", {}),
        ("/x", {"A": "b\0c"}),
    ],
)
def test_a_line_break_in_a_header_or_target_is_refused_before_anything_is_sent(canned, target, headers) -> None:
    """A token or path with CR/LF in it would add headers, or a second request, of the caller's making."""
    srv = canned([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    conn = WireConnection("127.0.0.1", srv.port, 5.0)
    with pytest.raises(ValueError, match="invalid character") as refused:
        conn.request("GET", target, headers=headers)
    conn.close()
    assert srv.requests == []
    assert "Bearer" not in str(refused.value), "the error shows the header's value (a token)"


def test_the_cli_says_so_in_one_line_without_the_token(canned) -> None:
    from corral.sdk.errors import CorralSDKError
    from corral.sdk.rest import RestClient

    srv = canned([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"])
    c = RestClient(f"http://127.0.0.1:{srv.port}", "crl_secret\r\nX-Admin: 1")
    with c, pytest.raises(CorralSDKError, match="HTTP header 'Authorization'") as refused:
        c.request("GET", "/api/v1/jobs")
    assert "crl_secret" not in str(refused.value)
    assert srv.requests == []
