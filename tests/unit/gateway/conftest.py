"""Real servers for the gateway's tests: toy replicas (a small Starlette app under uvicorn) and the gateway itself
under uvicorn, each in a thread of its own, on free loopback ports; a static in-memory RouteSource."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from corral.core.errors import AuthError
from corral.gateway import Endpoint, Gateway, ServiceRoute, create_gateway_app
from ports import free_port


def wait_until(check: Callable[[], bool], timeout_s: float = 10.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class ServerThread:
    """An ASGI app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", proxy_headers=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        wait_until(lambda: self.server.started, what=f"uvicorn on port {self.port}")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


SIZED_BYTES = 64 * 1024  # /sized's body


@dataclass
class Replica:
    """A toy replica: /healthz answers `health_status`; /echo tells what it got; /slow waits `slow_s`; /sse sends
    one event, then a second once `release` is set; /hold answers once
    `release` is set; /chunked sends a chunked body; /sized sends the first half of a SIZED_BYTES body (with its
    content-length), the rest once `release` is set; /ws echoes frames. With `break_off`, every path but /healthz
    gets its headers and half its body, then the connection closes (a replica killed in the middle of an answer)."""

    job_id: int
    attempt: int = 1
    health_status: int = 200
    slow_s: float = 0.0
    break_off: bool = False
    hits: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    server: ServerThread | None = None

    def app(self) -> Any:
        async def healthz(_: Request) -> Response:
            return PlainTextResponse("ok" if self.health_status < 300 else "bad", status_code=self.health_status)

        async def echo(request: Request) -> Response:
            self.hits.append(request.url.path)
            if self.slow_s:
                await asyncio.sleep(self.slow_s)
            body = await request.body()
            return JSONResponse(
                {
                    "job": self.job_id,
                    "method": request.method,
                    "path": request.url.path,
                    "raw_path": request.scope["raw_path"].decode(),
                    "query": request.url.query,
                    "headers": dict(request.headers),
                    "body": body.decode(),
                }
            )

        async def sse(_: Request) -> Response:
            async def events() -> Any:
                yield b"data: one\n\n"
                await asyncio.to_thread(self.release.wait, 10)
                yield b"data: two\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        async def hold(request: Request) -> Response:
            self.hits.append(f"/hold {request.method}")
            await asyncio.to_thread(self.release.wait, 10)
            return PlainTextResponse("released")

        async def chunked(_: Request) -> Response:
            async def parts() -> Any:
                for i in range(5):
                    yield f"part{i};".encode()

            return StreamingResponse(parts(), media_type="text/plain")

        async def sized(_: Request) -> Response:
            async def halves() -> Any:
                yield b"a" * (SIZED_BYTES // 2)
                await asyncio.to_thread(self.release.wait, 10)
                self.hits.append("/sized: the rest")
                yield b"b" * (SIZED_BYTES - SIZED_BYTES // 2)

            return StreamingResponse(halves(), headers={"content-length": str(SIZED_BYTES)})

        async def ws(websocket: WebSocket) -> None:
            await websocket.accept(subprotocol=(websocket.scope.get("subprotocols") or [None])[0])
            try:
                while True:
                    message = await websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        return
                    if message.get("text") == "close-please":
                        await websocket.close(4001, "asked to")
                        return
                    if message.get("text") is not None:
                        await websocket.send_text(f"{self.job_id}:{message['text']}")
                    elif message.get("bytes") is not None:
                        await websocket.send_bytes(message["bytes"])
            except WebSocketDisconnect:
                return

        app = Starlette(
            routes=[
                Route("/healthz", healthz),
                Route("/sse", sse),
                Route("/chunked", chunked),
                Route("/hold", hold, methods=["GET", "POST"]),
                Route("/sized", sized),
                WebSocketRoute("/ws", ws),
                Route("/{path:path}", echo, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
            ]
        )

        async def breaking(scope: Any, receive: Any, send: Any) -> None:
            if not self.break_off or scope["type"] != "http" or scope["path"] == "/healthz":
                await app(scope, receive, send)
                return
            self.hits.append(scope["path"])
            body = b'{"job": %d, "pad": "%s"}' % (self.job_id, b"x" * 1000)
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
            # returning with the answer unfinished: uvicorn closes the connection

        return breaking

    def start(self) -> Replica:
        self.server = ServerThread(self.app()).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    @property
    def endpoint(self) -> Endpoint:
        assert self.server is not None
        return Endpoint(self.job_id, self.attempt, "127.0.0.1", self.server.port, revision=1)


class StaticRoutes:
    """A RouteSource kept in memory; tests change it while the gateway runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._routes: dict[str, ServiceRoute] = {}

    def routes(self) -> Mapping[str, ServiceRoute]:
        with self._lock:
            return dict(self._routes)

    def put(self, route: ServiceRoute) -> None:
        with self._lock:
            self._routes[route.name] = route

    def add_endpoint(self, name: str, endpoint: Endpoint) -> None:
        with self._lock:
            route = self._routes[name]
            self._routes[name] = replace(route, endpoints=(*route.endpoints, endpoint))


def make_route(name: str, *endpoints: Endpoint, service_id: int = 1, **kw: Any) -> ServiceRoute:
    defaults: dict[str, Any] = dict(
        tenant_id=1, public=True, queue_limit=0, scale_from_zero=False, health_path="/healthz"
    )
    defaults.update(kw)
    return ServiceRoute(service_id=service_id, name=name, endpoints=tuple(endpoints), **defaults)


TOKEN = "good-token"


async def bearer_authorize(conn: HTTPConnection, route: ServiceRoute) -> None:
    """Only `Authorization: Bearer good-token` may use a non-public route."""
    if conn.headers.get("authorization") != f"Bearer {TOKEN}":
        raise AuthError("a valid API token is needed")


class GatewayServer:
    def __init__(self, gateway: Gateway, server: ServerThread) -> None:
        self.gateway, self.server = gateway, server

    @property
    def url(self) -> str:
        return self.server.url

    def wait_ready(self, *replicas: Replica) -> None:
        wait_until(lambda: all(self.gateway.prober.ready(r.job_id, r.attempt) for r in replicas), what="replicas ready")


@pytest.fixture
def replicas() -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def start(job_id: int, **kw: Any) -> Replica:
        r = Replica(job_id, **kw).start()
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()


@pytest.fixture
def gateway_server() -> Iterator[Callable[..., GatewayServer]]:
    """`gateway_server(source, **gateway_kwargs)`: a Gateway under uvicorn (lifespan on), refreshing and probing
    fast (routes every 50 ms, probes every 100 ms)."""
    started: list[GatewayServer] = []

    def start(source: StaticRoutes, **kw: Any) -> GatewayServer:
        kw.setdefault("authorize", bearer_authorize)
        kw.setdefault("refresh_s", 0.05)
        kw.setdefault("probe_interval_s", 0.1)
        gateway = Gateway(source, **kw)
        gs = GatewayServer(gateway, ServerThread(create_gateway_app(gateway)).start())
        started.append(gs)
        return gs

    yield start
    for gs in started:
        gs.server.stop()
