"""The gateway: /services/NAME/... forwarded to one of the service's ready replicas, and its ASGI app.

Per request, only what is in memory: the routes (refreshed from the RouteSource every refresh_s, in a thread),
the prober's health, the balancer's counts. The caller's credential is checked by the injected `authorize` (never
for a public service). The request body is read whole (bounded), so that an idempotent request that fails before
any answer (connect error, reset, protocol error) can be sent once more, to another ready replica. An answer of
known length up to `max_held_answer_bytes` (1 MiB), not an event stream, is read whole before its headers go to the
caller: a replica that breaks off in its middle (killed by a GPU fault, stopped) has sent the caller nothing yet, so
an idempotent request goes once more to another ready replica as above, and any other is answered 502. Larger
answers and streams (server-sent events arrive event by event, chunked bodies) go back as the replica sends them and
are never retried once their headers went out: one the replica breaks off ends short.

The gateway runs in the server's process, and a tenant's replica may answer many requests at once with ~1 MiB each:
the answers held at one time are bounded by `max_held_bytes` (64 MiB) in all, whatever the services. An answer whose
length would pass it is streamed instead (as a larger one is). A held answer keeps its share until the last of it
went to the caller (in slices, so that a caller who does not read holds the share, not a socket buffer), and gives it
back on every way out: sent, broken off, timed out, the caller gone (which ends the replica's request), cancelled.

The background work (route refresh, health probes) runs from `Gateway.start()` to `Gateway.stop()`: the app's
lifespan calls them, or, where the app is mounted with lifespan off, its owner does.

Request bodies are held too, whole, from the first byte read until the answer went out (an idempotent one may be
sent twice), up to `max_body_bytes` (64 MiB) each. Without a bound in all, callers of a public service could make
the server's process hold 64 MiB per connection they open, and take the control plane down with it: the bodies
held at one time are bounded by `max_bodies_bytes` (256 MiB), and one tenant's services' by
`max_tenant_bodies_bytes` (a quarter of that), so one tenant's callers alone cannot take it all from the others'.
Only bytes received count (a declared length reserves nothing: a caller who declares 64 MiB and sends nothing holds
nothing), and a body must keep coming: one that sends nothing for `body_idle_s` (60 s), or is not whole within
`body_deadline_s` (600 s), is answered 408. A body that would pass what is left is refused with 503 and Retry-After
("busy": it fits alone, not now), before the gateway reads it when its declared length says so, else as soon as it
passes; one that could never fit (over the smallest of the limits) is answered 413. Those three answers close the
connection (the rest of the body is not read). A body's share, and the body, are given up once the replica's answer
is settled (streamed, or held whole: nothing can send the request again after that), so a caller who then does not
read the answer holds no body; and on every other way out (refused, the caller gone, the replica failed). A busy
refusal is the gateway's, not counted as the service's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpcore
import httpx
from starlette.applications import Starlette
from starlette.requests import HTTPConnection
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from corral.core.errors import AuthError, CorralError, ForbiddenError, NotFoundError, TooManyRequestsError
from corral.gateway.balancer import Balancer
from corral.gateway.headers import (
    compute_response_headers,
    compute_upstream_headers,
    compute_upstream_target,
    error_response,
    service_prefix,
)
from corral.gateway.model import Authorize, DemandHook, Endpoint, RouteSource, ServiceRoute
from corral.gateway.prober import Prober, describe_failure
from corral.gateway.stats import TrafficCounters, TrafficStats
from corral.gateway.wsproxy import proxy_websocket

log = logging.getLogger(__name__)

# httpcore asks `import sniffio` on every request (httpcore/_synchronization.py) and falls back to asyncio when it
# is missing, as it is here (anyio 4 no longer needs it): each failed import searches sys.path, four times a
# request, a large part of the gateway's added latency. A None in sys.modules makes that import fail at once.
if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
MAX_BODY_BYTES = 64 * 1024 * 1024
# Request bodies held at once, in the process, up to this; one tenant's services' up to a quarter (module docstring).
MAX_BODIES_BYTES = 256 * 1024 * 1024
BODY_IDLE_S = 60.0  # the longest a body may send nothing (nginx's client_body_timeout)
BODY_DEADLINE_S = 600.0  # the longest a whole body may take
# Answers of a known length up to this are held until whole (see the module's comment): at most this much memory per
# request in flight, and the caller's first byte comes when the replica's last one did.
MAX_HELD_ANSWER_BYTES = 1024 * 1024
# ... and all the answers held at once, in the process, up to this: past it, an answer streams.
MAX_HELD_BYTES = 64 * 1024 * 1024
HELD_SLICE_BYTES = 64 * 1024  # a held answer goes to the caller in slices of this (the server waits for a slow one)
DEMAND_EVERY_S = 1.0  # the most often on_demand is called for one service
UNKNOWN_REFRESH_S = 0.25  # the most often an unknown service name makes the gateway read its routes again
# Failures before any answer: the replica did not take the request (or dropped it unanswered); an idempotent one may
# go to another replica. A read timeout is not one of them: the replica may be working on it.
_NOT_ANSWERED = (
    httpcore.ConnectError,
    httpcore.ConnectTimeout,
    httpcore.ReadError,
    httpcore.WriteError,
    httpcore.RemoteProtocolError,
)
_UPSTREAM_ERRORS = (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError, OSError)
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # the gateway's own: status, headers, body
_RETRY_AFTER = [(b"retry-after", b"1")]
_CLOSE = [(b"connection", b"close")]  # an answer sent before the body was read whole: the rest of it is not wanted
_BUSY = error_response(
    503, "busy", "the gateway holds all the request bodies it may at once; retry shortly", [*_RETRY_AFTER, *_CLOSE]
)
_BUSY_BODY = _BUSY[2]  # the one bytes object a busy answer carries (so handle_http knows it for the gateway's own)


class _BodyShare:
    """One request's body and the bytes it holds of the gateway's budget (given back, and the body dropped, once the
    replica's answer is settled, or by handle_http on any other way out)."""

    __slots__ = ("body", "bytes", "tenant_id")

    def __init__(self, tenant_id: int) -> None:
        self.tenant_id = tenant_id
        self.bytes = 0
        self.body = b""


class _ShareStream:
    """The request's content for httpcore: the share's body, each time it is sent (a retry sends it again). Holds the
    share, not the bytes, so the body goes once the share drops it."""

    def __init__(self, share: _BodyShare) -> None:
        self._share = share

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._share.body:
            yield self._share.body


class Gateway:
    def __init__(
        self,
        source: RouteSource,
        authorize: Authorize,
        on_demand: DemandHook | None = None,
        *,
        refresh_s: float = 0.5,
        activation_timeout_s: float = 120.0,
        probe_interval_s: float = 1.0,
        fail_threshold: int = 2,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_bodies_bytes: int = MAX_BODIES_BYTES,  # all the request bodies held at once
        max_tenant_bodies_bytes: int | None = None,  # one tenant's services' (default: a quarter of max_bodies_bytes)
        body_idle_s: float = BODY_IDLE_S,
        body_deadline_s: float = BODY_DEADLINE_S,
        max_held_answer_bytes: int = MAX_HELD_ANSWER_BYTES,  # 0: every answer streams
        max_held_bytes: int = MAX_HELD_BYTES,  # all the answers held at once (the process runs one gateway)
        read_timeout_s: float = 300.0,
        connect_timeout_s: float = 2.0,
        sandbox: bool = False,
    ) -> None:
        self._source = source
        self._authorize = authorize
        self._on_demand = on_demand
        self._refresh_s = refresh_s
        self._activation_timeout_s = activation_timeout_s
        self._max_body_bytes = max_body_bytes
        self._max_bodies_bytes = max_bodies_bytes
        self._max_tenant_bodies_bytes = (
            max_bodies_bytes // 4 if max_tenant_bodies_bytes is None else max_tenant_bodies_bytes
        )
        self._body_idle_s = body_idle_s
        self._body_deadline_s = body_deadline_s
        self._body_bytes = 0  # reserved by the request bodies held now (all on the event loop's thread)
        self._tenant_body_bytes: dict[int, int] = {}  # the same, per tenant of the service asked
        self._max_held_answer_bytes = max_held_answer_bytes
        self._max_held_bytes = max_held_bytes
        self._held_bytes = 0  # reserved by the answers held now (all on the event loop's thread)
        self._sandbox = sandbox  # served on the portal's origin: replicas' pages get a CSP sandbox (headers.py)
        # Requests go through httpcore's pool itself: httpx's client layer (URL parsing, header models, auth and
        # redirect hooks) cost a third of the gateway's added latency and does nothing a proxy needs. Keep-alive is
        # shorter than the usual servers' 5 s (uvicorn, Node), so the gateway does not send on a connection the
        # replica is closing. Probes use an httpx client of their own.
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=1000, max_keepalive_connections=200, keepalive_expiry=4.0
        )
        self._timeouts = {
            "connect": connect_timeout_s,
            "read": read_timeout_s,
            "write": read_timeout_s,
            "pool": connect_timeout_s,
        }
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_keepalive_connections=100, keepalive_expiry=4.0),
            follow_redirects=False,
            trust_env=False,
        )
        self.stats = TrafficCounters()
        self.balancer = Balancer()
        self.prober = Prober(self._client, probe_interval_s, fail_threshold, on_ready=lambda _: self._notify_change())
        self._routes: dict[str, ServiceRoute] = {}
        self._changed = asyncio.Event()  # set (and replaced) when an endpoint became ready or the routes changed
        self._last_demand: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._unknown_refresh_at = 0.0

    # ---- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the routes once, then refresh them and probe replicas in the background until stop()."""
        if self._task is not None:
            return
        await self.refresh_routes()
        self._task = asyncio.create_task(self._run(), name="corral-gateway")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._client.aclose()
        await self._pool.aclose()

    async def _run(self) -> None:
        probes = asyncio.create_task(self.prober.run())
        try:
            while True:
                await asyncio.sleep(self._refresh_s)
                await self.refresh_routes()
        finally:
            probes.cancel()
            await asyncio.gather(probes, return_exceptions=True)

    async def refresh_routes(self) -> None:
        """Read the routes from the source (in a thread); on a failure keep those the gateway has."""
        try:
            routes = dict(await asyncio.to_thread(self._source.routes))
        except Exception:
            log.warning("could not load the services' routes; keeping the last ones", exc_info=True)
            return
        self.set_routes(routes)

    def set_routes(self, routes: Mapping[str, ServiceRoute]) -> None:
        self._routes = dict(routes)
        self.prober.update_routes(self._routes)
        self.stats.track({r.service_id for r in self._routes.values()})
        self._notify_change()

    def snapshot(self) -> dict[int, TrafficStats]:
        """Per-service traffic counters (cumulative); thread-safe."""
        return self.stats.snapshot()

    def _notify_change(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    @property
    def held_bytes(self) -> int:
        """Bytes reserved now by answers held whole (at most max_held_bytes)."""
        return self._held_bytes

    @property
    def body_bytes(self) -> int:
        """Bytes reserved now by the request bodies held (at most max_bodies_bytes)."""
        return self._body_bytes

    def tenant_body_bytes(self, tenant_id: int) -> int:
        """Bytes reserved now by the request bodies held for one tenant's services."""
        return self._tenant_body_bytes.get(tenant_id, 0)

    def ready_endpoints(self, route: ServiceRoute) -> list[Endpoint]:
        ready = self.prober.ready
        return [e for e in route.endpoints if ready(e.job_id, e.attempt)]

    # ---- HTTP ------------------------------------------------------------------------------------------------

    async def handle_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        name: str = scope["path_params"]["name"]
        route = await self.find_route(name)
        if route is None:
            await _answer(send, _not_found(name))
            return
        started = time.perf_counter()
        sid = route.service_id
        self.stats.record_request(sid)
        answer = await self.check_access(HTTPConnection(scope, receive), route)
        if answer is None and 0 < route.queue_limit <= self.stats.in_flight(sid):
            self.stats.record_shed(sid)  # an error too
            await _answer(send, error_response(503, "overloaded", f"service {name!r} is overloaded", _RETRY_AFTER))
            return
        share = _BodyShare(route.tenant_id)
        try:
            if answer is None:
                share.body, answer = await self._read_body(scope, receive, share)
            if answer is None:
                answer = await self._forward(route, scope, receive, send, share, started)
            if answer is not None:
                if answer[0] >= 500 and answer[2] is not _BUSY_BODY:  # busy: the gateway's, not the service's
                    self.stats.record_error(sid)
                await _answer(send, answer)
        finally:
            self._give_back(share)

    async def check_access(self, conn: HTTPConnection, route: ServiceRoute) -> Answer | None:
        """Why the caller may not use the route (None: they may)."""
        if route.public:
            return None
        try:
            await self._authorize(conn, route)
        except NotFoundError:  # another tenant's service: exactly as a missing one
            return _not_found(route.name)
        except AuthError as e:
            return error_response(401, e.code, e.message, [(b"www-authenticate", b"Bearer")])
        except ForbiddenError as e:
            return error_response(403, e.code, e.message)
        except TooManyRequestsError as e:
            return error_response(429, e.code, e.message, [(b"retry-after", str(e.retry_after_s).encode())])
        except CorralError as e:
            return error_response(503, "unavailable", f"could not check access: {e.message}", _RETRY_AFTER)
        return None

    async def _read_body(self, scope: Scope, receive: Receive, share: _BodyShare) -> tuple[bytes, Answer | None]:
        """The whole body, its bytes reserved in `share` as they come (the caller gives them back); or the gateway's
        answer."""
        limit = min(self._max_body_bytes, self._max_tenant_bodies_bytes, self._max_bodies_bytes)
        too_big = error_response(413, "too_large", f"a request body is limited to {limit} bytes", _CLOSE)
        for key, value in scope["headers"]:
            if key == b"content-length" and value.isdigit():
                if int(value) > limit:
                    return b"", too_big
                if not self._has_room(share.tenant_id, int(value)):  # refused before a byte of it is read
                    return b"", self._busy()
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self._body_deadline_s
        while True:
            wait_s = min(self._body_idle_s, deadline - time.monotonic())
            try:
                async with asyncio.timeout(max(wait_s, 0.0)):  # no task per read, as wait_for would make
                    message = await receive()
            except TimeoutError:
                return b"", error_response(408, "request_timeout", "the request body did not come in time", _CLOSE)
            if message["type"] == "http.disconnect":
                return b"", (499, [], b"")  # nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return b"", too_big
            if chunk and not self._reserve_body(share, len(chunk)):
                return b"", self._busy()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None

    def _has_room(self, tenant_id: int, size: int) -> bool:
        return (
            self._body_bytes + size <= self._max_bodies_bytes
            and self._tenant_body_bytes.get(tenant_id, 0) + size <= self._max_tenant_bodies_bytes
        )

    def _reserve_body(self, share: _BodyShare, size: int) -> bool:
        """Add `size` bytes to a body's share, within max_bodies_bytes and its tenant's part; whether they were."""
        if not self._has_room(share.tenant_id, size):
            return False
        self._body_bytes += size
        self._tenant_body_bytes[share.tenant_id] = self._tenant_body_bytes.get(share.tenant_id, 0) + size
        share.bytes += size
        return True

    def _give_back(self, share: _BodyShare) -> None:
        share.body = b""
        if not share.bytes:
            return
        self._body_bytes -= share.bytes
        left = self._tenant_body_bytes[share.tenant_id] - share.bytes
        if left:
            self._tenant_body_bytes[share.tenant_id] = left
        else:
            del self._tenant_body_bytes[share.tenant_id]
        share.bytes = 0

    def _busy(self) -> Answer:
        return _BUSY[0], list(_BUSY[1]), _BUSY_BODY

    async def _forward(
        self, route: ServiceRoute, scope: Scope, receive: Receive, send: Send, share: _BodyShare, started: float
    ) -> Answer | None:
        """Send the request to a ready replica (once more to another, when an idempotent one was not answered)
        and stream its answer back; or the gateway's own answer, when there is none to stream."""
        ready = self.ready_endpoints(route)
        if not ready and route.scale_from_zero:
            route, ready = await self.await_ready(route)
        if not ready:
            return error_response(503, "unavailable", f"service {route.name!r} has no ready replica", _RETRY_AFTER)
        method: str = scope["method"]
        headers = compute_upstream_headers(scope, service_prefix(route.name))
        if share.body or method in ("POST", "PUT", "PATCH"):
            headers.append((b"content-length", str(len(share.body)).encode()))
        target = compute_upstream_target(scope)
        failed: Endpoint | None = None
        why = ""
        for _ in range(2):
            endpoint = self.balancer.select_endpoint(route.service_id, ready, exclude=failed)
            if endpoint is None:
                break
            self.balancer.acquire(endpoint)
            self.stats.add_outstanding(route.service_id, 1, endpoint.job_id)
            response: httpcore.Response | None = None
            held = 0  # of the held-answer budget, given back below whatever happens
            try:
                request = httpcore.Request(
                    method.encode(),
                    httpcore.URL(scheme=b"http", host=endpoint.host.encode(), port=endpoint.port, target=target),
                    headers=[(b"host", _host_header(endpoint)), *headers],
                    content=_ShareStream(share),
                    extensions={"timeout": self._timeouts},
                )
                try:
                    response = await self._pool.handle_async_request(request)
                    held = self._reserve_held(response)
                    whole = await self._read_held_answer(response, held, receive) if held >= 0 else None
                    if held >= 0 and whole is None:
                        return (499, [], b"")  # the caller went away meanwhile
                except _NOT_ANSWERED as e:
                    # no answer, or (its headers came) one it broke off before the caller was sent any of it
                    if response is not None:
                        why = f"replica job {endpoint.job_id} broke off its answer ({describe_failure(e)})"
                        log.info("%s %s: %s", method, scope["path"], why)
                    else:
                        why = f"no replica answered ({describe_failure(e)})"
                        if isinstance(e, httpcore.ConnectError):
                            self.prober.mark_unreachable(endpoint, f"{method} {scope['path']}: {describe_failure(e)}")
                    failed = endpoint
                    if method not in IDEMPOTENT:
                        break
                    ready = self.ready_endpoints(route)
                    continue
                except httpcore.TimeoutException as e:
                    msg = f"replica job {endpoint.job_id} did not answer in time ({describe_failure(e)})"
                    return error_response(504, "timeout", f"service {route.name!r}: {msg}")
                except _UPSTREAM_ERRORS as e:
                    return error_response(502, "bad_gateway", f"service {route.name!r}: {describe_failure(e)}")
                # The answer is settled: nothing sends the request again, so its body goes now (a caller slow to
                # read what follows holds no body meanwhile).
                self._give_back(share)
                if whole is not None:
                    await self._send_held_answer(route.service_id, endpoint, response, whole, send, started)
                else:
                    await self._stream_answer(route.service_id, endpoint, response, receive, send, started)
                return None
            finally:
                if held > 0:
                    self._held_bytes -= held
                if response is not None:
                    await response.aclose()
                self.balancer.release(endpoint)
                self.stats.add_outstanding(route.service_id, -1, endpoint.job_id)
        return error_response(502, "bad_gateway", f"service {route.name!r}: {why}")

    def _reserve_held(self, response: httpcore.Response) -> int:
        """The bytes reserved for holding this answer whole (a content-length up to max_held_answer_bytes, not an
        event stream, within what is left of max_held_bytes); -1 when it is to be streamed. The caller gives the
        reservation back."""
        length, event_stream = _answer_shape(response.headers)
        if length is None or length > self._max_held_answer_bytes or event_stream:
            return -1
        if self._held_bytes + length > self._max_held_bytes:
            return -1  # the process holds all it may: stream this one
        self._held_bytes += length
        return length

    async def _read_held_answer(self, response: httpcore.Response, held: int, receive: Receive) -> bytes | None:
        """The answer's whole body, of at most `held` bytes; None when the caller went away meanwhile (the replica's
        request ends then). Raises as httpcore does when the replica breaks off."""
        chunks: AsyncIterable[bytes] = response.stream  # type: ignore[assignment]
        this = asyncio.current_task()
        assert this is not None
        gone = asyncio.create_task(_cancel_on_disconnect(receive, this))
        try:
            body, left = [], held
            async for chunk in chunks:
                left -= len(chunk)
                if left < 0:  # never more than was reserved, whatever framed it
                    raise httpcore.RemoteProtocolError("the answer is longer than its Content-Length")
                body.append(chunk)
            return b"".join(body)
        except asyncio.CancelledError:
            if not gone.done() or gone.cancelled():
                raise  # cancelled from elsewhere (shutdown)
            this.uncancel()  # the caller went away
            return None
        finally:
            gone.cancel()

    async def _send_held_answer(
        self, sid: int, endpoint: Endpoint, response: httpcore.Response, body: bytes, send: Send, started: float
    ) -> None:
        headers = compute_response_headers(response.headers, endpoint.job_id, self._sandbox)
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        # In slices: the server waits for a slow caller before each, so what it has not taken stays here, counted in
        # the budget, rather than in the connection's write buffer, counted nowhere.
        last = max(len(body) - 1, 0) // HELD_SLICE_BYTES * HELD_SLICE_BYTES  # where the last slice begins
        for at in range(0, last, HELD_SLICE_BYTES):
            await send({"type": "http.response.body", "body": body[at : at + HELD_SLICE_BYTES], "more_body": True})
        await send({"type": "http.response.body", "body": body[last:], "more_body": False})
        if response.status >= 500:
            self.stats.record_error(sid)
        self.stats.record_latency(sid, (time.perf_counter() - started) * 1000)

    async def _stream_answer(
        self,
        sid: int,
        endpoint: Endpoint,
        response: httpcore.Response,
        receive: Receive,
        send: Send,
        started: float,
    ) -> None:
        status = response.status
        length, streamed = _answer_shape(response.headers)
        headers = compute_response_headers(response.headers, endpoint.job_id, self._sandbox)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if status >= 500:
            self.stats.record_error(sid)
        chunks: AsyncIterable[bytes] = response.stream  # type: ignore[assignment]
        if length is not None and not streamed:
            # A body of known length, too large to hold: each chunk goes out as it comes, the last one with the end of
            # the body (a HEAD's, or one cut off, ends with an empty one).
            left, ended = length, False
            try:
                async for chunk in chunks:
                    left -= len(chunk)
                    ended = left <= 0
                    await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
            except _UPSTREAM_ERRORS as e:
                self._broken(sid, endpoint, e)
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            self.stats.record_latency(sid, (time.perf_counter() - started) * 1000)
            return
        # A stream (server-sent events, chunked): each chunk goes out at once; latency is to the first byte. The
        # caller going away ends it, and the replica's request with it: a watcher cancels this task then.
        this = asyncio.current_task()
        assert this is not None
        gone = asyncio.create_task(_cancel_on_disconnect(receive, this))
        try:
            await self._pump(sid, endpoint, chunks, send, started)
        except asyncio.CancelledError:
            if not gone.done() or gone.cancelled():
                raise  # cancelled from elsewhere (shutdown)
            this.uncancel()  # the caller went away: nothing more to do
        finally:
            gone.cancel()

    async def _pump(
        self, sid: int, endpoint: Endpoint, chunks: AsyncIterable[bytes], send: Send, started: float
    ) -> None:
        first = True
        try:
            async for chunk in chunks:
                if first:
                    self.stats.record_latency(sid, (time.perf_counter() - started) * 1000)
                    first = False
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except _UPSTREAM_ERRORS as e:
            self._broken(sid, endpoint, e)
        if first:  # no body at all (HEAD, 204, 304)
            self.stats.record_latency(sid, (time.perf_counter() - started) * 1000)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _broken(self, sid: int, endpoint: Endpoint, e: Exception) -> None:
        log.info("replica job %s broke off its answer: %s", endpoint.job_id, describe_failure(e))
        self.stats.record_error(sid)

    async def await_ready(self, route: ServiceRoute) -> tuple[ServiceRoute, list[Endpoint]]:
        """Wait (scale from zero) until the service has a ready replica, asking for one (on_demand) meanwhile;
        (the route as it is then, its ready endpoints), which are none after activation_timeout_s."""
        sid, name = route.service_id, route.name
        deadline = time.monotonic() + self._activation_timeout_s
        self.stats.add_waiting(sid, 1)
        try:
            while True:
                changed = self._changed  # taken before looking, so that no change is missed
                current = self._routes.get(name)
                if current is None or current.service_id != sid:
                    return route, []
                route = current
                ready = self.ready_endpoints(route)
                left = deadline - time.monotonic()
                if ready or left <= 0:
                    return route, ready
                self._signal_demand(sid)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(left, DEMAND_EVERY_S))
        finally:
            self.stats.add_waiting(sid, -1)

    def _signal_demand(self, sid: int) -> None:
        now = time.monotonic()
        if self._on_demand is None or now - self._last_demand.get(sid, -DEMAND_EVERY_S) < DEMAND_EVERY_S:
            return
        self._last_demand[sid] = now
        future = asyncio.get_running_loop().run_in_executor(None, self._on_demand, sid)
        future.add_done_callback(_log_failure)

    # ---- WebSocket -------------------------------------------------------------------------------------------

    async def handle_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await proxy_websocket(self, WebSocket(scope, receive, send))

    def route(self, name: str) -> ServiceRoute | None:
        return self._routes.get(name)

    async def find_route(self, name: str) -> ServiceRoute | None:
        """The route of `name`; a name the table lacks makes the gateway read its routes again first (a service
        created since the last refresh answers at once), at most every UNKNOWN_REFRESH_S whatever callers ask."""
        route = self._routes.get(name)
        if route is not None:
            return route
        now = time.monotonic()
        if now - self._unknown_refresh_at >= UNKNOWN_REFRESH_S:
            self._unknown_refresh_at = now
            await self.refresh_routes()
        return self._routes.get(name)


def _not_found(name: str) -> Answer:
    return error_response(404, "not_found", NotFoundError("service", name).message)


def _answer_shape(headers: list[tuple[bytes, bytes]]) -> tuple[int | None, bool]:
    """(the answer's content-length, None without a valid one; whether it is an event stream). An answer with a
    Transfer-Encoding has no length, whatever Content-Length it also gives: its body is framed by its chunks, as
    httpcore reads it (a replica that said `Content-Length: 1` and sent gigabytes in chunks was held whole)."""
    length: int | None = None
    event_stream = chunked = False
    for key, value in headers:
        lower = key.lower()
        if lower == b"content-length":
            length = int(value) if value.strip().isdigit() else None
        elif lower == b"content-type":
            event_stream = value.startswith(b"text/event-stream")
        elif lower == b"transfer-encoding":
            chunked = True
    return (None if chunked else length), event_stream


def _host_header(endpoint: Endpoint) -> bytes:
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    return f"{host}:{endpoint.port}".encode()


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    task.cancel()


async def _answer(send: Send, answer: Answer) -> None:
    status, headers, body = answer
    if status == 499:  # the caller went away
        return
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("on_demand failed", exc_info=future.exception())


class _Asgi:
    """A Starlette route's endpoint as a plain ASGI callable (raw scope, no Request/Response on the hot path)."""

    def __init__(self, handle: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._handle(scope, receive, send)


def create_gateway_app(gateway: Gateway, lifespan: bool = True) -> Starlette:
    """The gateway's ASGI app. With `lifespan`, the app starts and stops the gateway's background work; without,
    the owner awaits gateway.start() and gateway.stop()."""

    @contextlib.asynccontextmanager
    async def run(_: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    async def healthz(scope: Scope, receive: Receive, send: Send) -> None:
        await _answer(send, (200, [(b"content-type", b"application/json")], b'{"status":"ok"}'))

    async def to_slash(scope: Scope, receive: Receive, send: Send) -> None:
        query: bytes = scope.get("query_string", b"")
        location = f"{scope.get('root_path', '')}{service_prefix(scope['path_params']['name'])}/"
        location += f"?{query.decode('latin-1')}" if query else ""
        await _answer(send, (307, [(b"location", location.encode()), (b"content-length", b"0")], b""))

    routes = [
        Route("/healthz", _Asgi(healthz), methods=["GET", "HEAD"]),
        Route("/services/{name}", _Asgi(to_slash), methods=METHODS),
        Route("/services/{name}/{path:path}", _Asgi(gateway.handle_http), methods=METHODS),
        WebSocketRoute("/services/{name}/{path:path}", _Asgi(gateway.handle_websocket)),
    ]
    return Starlette(routes=routes, lifespan=run if lifespan else None)
