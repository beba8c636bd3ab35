"""The light path reads base URLs and writes query strings without urllib.parse (issue 13: it loads `re`, ~5 ms of
a CLI call), and must read and write them as urllib.parse does: split_url against urlsplit, encode_query against
urlencode, on generated URLs and parameters, usual and odd."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.sdk.endpoints import UrlParts, check_url, split_url
from corral.sdk.rest import encode_query

ATTRS = ("scheme", "hostname", "path", "username", "password", "query", "fragment")

host = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.-]{0,20}", fullmatch=True) | st.sampled_from(
    ["127.0.0.1", "localhost", "[::1]", "[fe80::1%25eth0]", "Head-1.Example.COM", "", "ex ample", "ex@ample", "é.org"]
)
port = st.none() | st.integers(0, 70_000).map(str) | st.sampled_from(["", "08600", "x", "-1", "１２"])
path = st.sampled_from(["", "/", "/corral", "/a/b/", "/a?b=1", "/a#f", "/%41", "/a b", "/~u/x_y.z"])
scheme = st.sampled_from(["http", "https", "HTTP", "ftp", "", "http:", "https:/"])


@st.composite
def urls(draw: Any) -> str:
    u = f"{draw(scheme)}://{draw(host)}"
    p = draw(port)
    return (u if p is None else f"{u}:{p}") + draw(path)


def port_of(parts: Any) -> object:
    try:
        return parts.port
    except ValueError:
        return ValueError


@given(urls() | st.text(max_size=40))
def test_split_url_reads_what_urlsplit_reads(url: str) -> None:
    try:
        expected = urlsplit(url)
    except ValueError:
        with pytest.raises(ValueError):
            split_url(url)
        return
    mine = split_url(url)
    assert [getattr(mine, a) for a in ATTRS] == [getattr(expected, a) for a in ATTRS]
    assert port_of(mine) == port_of(expected)
    assert check_url(url) == check_url_by_urlsplit(url)


def check_url_by_urlsplit(url: str) -> str | None:
    import corral.sdk.endpoints as endpoints

    real = endpoints.split_url
    endpoints.split_url = urlsplit  # type: ignore[assignment]
    try:
        return endpoints.check_url(url)
    finally:
        endpoints.split_url = real


def test_the_usual_urls_take_the_short_way() -> None:
    for url in ("http://127.0.0.1:8600", "https://head-1.example.com:8600/corral", "http://localhost/"):
        assert isinstance(split_url(url), UrlParts), url
    for url in ("http://[::1]:8600", "http://u:p@h", "http://h/?x", "HTTP://h", "http://h:99999"):
        assert not isinstance(split_url(url), UrlParts), url


params = st.dictionaries(
    st.text(max_size=8) | st.binary(max_size=4),
    st.text(max_size=12) | st.binary(max_size=6) | st.integers() | st.booleans() | st.none(),
    max_size=4,
)


@given(params)
def test_encode_query_writes_what_urlencode_writes(p: dict[str, Any]) -> None:
    try:
        expected = urlencode(p)
    except UnicodeEncodeError:  # a lone surrogate
        with pytest.raises(UnicodeEncodeError):
            encode_query(p)
        return
    assert encode_query(p) == expected


def test_an_address_family_this_host_cannot_open_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """IPv6 switched off: localhost's ::1 comes first and its socket cannot be made; 127.0.0.1 is tried next, as
    socket.create_connection does."""
    import _socket
    import http.server
    import threading

    from corral.sdk import wire

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_: object) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    real = _socket.getaddrinfo
    port = srv.server_address[1]
    unopenable = (_socket.AF_PACKET, _socket.SOCK_STREAM, 6, "", ("::1", port))  # EPROTONOSUPPORT / ESOCKTNOSUPPORT
    monkeypatch.setattr(
        _socket, "getaddrinfo", lambda *a: [unopenable, *real("127.0.0.1", port, 0, _socket.SOCK_STREAM)]
    )
    try:
        sock = wire.open_plain(b"localhost", port, 5)
        assert sock.getpeername() == ("127.0.0.1", port)
        sock.close()
        monkeypatch.setattr(_socket, "getaddrinfo", lambda *a: [unopenable])
        with pytest.raises(OSError):
            wire.open_plain(b"localhost", port, 5)
    finally:
        srv.shutdown()
