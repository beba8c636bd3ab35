"""Clients given several server replicas (issue 17) fail over among them, against real HTTP servers on loopback:
a request goes to the replica that answered last, on to the next one when it cannot be reached, each at most
once; a submission with an Idempotency-Key is made once whichever replica gets it; a request without a key that
may have reached a replica is never sent again; no replica at all is one error naming every URL tried; one URL
behaves as it always did. Both clients: the CLI's light RestClient and the httpx CorralClient."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from corral.sdk.client import CorralClient
from corral.sdk.endpoints import Endpoints, compute_may_resend, parse_urls
from corral.sdk.errors import CorralAPIError, CorralConnectionError
from corral.sdk.rest import RestClient

TIMEOUT_S = 1.0  # the clients' read timeout here; a "hung" replica holds an answer for longer


class Cluster:
    """What the replicas share (the database): jobs by idempotency key."""

    def __init__(self) -> None:
        self.jobs: dict[str, int] = {}
        self.lock = threading.Lock()

    def submit(self, key: str) -> int:
        with self.lock:
            return self.jobs.setdefault(key, len(self.jobs) + 1)


class Replica:
    """One replica: a threading HTTP/1.1 server (keep-alive) that records what reached it. `stop()` is a kill:
    the listener and every open connection close."""

    def __init__(self, cluster: Cluster, name: str, port: int = 0) -> None:
        self.cluster, self.name = cluster, name
        self.seen: list[tuple[str, str, str]] = []  # (method, path, idempotency key)
        self.hang_s = 0.0  # hold every answer this long (past the client's read timeout)
        self.status = 200  # answer this instead (e.g. 503 while starting)
        self.die_after_submit = False  # apply a submission, then die before answering
        self._conns: set[socket.socket] = set()
        replica = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                replica._conns.add(self.connection)

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                key = self.headers.get("Idempotency-Key") or ""
                replica.seen.append((self.command, self.path, key))
                body: Any = {"replica": replica.name}
                if self.command == "POST" and self.path == "/api/v1/jobs":
                    body["id"] = replica.cluster.submit(key)
                    if replica.die_after_submit:
                        replica.stop()  # the job is in the database; the answer never leaves
                        return
                if replica.hang_s:
                    time.sleep(replica.hang_s)
                data = json.dumps(body).encode()
                self.send_response(replica.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        threading.Thread(target=self.server.shutdown, daemon=True).start()  # shutdown() waits for serve_forever
        self.server.socket.close()
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def dead_url() -> str:
    """A loopback port where nothing listens: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


class TlsRefuser:
    """Accepts TCP and closes at once: an https:// URL here fails its TLS handshake."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"https://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()


class Api:
    """The same calls through either client: (method, path, key) -> parsed JSON body."""

    def __init__(self, kind: str, urls: str | list[str]) -> None:
        self.kind = kind
        self.client: RestClient | CorralClient
        if kind == "rest":
            self.client = RestClient(urls, "crl_test", timeout_s=TIMEOUT_S)
        else:
            self.client = CorralClient(urls, "crl_test", timeout_s=TIMEOUT_S)

    @property
    def url(self) -> str:
        return self.client.url

    def call(self, method: str, path: str, key: str | None = None) -> Any:
        headers = {"Idempotency-Key": key} if key else None
        if isinstance(self.client, RestClient):
            return self.client.request(method, path, json_body={} if method == "POST" else None, headers=headers).json()
        return self.client._request(method, path, json={} if method == "POST" else None, headers=headers).json()

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def replicas(cluster: Cluster) -> Iterator[Callable[[str], Replica]]:
    made: list[Replica] = []

    def make(name: str, port: int = 0) -> Replica:
        made.append(Replica(cluster, name, port))
        return made[-1]

    yield make
    for r in made:
        r.stop()


KINDS = pytest.mark.parametrize("kind", ["rest", "httpx"])


@KINDS
def test_a_get_fails_over_to_the_live_replica_and_stays_there(kind: str, replicas: Callable[..., Replica]) -> None:
    a, b = replicas("a"), replicas("b")
    api = Api(kind, f"{a.url},{b.url}")
    assert api.call("GET", "/api/v1/jobs") == {"replica": "a"}  # the first URL until another answers
    assert api.call("GET", "/api/v1/jobs") == {"replica": "a"}  # the kept-alive connection
    a.stop()
    assert api.call("GET", "/api/v1/jobs") == {"replica": "b"}
    assert api.url == b.url
    # a comes back on its port: requests stay with b, the one that answered last
    a2 = replicas("a2", a.port)
    assert [api.call("GET", "/api/v1/jobs") for _ in range(3)] == [{"replica": "b"}] * 3
    assert a2.seen == []
    # b goes: back to a (each URL once per request, wrapping around)
    b.stop()
    assert api.call("GET", "/api/v1/jobs") == {"replica": "a2"}
    api.close()


@KINDS
def test_a_submission_with_its_key_fails_over_and_is_made_once(
    kind: str, cluster: Cluster, replicas: Callable[..., Replica]
) -> None:
    a, b = replicas("a"), replicas("b")
    a.die_after_submit = True  # a commits the job, then is killed before it answers
    api = Api(kind, [a.url, b.url])
    job = api.call("POST", "/api/v1/jobs", key="k-1")
    assert job == {"replica": "b", "id": 1}  # b found the job a made, by its key
    assert cluster.jobs == {"k-1": 1}
    assert [s for s in a.seen + b.seen if s[0] == "POST"] == [("POST", "/api/v1/jobs", "k-1")] * 2
    api.close()


@KINDS
def test_a_submission_with_its_key_fails_over_after_a_read_timeout(
    kind: str, cluster: Cluster, replicas: Callable[..., Replica]
) -> None:
    a, b = replicas("a"), replicas("b")
    a.hang_s = TIMEOUT_S * 3  # a applies it and hangs: the answer comes too late
    api = Api(kind, f"{a.url},{b.url}")
    assert api.call("POST", "/api/v1/jobs", key="k-2") == {"replica": "b", "id": 1}
    assert cluster.jobs == {"k-2": 1} and api.url == b.url
    api.close()


@KINDS
def test_a_post_without_a_key_is_not_sent_again_after_a_read_timeout(
    kind: str, replicas: Callable[..., Replica]
) -> None:
    a, b = replicas("a"), replicas("b")
    a.hang_s = TIMEOUT_S * 3
    api = Api(kind, f"{a.url},{b.url}")
    with pytest.raises(CorralConnectionError) as e:
        api.call("POST", "/api/v1/jobs/7/cancel")
    assert a.seen == [("POST", "/api/v1/jobs/7/cancel", "")] and b.seen == []
    assert f"server at {a.url} did not answer in time" in str(e.value)
    assert "not sent to another server" in str(e.value)
    # the next request does not wait on the hung replica again: it starts with the next one
    a.hang_s = 0
    assert api.call("GET", "/api/v1/jobs/7") == {"replica": "b"}
    api.close()


@KINDS
def test_a_post_without_a_key_fails_over_when_nothing_was_sent(kind: str, replicas: Callable[..., Replica]) -> None:
    b = replicas("b")
    refused, tls = dead_url(), TlsRefuser()  # a refused connection, a failed TLS handshake: nothing was sent
    api = Api(kind, f"{refused},{tls.url},{b.url}")
    assert api.call("POST", "/api/v1/jobs/7/cancel") == {"replica": "b"}
    assert b.seen == [("POST", "/api/v1/jobs/7/cancel", "")]
    tls.sock.close()
    api.close()


@KINDS
def test_every_replica_down_is_one_error_naming_every_url(kind: str) -> None:
    tls = TlsRefuser()
    urls = [dead_url(), tls.url, dead_url()]
    api = Api(kind, urls)
    started = time.monotonic()
    with pytest.raises(CorralConnectionError) as e:
        api.call("GET", "/api/v1/jobs")
    message = str(e.value)
    assert message.startswith("no Corral server answered (3 tried): cannot reach the Corral server at ")
    assert [message.index(u) for u in urls] == sorted(message.index(u) for u in urls)  # each, in the order tried
    assert time.monotonic() - started < 5
    tls.sock.close()
    api.close()


@KINDS
def test_a_503_sends_an_idempotent_request_on_but_not_a_post_without_a_key(
    kind: str, replicas: Callable[..., Replica]
) -> None:
    a, b = replicas("a"), replicas("b")
    a.status = 503  # a replica starting or stopping
    api = Api(kind, f"{a.url},{b.url}")
    assert api.call("GET", "/api/v1/jobs") == {"replica": "b"}
    api2 = Api(kind, f"{a.url},{b.url}")
    with pytest.raises(CorralAPIError) as e:
        api2.call("POST", "/api/v1/jobs/7/cancel")
    assert e.value.status == 503 and not [s for s in b.seen if s[0] == "POST"]
    b.status = 503  # every replica says 503: that answer, not "unreachable"
    with pytest.raises(CorralAPIError) as e:
        Api(kind, f"{a.url},{b.url}").call("GET", "/api/v1/jobs")
    assert e.value.status == 503
    api.close()
    api2.close()


@KINDS
def test_one_url_behaves_as_before(kind: str, replicas: Callable[..., Replica]) -> None:
    a = replicas("a")
    api = Api(kind, a.url + "/")
    assert api.url == a.url and api.call("GET", "/api/v1/jobs") == {"replica": "a"}
    dead = dead_url()
    with pytest.raises(CorralConnectionError) as e:
        Api(kind, dead).call("GET", "/api/v1/jobs")
    assert str(e.value) == f"cannot reach the Corral server at {dead}: [Errno 111] Connection refused"
    a.hang_s = TIMEOUT_S * 3
    with pytest.raises(CorralConnectionError) as e:
        api.call("POST", "/api/v1/jobs/7/cancel")
    expected = "TimeoutError" if kind == "rest" else "ReadTimeout"
    assert str(e.value) == f"server at {a.url} did not answer in time ({expected})"
    api.close()


def test_the_url_list_is_checked_and_rotates() -> None:
    assert parse_urls(" https://a:8600/ , https://b:8600") == ["https://a:8600", "https://b:8600"]
    for bad, words in [
        ("https://a:8600,,https://b:8600", "an empty URL"),
        ("https://a:8600,ftp://b", "'ftp://b' is not an http:// or https:// URL"),
        ("http://:8600", "names no host"),
        ("http://a:99999", "port that is not a number"),
        ("https://a:8600,https://a:8600", "https://a:8600 is given twice"),
        ("https://me:pw@a:8600", "a user or password in the URL"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_urls(bad)
    eps = Endpoints("http://a,http://b,http://c")
    assert eps.compute_order() == ["http://a", "http://b", "http://c"]
    eps.mark_failed("http://a")
    assert eps.current == "http://b" and eps.compute_order() == ["http://b", "http://c", "http://a"]
    eps.mark_failed("http://a")  # another thread's news about a replica already left: no change
    assert eps.current == "http://b"
    eps.mark_answered("http://a")
    assert eps.current == "http://a"
    assert compute_may_resend("GET", None) and compute_may_resend("DELETE", None)
    assert compute_may_resend("POST", {"idempotency-key": "k"}) and not compute_may_resend("POST", {})
    assert not compute_may_resend("PATCH", None)
