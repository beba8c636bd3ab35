"""A WebSocket on /services/NAME/...: checked like an HTTP request, sent to a ready replica chosen the same way
(once more to another when the first cannot be reached), then relayed frame by frame (wsrelay.py).

Refusals come before the handshake completes, as the HTTP route's statuses and error bodies (401, 403, 404, 503)
where the server can send an HTTP answer to a WebSocket request, else as a policy-violation close. A replica that
does not answer closes the accepted socket with 1013 (try again later); one that refuses the upgrade, with 1011."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.responses import Response
from starlette.websockets import WebSocket
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidHandshake, InvalidStatus

from corral.gateway.headers import (
    WS_NOT_FORWARDED,
    compute_upstream_headers,
    compute_upstream_url,
    error_response,
    service_prefix,
)
from corral.gateway.model import Endpoint, ServiceRoute
from corral.gateway.wsrelay import close_accepted, close_reason, open_upstream, relay

if TYPE_CHECKING:
    from corral.gateway.app import Answer, Gateway


async def proxy_websocket(gateway: Gateway, websocket: WebSocket) -> None:
    name: str = websocket.scope["path_params"]["name"]
    route = await gateway.find_route(name)
    if route is None:
        await _refuse(websocket, error_response(404, "not_found", f"service {name!r} not found"))
        return
    gateway.stats.record_request(route.service_id)
    refusal = await gateway.check_access(websocket, route)
    if refusal is not None:
        await _refuse(websocket, refusal)
        return
    ready = gateway.ready_endpoints(route)
    if not ready and route.scale_from_zero:
        route, ready = await gateway.await_ready(route)
    failed: Endpoint | None = None
    why = "it has no ready replica"
    for _ in range(2):
        endpoint = gateway.balancer.select_endpoint(route.service_id, ready, exclude=failed)
        if endpoint is None:
            break
        gateway.balancer.acquire(endpoint)
        try:
            upstream = await _open(websocket, route, endpoint)
            if isinstance(upstream, str):  # could not reach it
                why, failed = upstream, endpoint
                gateway.prober.mark_unreachable(endpoint, f"WebSocket {websocket.scope['path']}: {why}")
                ready = gateway.ready_endpoints(route)
                continue
            if upstream is None:  # it answered, but not as a WebSocket: said in a close frame already
                gateway.stats.record_error(route.service_id)
                return
            try:
                await websocket.accept(subprotocol=upstream.subprotocol)
            except BaseException:
                await upstream.close()
                raise
            await relay(websocket, upstream)
            return
        finally:
            gateway.balancer.release(endpoint)
    gateway.stats.record_error(route.service_id)
    if failed is None:  # nothing was ready: refuse as the HTTP route does
        msg = f"service {route.name!r} has no ready replica"
        await _refuse(websocket, error_response(503, "unavailable", msg, [(b"retry-after", b"1")]))
    else:
        await close_accepted(websocket, 1013, f"service {route.name!r}: {why}; try again later")


async def _open(websocket: WebSocket, route: ServiceRoute, endpoint: Endpoint) -> ClientConnection | str | None:
    """The replica's side of the socket; or why it could not be reached (str); or None when it answered but refused
    the upgrade (the client's socket was then closed with 1011, saying why)."""
    scope = websocket.scope
    url = compute_upstream_url("ws", endpoint, scope)
    netloc = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    headers = [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in compute_upstream_headers(scope, service_prefix(route.name), WS_NOT_FORWARDED)
    ]
    try:
        return await open_upstream(websocket, url, headers, f"{netloc}:{endpoint.port}")
    except (OSError, TimeoutError) as e:
        return f"replica job {endpoint.job_id} does not answer ({type(e).__name__})"
    except InvalidHandshake as e:
        if isinstance(e, InvalidStatus):
            why = f"its answer was HTTP {e.response.status_code}, not a WebSocket"
        else:
            why = f"its WebSocket handshake failed: {e}"
        await close_accepted(websocket, 1011, f"service {route.name!r}, replica job {endpoint.job_id}: {why}")
        return None


async def _refuse(websocket: WebSocket, answer: Answer) -> None:
    status, headers, body = answer
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        response = Response(body, status_code=status)
        response.raw_headers = headers
        await websocket.send_denial_response(response)
    else:
        message = json.loads(body)["error"]["message"]
        await websocket.close(1008, close_reason(message))
