"""The gateway runs in the server's process and holds each request body whole until the answer went out: the bodies
held at one time are bounded in all (max_bodies_bytes) and per tenant (max_tenant_bodies_bytes), so callers of one
tenant's public service cannot make the control plane's process hold 64 MiB per connection they open, nor take the
budget from another tenant's services. A body past either is refused with 503 "busy" (the replica never sees it),
and each body's share is given back on every way out."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import httpx

from conftest import GatewayServer, Replica, StaticRoutes, make_route, wait_until

BUDGET = 100_000  # all bodies; a tenant's: half of it


def _start(replicas: Callable[..., Replica], gateway_server: Callable[..., GatewayServer]) -> tuple:
    mine, theirs = replicas(301), replicas(302)
    source = StaticRoutes()
    source.put(make_route("mine", mine.endpoint, service_id=1, tenant_id=1))
    source.put(make_route("theirs", theirs.endpoint, service_id=2, tenant_id=2))
    gs = gateway_server(source, max_bodies_bytes=BUDGET)
    gs.wait_ready(mine, theirs)
    return gs, mine, theirs


def _post_in_thread(url: str, body: bytes, out: list[httpx.Response]) -> threading.Thread:
    t = threading.Thread(target=lambda: out.append(httpx.post(url, content=body, timeout=15)))
    t.start()
    return t


def test_a_tenant_cannot_hold_more_than_its_part_nor_take_another_tenants(replicas, gateway_server) -> None:
    gs, mine, theirs = _start(replicas, gateway_server)
    held: list[httpx.Response] = []
    first = _post_in_thread(f"{gs.url}/services/mine/hold", b"x" * 40_000, held)
    try:
        wait_until(lambda: "/hold POST" in mine.hits, 5, "the first body forwarded and held")
        assert gs.gateway.body_bytes == 40_000 and gs.gateway.tenant_body_bytes(1) == 40_000
        # the same tenant's next body would pass its half (50,000): refused before it is read, the replica untouched
        r = httpx.post(f"{gs.url}/services/mine/echo", content=b"y" * 20_000, timeout=5)
        assert r.status_code == 503 and r.json()["error"]["code"] == "busy"
        assert r.headers["retry-after"] == "1"
        assert "/echo" not in mine.hits
        # a small one of the same tenant fits its part
        assert httpx.post(f"{gs.url}/services/mine/echo", content=b"z" * 5_000, timeout=5).json()["body"] == "z" * 5_000
        # the other tenant's service still has its own half, whatever the first tenant's callers hold
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
    r = httpx.post(f"{gs.url}/services/mine/echo", content=b"y" * 20_000, timeout=5)
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


def test_a_chunked_body_is_refused_once_it_passes_and_gives_its_share_back(replicas, gateway_server) -> None:
    gs, mine, _ = _start(replicas, gateway_server)

    def chunks():
        for _ in range(10):
            yield b"c" * 10_000  # no content-length: the gateway learns the size as it reads

    r = httpx.post(f"{gs.url}/services/mine/echo", content=chunks(), timeout=5)
    assert r.status_code == 503 and r.json()["error"]["code"] == "busy"
    assert "/echo" not in mine.hits
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "the partial body's share given back")
    # a chunked body within the part goes through whole
    r = httpx.post(f"{gs.url}/services/mine/echo", content=iter([b"a" * 20_000, b"b" * 20_000]), timeout=5)
    assert r.status_code == 200 and r.json()["body"] == "a" * 20_000 + "b" * 20_000
    wait_until(lambda: gs.gateway.body_bytes == 0, 3, "its share given back")


def test_a_caller_gone_in_the_middle_of_its_body_gives_its_share_back(replicas, gateway_server) -> None:
    gs, mine, _ = _start(replicas, gateway_server)
    sock = socket.create_connection(("127.0.0.1", gs.server.port), timeout=5)
    try:
        head = b"POST /services/mine/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 30000\r\n\r\n"
        sock.sendall(head + b"p" * 1_000)  # declares 30,000, sends 1,000, then goes away
        wait_until(lambda: gs.gateway.body_bytes == 30_000, 5, "the declared length reserved")
    finally:
        sock.close()
    wait_until(lambda: gs.gateway.body_bytes == 0, 5, "the share given back when the caller went away")
    assert "/echo" not in mine.hits
