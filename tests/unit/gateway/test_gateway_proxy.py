"""The gateway forwarding HTTP to real toy replicas: routing, headers, auth, readiness, retries, balancing."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from conftest import TOKEN, StaticRoutes, make_route, wait_until


def test_unknown_service_is_404_in_the_error_shape(gateway_server) -> None:
    gs = gateway_server(StaticRoutes())
    r = httpx.get(f"{gs.url}/services/nope/x")
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "not_found", "message": "service 'nope' not found", "field": None}}
    assert httpx.get(f"{gs.url}/healthz").json() == {"status": "ok"}


def test_forwards_path_query_body_and_headers(replicas, gateway_server) -> None:
    rep = replicas(11)
    source = StaticRoutes()
    source.put(make_route("chat", rep.endpoint, public=False))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    r = httpx.post(
        f"{gs.url}/services/chat/v1/a%2Fb/c?x=1&y=two",
        content=b"hello",
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Cookie": "corral_session=secret",
            "X-Forwarded-For": "10.9.9.9",
            "X-Custom": "kept",
            "Connection": "keep-alive, X-Private",
            "X-Private": "hop",
        },
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-corral-replica"] == "11"
    got = r.json()
    assert (got["method"], got["raw_path"], got["query"], got["body"]) == ("POST", "/v1/a%2Fb/c", "x=1&y=two", "hello")
    h = got["headers"]
    assert "authorization" not in h and "cookie" not in h and "x-private" not in h
    assert h["x-custom"] == "kept"
    assert h["x-forwarded-for"] == "10.9.9.9, 127.0.0.1"
    assert h["x-forwarded-proto"] == "http"
    assert h["x-forwarded-host"] == f"127.0.0.1:{gs.server.port}"
    assert h["x-forwarded-prefix"] == "/services/chat"
    assert h["host"] == f"127.0.0.1:{rep.server.port}"


def test_service_root_without_slash_redirects(replicas, gateway_server) -> None:
    rep = replicas(12)
    source = StaticRoutes()
    source.put(make_route("web", rep.endpoint))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    r = httpx.get(f"{gs.url}/services/web?a=1")
    assert r.status_code == 307 and r.headers["location"] == "/services/web/?a=1"
    r = httpx.get(f"{gs.url}/services/web?a=1", follow_redirects=True)
    assert r.json()["path"] == "/" and r.json()["query"] == "a=1"


def test_auth_is_checked_unless_public(replicas, gateway_server) -> None:
    rep = replicas(13)
    calls: list[str] = []

    async def authorize(conn, route) -> None:
        calls.append(route.name)
        if conn.headers.get("authorization") != f"Bearer {TOKEN}":
            from corral.core.errors import AuthError, NotFoundError

            if conn.headers.get("authorization") == "Bearer other-tenant":
                raise NotFoundError("service", route.name)
            raise AuthError("a valid API token is needed")

    source = StaticRoutes()
    source.put(make_route("private", rep.endpoint, service_id=1, public=False))
    source.put(make_route("open", rep.endpoint, service_id=2, public=True))
    gs = gateway_server(source, authorize=authorize)
    gs.wait_ready(rep)
    r = httpx.get(f"{gs.url}/services/private/x")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"]["code"] == "unauthorized"
    hidden = httpx.get(f"{gs.url}/services/private/x", headers={"Authorization": "Bearer other-tenant"})
    missing = httpx.get(f"{gs.url}/services/nothing/x")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"] == "service 'private' not found"
    assert httpx.get(f"{gs.url}/services/private/x", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert calls == ["private", "private", "private"]
    assert httpx.get(f"{gs.url}/services/open/x").status_code == 200
    assert calls == ["private", "private", "private"]  # a public route never asks


def test_body_over_the_limit_is_413(replicas, gateway_server) -> None:
    rep = replicas(14)
    source = StaticRoutes()
    source.put(make_route("up", rep.endpoint))
    gs = gateway_server(source, max_body_bytes=1000)
    gs.wait_ready(rep)
    assert httpx.post(f"{gs.url}/services/up/x", content=b"x" * 1001).status_code == 413
    assert httpx.post(f"{gs.url}/services/up/x", content=iter([b"x" * 600, b"x" * 600])).status_code == 413
    assert httpx.post(f"{gs.url}/services/up/x", content=b"x" * 1000).status_code == 200


def test_unready_replica_gets_no_traffic_until_healthy(replicas, gateway_server) -> None:
    good, sick = replicas(21), replicas(22, health_status=500)
    source = StaticRoutes()
    source.put(make_route("svc", good.endpoint, sick.endpoint))
    gs = gateway_server(source)
    gs.wait_ready(good)
    wait_until(lambda: gs.gateway.prober.detail(22) == "GET /healthz answered 500", what="the failed probe")
    seen = {httpx.get(f"{gs.url}/services/svc/x").headers["x-corral-replica"] for _ in range(10)}
    assert seen == {"21"} and sick.hits == []
    sick.health_status = 200
    gs.wait_ready(sick)
    assert gs.gateway.prober.detail(22) == ""
    assert gs.gateway.prober.ready_since(22, 1) is not None
    seen = {httpx.get(f"{gs.url}/services/svc/x").headers["x-corral-replica"] for _ in range(10)}
    assert seen == {"21", "22"}
    # and out again after fail_threshold (2) failed probes
    sick.health_status = 503
    wait_until(lambda: not gs.gateway.prober.ready(22, 1), what="replica 22 unready again")


def test_no_ready_replica_is_503_at_once(replicas, gateway_server) -> None:
    sick = replicas(23, health_status=500)
    source = StaticRoutes()
    source.put(make_route("svc", sick.endpoint))
    gs = gateway_server(source)
    r = httpx.get(f"{gs.url}/services/svc/x")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "unavailable"


def test_get_is_retried_on_another_replica_when_one_refuses(replicas, gateway_server) -> None:
    alive, dying = replicas(31), replicas(32)
    source = StaticRoutes()
    source.put(make_route("svc", alive.endpoint, dying.endpoint))
    # probes rarely, so that requests find the dead replica before a probe does
    gs = gateway_server(source, probe_interval_s=30.0)
    gs.wait_ready(alive, dying)
    dying.stop()  # its port now refuses
    statuses = Counter(httpx.get(f"{gs.url}/services/svc/x").status_code for _ in range(10))
    assert statuses == {200: 10}
    assert not gs.gateway.prober.ready(32, 1)  # passive health: marked at the first refusal
    assert "connection refused" in gs.gateway.prober.detail(32)


def test_post_is_not_retried(replicas, gateway_server) -> None:
    alive, dead = replicas(33), replicas(34)
    source = StaticRoutes()
    source.put(make_route("svc", alive.endpoint, dead.endpoint))
    gs = gateway_server(source, probe_interval_s=30.0)
    gs.wait_ready(alive, dead)
    dead.stop()
    statuses = []
    for _ in range(6):  # round robin sends one of the first two to the dead replica
        statuses.append(httpx.post(f"{gs.url}/services/svc/x", content=b"{}").status_code)
        if 502 in statuses:
            break
    assert 502 in statuses
    r502 = httpx.post(f"{gs.url}/services/svc/x", content=b"{}")  # the dead one is now unready: no more 502
    assert r502.status_code == 200
    assert alive.hits.count("/x") == statuses.count(200) + 1
    snap = gs.gateway.snapshot()[1]
    assert snap.errors == 1


def test_no_other_replica_to_retry_on_is_502_naming_the_service(replicas, gateway_server) -> None:
    dead = replicas(35)
    source = StaticRoutes()
    source.put(make_route("lonely", dead.endpoint))
    gs = gateway_server(source, probe_interval_s=30.0)
    gs.wait_ready(dead)
    dead.stop()
    r = httpx.get(f"{gs.url}/services/lonely/x")
    assert r.status_code == 502
    assert "lonely" in r.json()["error"]["message"] and "refused" in r.json()["error"]["message"]


def test_a_get_cut_off_in_the_middle_of_its_answer_is_answered_whole_by_another_replica(
    replicas, gateway_server
) -> None:
    good, cut = replicas(81), replicas(82, break_off=True)
    source = StaticRoutes()
    source.put(make_route("svc", good.endpoint, cut.endpoint))
    gs = gateway_server(source, probe_interval_s=30.0)
    gs.wait_ready(good, cut)
    with httpx.Client() as client:
        answers = [client.get(f"{gs.url}/services/svc/x") for _ in range(6)]
    assert [(r.status_code, r.json()["job"]) for r in answers] == [(200, 81)] * 6
    assert cut.hits and good.hits.count("/x") == 6  # each one cut off went again, to the other replica
    assert gs.gateway.snapshot()[1].errors == 0


def test_a_post_cut_off_in_the_middle_of_its_answer_is_a_502_naming_the_replica(replicas, gateway_server) -> None:
    good, cut = replicas(83), replicas(84, break_off=True)
    source = StaticRoutes()
    source.put(make_route("svc", good.endpoint, cut.endpoint))
    gs = gateway_server(source, probe_interval_s=30.0)
    gs.wait_ready(good, cut)
    statuses = []
    for _ in range(6):  # round robin sends one of the first two to the replica that breaks off
        r = httpx.post(f"{gs.url}/services/svc/x", content=b"{}")
        statuses.append(r.status_code)
        if r.status_code == 502:
            break
    assert r.status_code == 502, statuses
    message = r.json()["error"]["message"]
    assert "'svc'" in message and "replica job 84 broke off its answer" in message, message
    assert len(cut.hits) == 1 and good.hits.count("/x") == statuses.count(200)  # not sent again
    assert gs.gateway.snapshot()[1].errors == 1


def test_a_slow_replica_gets_fewer_requests(replicas, gateway_server) -> None:
    slow, fast = replicas(41, slow_s=0.15), replicas(42)
    source = StaticRoutes()
    source.put(make_route("svc", slow.endpoint, fast.endpoint))
    gs = gateway_server(source)
    gs.wait_ready(slow, fast)
    with httpx.Client() as client, ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: client.get(f"{gs.url}/services/svc/x").headers["x-corral-replica"], range(60)))
    counts = Counter(got)
    assert counts["42"] > 2 * counts["41"], counts


def test_idle_replicas_share_sequential_requests_evenly(replicas, gateway_server) -> None:
    reps = [replicas(51), replicas(52), replicas(53)]
    source = StaticRoutes()
    source.put(make_route("svc", *(r.endpoint for r in reps)))
    gs = gateway_server(source)
    gs.wait_ready(*reps)
    with httpx.Client() as client:
        counts = Counter(client.get(f"{gs.url}/services/svc/x").headers["x-corral-replica"] for _ in range(30))
    assert counts == {"51": 10, "52": 10, "53": 10}


def test_stats_count_requests_errors_and_latency(replicas, gateway_server) -> None:
    rep = replicas(61)
    source = StaticRoutes()
    source.put(make_route("svc", rep.endpoint, service_id=9))
    gs = gateway_server(source)
    gs.wait_ready(rep)
    with httpx.Client() as client:
        for _ in range(20):
            assert client.get(f"{gs.url}/services/svc/x").status_code == 200
    from corral.gateway.stats import compute_quantile_ms

    wait_until(lambda: gs.gateway.snapshot()[9].outstanding == 0, what="the last request released")
    s = gs.gateway.snapshot()[9]
    assert (s.requests, s.errors, s.outstanding, s.waiting, s.shed) == (20, 0, 0, 0, 0)
    assert sum(s.latency_ms) == 20 and s.last_request_at is not None
    p50, p99 = compute_quantile_ms(s.latency_ms, 0.5), compute_quantile_ms(s.latency_ms, 0.99)
    assert p50 is not None and p99 is not None and 0 < p50 <= p99 < 10000
