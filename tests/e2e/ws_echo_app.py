"""A tiny WebSocket app that test_proxy_websocket.py runs as a job on $CORRAL_JOB_PORT (with `websockets`).

A handshake on the path /forbidden is refused with HTTP 403; a plain GET of /page answers 200 (a page). Every message comes back as it was (text as
text, bytes as bytes), except two commands: "hello?" answers with
what the handshake looked like (path, headers, subprotocol) as JSON, and "close CODE REASON" closes the
socket with that code. When a client closes, it prints "client closed CODE REASON" (the job's log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Sequence
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response


def process_request(ws: ServerConnection, request: Request) -> Response | None:
    if request.path == "/forbidden":
        return ws.respond(HTTPStatus.FORBIDDEN, "not you\n")
    if request.path == "/page":  # a plain page of the app, for a browser to stand on
        return ws.respond(HTTPStatus.OK, "a page of the job's app\n")
    return None


def select_subprotocol(_: ServerConnection, offered: Sequence[str]) -> str | None:
    return "corral-test" if "corral-test" in offered else None


async def handler(ws: ServerConnection) -> None:
    with contextlib.suppress(ConnectionClosed):  # a close code other than 1000/1001 ends the loop with it
        async for message in ws:
            if message == "hello?":
                assert ws.request is not None
                await ws.send(
                    json.dumps(
                        {
                            "path": ws.request.path,
                            "subprotocol": ws.subprotocol,
                            "headers": {k.lower(): v for k, v in ws.request.headers.raw_items()},
                        }
                    )
                )
            elif isinstance(message, str) and message.startswith("close "):
                code, _, reason = message.removeprefix("close ").partition(" ")
                await ws.close(int(code), reason)
                return
            else:
                await ws.send(message)
    print(f"client closed {ws.close_code} {ws.close_reason}", flush=True)


async def main() -> None:
    port = int(os.environ["CORRAL_JOB_PORT"])
    async with serve(
        handler,
        "127.0.0.1",
        port,
        process_request=process_request,
        select_subprotocol=select_subprotocol,
        max_size=None,
    ) as server:
        print(f"listening on {port}", flush=True)
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
