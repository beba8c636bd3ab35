"""HTTP/1.1 over one kept-alive socket, the little of it the CLI's light client (corral.sdk.rest) needs: a request
with a body of known length, an answer of `Content-Length`, chunked, or read-to-close, with its headers.

Why not the standard library's http.client: importing it costs ~17 ms (it loads email.parser, email.message and ssl
for every call, plain http:// included), a quarter of a whole `corral submit` (issue 13: a loop of submissions from
the shell). A plain http:// connection is a `_socket.socket` (the socket module's own base: `import socket` loads
enum, selectors and array, ~3 ms); an https:// one loads socket and ssl. Servers here are Corral's own
(uvicorn with h11); nothing in HTTP/1.1 that they send is left out (no 1xx answers but `100 Continue`, which we
never ask for).
"""

from __future__ import annotations

import _socket
import io

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing
if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable

MAX_LINE = 65536  # a status or header line longer than this is not an answer of ours
MAX_HEADERS = 100
_BREAKS = ("\r", "\n", "\0")  # would end a line early: what follows would be a header or request of its own
READ_CHUNK = 1 << 20  # a body is read in pieces: a length the server claims is not allocated before it arrives


class ProtocolError(Exception):
    """The peer's bytes are not an HTTP/1.1 answer."""


class RemoteDisconnected(ConnectionResetError):
    """The server closed the connection before answering (a kept-alive connection it had closed meanwhile)."""


class _SocketReader(io.RawIOBase):
    """A socket's receiving side as a raw stream, for io.BufferedReader (socket.socket.makefile's SocketIO)."""

    def __init__(self, sock: _socket.socket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        return self._sock.recv_into(buffer)


def open_plain(host: str | bytes, port: int, timeout: float) -> _socket.socket:
    """socket.create_connection((host, port), timeout) on `_socket`: each address getaddrinfo gives, in order,
    until one connects; the last one's error when none does."""
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = None
        try:  # a family this host cannot open (IPv6 switched off: localhost's ::1) is skipped, as by socket's
            sock = _socket.socket(family, kind, proto)
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as e:
            if sock is not None:
                sock.close()
            error = e
            continue
        return sock
    raise error or OSError("getaddrinfo returned no address")


class WireResponse:
    __slots__ = ("_body", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status, self.reason, self.headers, self._body = status, reason, headers, body

    def getheaders(self) -> list[tuple[str, str]]:
        return self.headers

    def read(self) -> bytes:
        return self._body


class WireConnection:
    """One connection to host:port (TLS with `context`), opened on first use and kept alive between requests, as
    http.client.HTTPConnection is used by corral.sdk.rest: request(), then getresponse() (whole body read)."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext | None = None) -> None:
        self.host, self.port, self.timeout, self.context = host, port, timeout, context
        self.sock: _socket.socket | None = None
        self._rfile: io.BufferedReader | None = None
        self._method = ""
        default = 443 if context is not None else 80
        self._host_header = host if port == default else f"{host}:{port}"
        if ":" in host and not host.startswith("["):  # an IPv6 literal
            self._host_header = f"[{host}]" if port == default else f"[{host}]:{port}"

    def connect(self) -> None:
        # An ASCII host goes as bytes: a str host makes getaddrinfo load the idna codec (~2 ms of every CLI call).
        host: str | bytes = self.host.encode("ascii") if self.host.isascii() else self.host
        if self.context is None:
            sock = open_plain(host, self.port, self.timeout)
            try:
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            self._rfile = io.BufferedReader(_SocketReader(sock))
            return
        import socket

        tls = socket.create_connection((host, self.port), self.timeout)  # type: ignore[arg-type]  # getaddrinfo takes bytes
        try:
            tls.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.context.wrap_socket(tls, server_hostname=self.host)
        except BaseException:
            tls.close()
            raise
        self.sock = tls
        self._rfile = tls.makefile("rb")

    def close(self) -> None:
        sock, rfile = self.sock, self._rfile
        self.sock = self._rfile = None
        if rfile is not None:
            rfile.close()
        if sock is not None:
            sock.close()

    def request(
        self, method: str, target: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> None:
        fields = [("Host", self._host_header), ("Accept-Encoding", "identity"), *(headers or {}).items()]
        # Refused as http.client refuses them (no header or request of the caller's own making); the message names
        # where, never the value (it may be a token).
        if any(c in part for part in (method, target) for c in _BREAKS):
            raise ValueError("invalid character (a line break or NUL) in the HTTP request's method or path")
        for name, value in fields:
            if any(c in name or c in value for c in _BREAKS):
                raise ValueError(f"invalid character (a line break or NUL) in the HTTP header {name.strip()[:40]!r}")
        lines = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in fields)]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        self._method = method
        self.sock.sendall(head + body if body else head)

    def getresponse(self) -> WireResponse:
        rfile = self._rfile
        if rfile is None:
            raise ProtocolError("no request was sent")
        readline, read = rfile.readline, rfile.read
        while True:
            line = readline(MAX_LINE + 1)
            if not line:
                raise RemoteDisconnected("the server closed the connection without an answer")
            version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
                raise ProtocolError(f"not an HTTP/1.1 status line: {line[:80]!r}")
            status = int(code)
            headers = self._read_headers(readline)
            if status != 100:
                break
        fields = {k.lower(): v for k, v in headers}
        if self._method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            body = self._read_chunked(readline, read)
        elif "content-length" in fields:
            length = fields["content-length"]
            if not length.isdigit():
                raise ProtocolError(f"bad Content-Length {length!r}")
            body = _read_exactly(read, int(length))
            if len(body) < int(length):
                self.close()
                raise RemoteDisconnected("the server closed the connection in the middle of its answer")
        else:  # no length: the body runs to the connection's end
            body = read()
            self.close()
        if fields.get("connection", "").lower() == "close" or version == "HTTP/1.0":
            self.close()
        return WireResponse(status, reason, headers, body)

    @staticmethod
    def _read_headers(readline: Callable[[int], bytes]) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = []
        while True:
            line = readline(MAX_LINE + 1)
            if not line:
                raise RemoteDisconnected("the server closed the connection in the middle of its headers")
            if line in (b"\r\n", b"\n"):
                return headers
            if len(line) > MAX_LINE or len(headers) >= MAX_HEADERS:
                raise ProtocolError("an answer's headers are too long")
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise ProtocolError(f"not a header line: {line[:80]!r}")
            headers.append((name.strip(), value.strip()))

    def _read_chunked(self, readline: Callable[[int], bytes], read: Callable[[int], bytes]) -> bytes:
        parts: list[bytes] = []
        while True:
            size_line = readline(MAX_LINE + 1)
            if not size_line:
                raise RemoteDisconnected("the server closed the connection in the middle of its answer")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                self._read_headers(readline)  # trailers, then the blank line
                return b"".join(parts)
            chunk = _read_exactly(read, size + 2)
            if len(chunk) < size + 2:
                raise RemoteDisconnected("the server closed the connection in the middle of its answer")
            parts.append(chunk[:size])


def _read_exactly(read: Callable[[int], bytes], n: int) -> bytes:
    """`n` bytes, or fewer if the connection ends first."""
    if n <= READ_CHUNK:
        return read(n)
    parts: list[bytes] = []
    left = n
    while left > 0:
        part = read(min(left, READ_CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
