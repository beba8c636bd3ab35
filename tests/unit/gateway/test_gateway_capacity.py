"""Capacity: shedding at the queue limit, and requests waiting for a replica of a service scaled to zero."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import httpx

from conftest import StaticRoutes, make_route, wait_until


def test_requests_beyond_the_queue_limit_are_shed(replicas, gateway_server) -> None:
    rep = replicas(81)
    source = StaticRoutes()
    source.put(make_route("busy", rep.endpoint, service_id=5, queue_limit=2))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(httpx.get, f"{gs.url}/services/busy/hold", timeout=10) for _ in range(2)]
        wait_until(lambda: gs.gateway.snapshot()[5].outstanding == 2, what="two requests in flight")
        assert gs.gateway.snapshot()[5].outstanding_by_job == {81: 2}
        r = httpx.get(f"{gs.url}/services/busy/x")
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "overloaded"
        rep.release.set()
        assert [f.result().status_code for f in held] == [200, 200]
    wait_until(lambda: gs.gateway.snapshot()[5].outstanding == 0, what="the answered requests released")
    s = gs.gateway.snapshot()[5]
    assert (s.requests, s.shed, s.errors, s.outstanding_by_job) == (3, 1, 1, {})
    assert httpx.get(f"{gs.url}/services/busy/x", timeout=10).status_code == 200


def test_a_request_waits_for_a_replica_of_a_service_at_zero(replicas, gateway_server) -> None:
    source = StaticRoutes()
    source.put(make_route("cold", service_id=6, scale_from_zero=True))
    demanded: list[int] = []
    asked = threading.Event()

    def on_demand(service_id: int) -> None:
        demanded.append(service_id)
        asked.set()

    gs = gateway_server(source, on_demand=on_demand)
    with ThreadPoolExecutor(1) as pool:
        waiting: Future[httpx.Response] = pool.submit(httpx.get, f"{gs.url}/services/cold/x", timeout=20)
        assert asked.wait(10)
        wait_until(lambda: gs.gateway.snapshot()[6].waiting == 1, what="the request waiting")
        assert not waiting.done()
        rep = replicas(82)
        source.add_endpoint("cold", rep.endpoint)
        r = waiting.result(timeout=15)
    assert r.status_code == 200 and r.headers["x-corral-replica"] == "82"
    assert set(demanded) == {6}
    s = gs.gateway.snapshot()[6]
    assert (s.waiting, s.requests, s.errors) == (0, 1, 0)


def test_waiting_ends_after_the_activation_timeout(gateway_server) -> None:
    source = StaticRoutes()
    source.put(make_route("cold", service_id=7, scale_from_zero=True))
    gs = gateway_server(source, activation_timeout_s=0.3)
    r = httpx.get(f"{gs.url}/services/cold/x", timeout=10)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "unavailable"
