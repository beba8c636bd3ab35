"""WebSocket relaying between a gateway client and a replica: frames both ways until either side closes, the close
code and reason passed across.

The job-UI proxy (server/routers/proxy.py) relays its sockets with the same pumps, close-code rules and limits, and
adds its credential re-check around them."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

WS_OPEN_TIMEOUT_S = 10.0
WS_CLOSE_TIMEOUT_S = 5.0
WS_MAX_MESSAGE = 64 * 1024 * 1024  # from the replica or job; uvicorn limits the client's side to 16 MiB
# Close codes an endpoint may put on the wire (RFC 6455 7.4: 1004-1006 and 1015 are reserved).
SENDABLE = {1000, 1001, 1002, 1003, *range(1007, 1015), *range(3000, 5000)}


def close_reason(text: str) -> str:
    """A close reason fits in a control frame: 123 bytes of UTF-8."""
    data = text.encode()
    return text if len(data) <= 123 else data[:120].decode(errors="ignore") + "..."


def wire_code(code: int | None, reason: str, abnormal: int, why: str) -> tuple[int, str]:
    """A close code (and reason) received from one side, as one the other side may be sent."""
    if code is not None and code in SENDABLE:
        return code, close_reason(reason)
    if code == 1005:  # a close frame without a code
        return 1000, ""
    return abnormal, why  # 1006 (no close frame), 1015, or nonsense


async def open_upstream(
    websocket: WebSocket, url: str, headers: list[tuple[str, str]], authority: str
) -> ClientConnection:
    """The upstream side of `websocket` at `url` (whose host:port is `authority`): the caller's subprotocols and user
    agent, `headers`, and the upstream as its own origin (the caller was checked already, and apps that check Origin
    against their Host, Jupyter or code-server, would refuse the caller's). Raises OSError, TimeoutError or
    InvalidHandshake."""
    offered = list(websocket.scope.get("subprotocols") or [])
    return await connect(
        url,
        subprotocols=offered or None,
        additional_headers=headers,
        origin=Origin(f"http://{authority}") if "origin" in websocket.headers else None,
        user_agent_header=websocket.headers.get("user-agent"),
        proxy=None,
        open_timeout=WS_OPEN_TIMEOUT_S,
        close_timeout=WS_CLOSE_TIMEOUT_S,
        max_size=WS_MAX_MESSAGE,
    )


async def close_accepted(websocket: WebSocket, code: int, why: str) -> None:
    """Accept only to say why in a close frame (what a browser's page can read); a browser fails a socket whose
    handshake answer names none of the subprotocols it offered, so name the first."""
    offered = list(websocket.scope.get("subprotocols") or [])
    with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
        await websocket.accept(subprotocol=offered[0] if offered else None)
        await websocket.close(code, close_reason(why))


async def close_quietly(websocket: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
        await websocket.close(code, reason)


async def pump_client(websocket: WebSocket, upstream: ClientConnection) -> tuple[int, str] | None:
    """Client -> replica until the client closes (its close code and reason) or the replica's side is closed."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return int(message.get("code") or 1005), str(message.get("reason") or "")
        data = message.get("bytes")
        if data is None:
            data = message.get("text")
        if data is None:
            continue
        try:
            await upstream.send(data)
        except ConnectionClosed:
            return None


async def pump_upstream(websocket: WebSocket, upstream: ClientConnection) -> None:
    """Replica -> client until the replica's side closes (or the client is gone: the client pump sees it)."""
    with contextlib.suppress(ConnectionClosed, OSError, WebSocketDisconnect, RuntimeError):
        async for data in upstream:
            if isinstance(data, str):
                await websocket.send_text(data)
            else:
                await websocket.send_bytes(data)


async def relay(websocket: WebSocket, upstream: ClientConnection) -> None:
    client = asyncio.create_task(pump_client(websocket, upstream))
    replica = asyncio.create_task(pump_upstream(websocket, upstream))
    try:
        done, _ = await asyncio.wait({client, replica}, return_when=asyncio.FIRST_COMPLETED)
        if client in done and not client.cancelled() and client.exception() is None and (ended := client.result()):
            code, reason = ended
            await upstream.close(*wire_code(code, reason, 1001, "the client went away"))
        else:  # the replica's side closed: let the last frames out, then pass its close code on
            await asyncio.wait({replica}, timeout=WS_CLOSE_TIMEOUT_S)
            await close_quietly(
                websocket,
                *wire_code(
                    upstream.close_code, upstream.close_reason or "", 1011, "the replica dropped the connection"
                ),
            )
    finally:
        for task in (client, replica):
            task.cancel()
        await asyncio.gather(client, replica, return_exceptions=True)
        await upstream.close()
