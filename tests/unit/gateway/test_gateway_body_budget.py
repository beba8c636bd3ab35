"""The gateway runs in the server's process and holds each request body whole until the answer went out: the bodies
held at one time are bounded in all (max_bodies_bytes) and per tenant (max_tenant_bodies_bytes), so callers of one
tenant's public service cannot make the control plane's process hold 64 MiB per connection they open, nor take the
whole budget from other tenants' services. Only bytes received count, a body must keep coming (408 otherwise), a
body past what is left is refused with 503 "busy" (the replica never sees it), one that could never fit with 413,
and each body's share is given back on every way out."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import httpx

from conftest import GatewayServer, Replica, StaticRoutes, make_route, wait_until

BUDGET = 100_000  # all bodies
PART = 50_000  # one tenant's services' (set in each test: the default is a quarter of the budget)


def _post_in_thread(url: str, body: bytes, out: list[httpx.Response]) -> threading.Thread:
    t = threading.Thread(target=lambda: out.append(httpx.post(url, content=body, timeout=15)))
    t.start()
    return t


def _two_tenants(
    replicas: Callable[..., Replica], gateway_server: Callable[..., GatewayServer], **kw: object
) -> tuple[GatewayServer, Replica, Replica, Replica]:
    """Tenant 1 has two services (mine, mine2), tenant 2 one (theirs)."""
    mine, mine2, theirs = replicas(301), replicas(303), replicas(302)
    source = StaticRoutes()
    source.put(make_route("mine", mine.endpoint, service_id=1, tenant_id=1))
    source.put(make_route("mine2", mine2.endpoint, service_id=3, tenant_id=1))
    source.put(make_route("theirs", theirs.endpoint, service_id=2, tenant_id=2))
    kw.setdefault("max_tenant_bodies_bytes", PART)
    gs = gateway_server(source, max_bodies_bytes=BUDGET, **kw)
    gs.wait_ready(mine, mine2, theirs)
    return gs, mine, mine2, theirs


def test_a_tenant_cannot_hold_more_than_its_part_nor_take_another_tenants(replicas, gateway_server) -> None:
    gs, mine, mine2, theirs = _two_tenants(replicas, gateway_server)
    held: list[httpx.Response] = []
    first = _post_in_thread(f"{gs.url}/services/mine/hold", b"x" * 40_000, held)
    try:
        wait_until(lambda: "/hold POST" in mine.hits, 5, "the first body forwarded and held")
        assert gs.gateway.body_bytes == 40_000 and gs.gateway.tenant_body_bytes(1) == 40_000
        # the same tenant's next body, to its other service, would pass its part: refused before it is read
        r = httpx.post(f"{gs.url}/services/mine2/echo", content=b"y" * 20_000, timeout=5)
        assert r.status_code == 503 and r.json()["error"]["code"] == "busy"
        assert r.headers["retry-after"] == "1"
        assert "/echo" not in mine2.hits
        # the busy refusal is the gateway's: not an error of the service it was meant for
        assert gs.gateway.stats.snapshot()[3].errors == 0
        # a small one of the same tenant fits its part
        r = httpx.post(f"{gs.url}/services/mine/echo", content=b"z" * 5_000, timeout=5)
        assert r.json()["body"] == "z" * 5_000
        # the other tenant's service still has its own part, whatever the first tenant's callers hold
        r = httpx.post(f"{gs.url}/services/theirs/echo", content=b"t" * 45_000, timeout=5)
        assert r.status_code == 200 and r.json()["body"] == "t" * 45_000
        # the answered bodies' shares come back once their answers went out
        wait_until(lambda: gs.gateway.body_bytes == 40_000, 3, "the answered bodies' shares given back")
    finally:
        mine.release.set()
        first.join(15)
    assert held and held[0].status_code == 200 and held[0].text == "released"
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "the held body's share given back")
    assert gs.gateway.tenant_body_bytes(1) == 0
    # once given back, the body refused before goes through
    r = httpx.post(f"{gs.url}/services/mine2/echo", content=b"y" * 20_000, timeout=5)
    assert r.status_code == 200 and len(r.json()["body"]) == 20_000


def test_all_tenants_together_stay_within_the_whole_budget(replicas, gateway_server) -> None:
    one, two, three = replicas(311), replicas(312), replicas(313)
    source = StaticRoutes()
    for i, rep in enumerate((one, two, three), start=1):
        source.put(make_route(f"s{i}", rep.endpoint, service_id=i, tenant_id=i))
    gs = gateway_server(source, max_bodies_bytes=BUDGET, max_tenant_bodies_bytes=45_000)
    gs.wait_ready(one, two, three)
    got: list[httpx.Response] = []
    threads = []
    try:
        for i, rep in ((1, one), (2, two)):
            threads.append(_post_in_thread(f"{gs.url}/services/s{i}/hold", b"x" * 45_000, got))
            wait_until(lambda rep=rep: "/hold POST" in rep.hits, 5, "a body held")
        assert gs.gateway.body_bytes == 90_000
        # a third tenant within its own part, but past what is left of the whole: refused
        r = httpx.post(f"{gs.url}/services/s3/echo", content=b"y" * 20_000, timeout=5)
        assert r.status_code == 503 and r.json()["error"]["code"] == "busy"
        assert httpx.post(f"{gs.url}/services/s3/echo", content=b"y" * 10_000, timeout=5).status_code == 200
    finally:
        one.release.set()
        two.release.set()
        for t in threads:
            t.join(15)
    assert [r.status_code for r in got] == [200, 200]
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "every share given back")


def test_a_body_that_could_never_fit_is_too_large_not_busy(replicas, gateway_server) -> None:
    gs, mine, _, _ = _two_tenants(replicas, gateway_server)
    r = httpx.post(f"{gs.url}/services/mine/echo", content=b"x" * (PART + 1), timeout=5)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert str(PART) in r.json()["error"]["message"]
    assert "/echo" not in mine.hits


def test_a_chunked_body_is_refused_once_it_passes_and_gives_its_share_back(replicas, gateway_server) -> None:
    gs, mine, _, _ = _two_tenants(replicas, gateway_server, max_tenant_bodies_bytes=BUDGET)
    held: list[httpx.Response] = []
    first = _post_in_thread(f"{gs.url}/services/mine/hold", b"h" * 60_000, held)
    try:
        wait_until(lambda: "/hold POST" in mine.hits, 5, "the first body held")

        def chunks():
            for _ in range(5):
                yield b"c" * 10_000  # no content-length: the gateway learns the size as it reads

        r = httpx.post(f"{gs.url}/services/mine/echo", content=chunks(), timeout=5)
        assert r.status_code == 503 and r.json()["error"]["code"] == "busy"
        assert "/echo" not in mine.hits
        wait_until(lambda: gs.gateway.body_bytes == 60_000, 3, "the partial body's share given back")
        # a chunked body within what is left goes through whole
        r = httpx.post(f"{gs.url}/services/mine/echo", content=iter([b"a" * 15_000, b"b" * 15_000]), timeout=5)
        assert r.status_code == 200 and r.json()["body"] == "a" * 15_000 + "b" * 15_000
    finally:
        mine.release.set()
        first.join(15)
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "every share given back")


def _raw_post(port: int, path: str, declared: int, sent: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode() + sent)
    return sock


def test_a_declared_length_reserves_nothing_only_bytes_received_count(replicas, gateway_server) -> None:
    gs, mine, mine2, _ = _two_tenants(replicas, gateway_server)
    # declares the tenant's whole part, sends 1,000 bytes and then nothing (a slow or hostile caller)
    sock = _raw_post(gs.server.port, "/services/mine/echo", PART, b"p" * 1_000)
    try:
        wait_until(lambda: gs.gateway.body_bytes == 1_000, 5, "the bytes received reserved")
        assert gs.gateway.tenant_body_bytes(1) == 1_000
        # the tenant's other callers still have the rest of its part
        r = httpx.post(f"{gs.url}/services/mine2/echo", content=b"y" * 40_000, timeout=5)
        assert r.status_code == 200
    finally:
        sock.close()
    wait_until(lambda: gs.gateway.body_bytes == 0, 5, "the share given back when the caller went away")
    assert "/echo" not in mine.hits


def test_a_body_that_stops_coming_is_answered_408_and_gives_its_share_back(replicas, gateway_server) -> None:
    gs, mine, _, _ = _two_tenants(replicas, gateway_server, body_idle_s=0.5)
    sock = _raw_post(gs.server.port, "/services/mine/echo", 10_000, b"p" * 1_000)
    try:
        sock.settimeout(5)
        answer = b""
        while b"request_timeout" not in answer:  # the head and the body may come in two reads
            got = sock.recv(4096)
            if not got:
                break
            answer += got
        assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer, answer[:200]
    finally:
        sock.close()
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "the share given back")
    assert "/echo" not in mine.hits


def test_a_body_must_be_whole_within_its_deadline_however_it_trickles(replicas, gateway_server) -> None:
    gs, mine, _, _ = _two_tenants(replicas, gateway_server, body_idle_s=5.0, body_deadline_s=1.0)
    sock = _raw_post(gs.server.port, "/services/mine/echo", 10_000, b"")
    try:
        sock.settimeout(0.2)
        answer = b""
        for _ in range(40):  # a byte every 0.2 s: never idle for body_idle_s, never whole
            try:
                sock.sendall(b"t")
            except OSError:
                break
            try:
                answer += sock.recv(4096)
            except TimeoutError:
                continue
            if answer:
                break
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    finally:
        sock.close()
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "the share given back")
    assert "/echo" not in mine.hits


def test_a_caller_who_does_not_read_the_answer_holds_no_body(replicas, gateway_server) -> None:
    mine = replicas(321)
    source = StaticRoutes()
    source.put(make_route("mine", mine.endpoint, service_id=1, tenant_id=1))
    big = 16 * 1024 * 1024  # its echo is more than the sockets' buffers take: the gateway's send of it waits
    gs = gateway_server(source, max_bodies_bytes=2 * big, max_tenant_bodies_bytes=2 * big)
    gs.wait_ready(mine)
    # a public echo answers the body back; this caller sends 16 MiB and never reads what comes
    sock = _raw_post(gs.server.port, "/services/mine/echo", big, b"e" * big)
    try:
        wait_until(lambda: "/echo" in mine.hits, 10, "the body forwarded")
        # the answer is settled (the replica's is streaming back): the body's room is given back while it waits
        wait_until(lambda: gs.gateway.body_bytes == 0, 10, "the share given back before the caller read anything")
        assert gs.gateway.snapshot()[1].outstanding == 1  # the answer still on its way
        r = httpx.post(f"{gs.url}/services/mine/echo", content=b"y" * (big + big // 2), timeout=30)
        assert r.status_code == 200 and len(r.json()["body"]) == big + big // 2
    finally:
        sock.close()


def test_an_answer_before_the_whole_body_closes_the_connection(replicas, gateway_server) -> None:
    gs, mine, _, _ = _two_tenants(replicas, gateway_server, body_idle_s=0.5)
    for declared, sent in ((10_000, b"p" * 1_000), (PART + 1, b"")):  # 408 after a pause; 413 at once
        sock = _raw_post(gs.server.port, "/services/mine/echo", declared, sent)
        try:
            sock.settimeout(5)
            answer = b""
            while True:  # read until the gateway closes: it does not wait for the rest of the body
                got = sock.recv(4096)
                if not got:
                    break
                answer += got
            assert answer.split(b"\r\n")[0] in (
                b"HTTP/1.1 408 Request Timeout",
                b"HTTP/1.1 413 Request Entity Too Large",
            )
            assert b"connection: close" in answer.lower()
        finally:
            sock.close()
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "every share given back")
    assert "/echo" not in mine.hits
