"""/proxy/jobs/{id}/...: a running job's own web UI (the port Corral assigned it), through Corral's authentication.

The proxy connects only to the job's assigned port on its node, and only while the node's agent reports that the
job's own processes (and nothing else) listen there; otherwise it answers 409 saying the job's UI is not listening.

Only callers who may see the job get through (another tenant's job is 404). An HTTP request goes to the job's
node at the port and the response streams back, ending early if the caller's access ends (checked again
before a chunk, at most every ACCESS_RECHECK_S). A WebSocket on the same path is proxied too: the caller is
authenticated like the HTTP route (bearer header, or the session cookie plus an Origin of this server's own
host, against cross-site WebSocket hijacking), the server opens ws://node:port/path?query offering the
caller's subprotocols, and text and binary frames are pumped both ways until either side closes; the close
code and reason go across. An open socket lasts no longer than the caller's access: its credential is checked
again every ACCESS_RECHECK_S seconds, and when it has expired or been withdrawn (a logout, a revoked token, a role
or tenant that no longer sees the job) the client gets 1008 with the reason and the job's app 1001. Refusals
happen before the handshake completes, as the same HTTP statuses and error bodies as the HTTP route (401, 403,
404, 409); a job's app that does not answer closes the accepted socket with 1013 (try again later), one that
refuses the upgrade or fails with 1011.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote, urlsplit

import httpx
from fastapi import APIRouter, Depends, Request, WebSocket
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from starlette.background import BackgroundTask
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidHandshake, InvalidStatus

from corral.core.errors import AuthError, ConflictError, CorralError, ForbiddenError, NotFoundError
from corral.core.states import JobState
from corral.gateway.wsrelay import (
    WS_CLOSE_TIMEOUT_S,
    close_accepted,
    close_quietly,
    close_reason,
    open_upstream,
    pump_client,
    pump_upstream,
    wire_code,
)
from corral.server.auth import Principal, require_job_ui_user, require_user
from corral.server.context import ServerContext, context_of
from corral.server.errors import STATUS_BY_ERROR, error_body
from corral.server.params import Id
from corral.server.services.job_ui import job_ui_base
from corral.server.services.jobs import load_job
from corral.store.base import StateStore
from corral.store.records import Job

router = APIRouter(tags=["proxy"], include_in_schema=False)
# On the API port when job UIs have an origin of their own: old links are sent there.
redirect_router = APIRouter(tags=["proxy"], include_in_schema=False)
User = Annotated[Principal, Depends(require_job_ui_user)]
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "authorization",
    "cookie",
}
_client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0), follow_redirects=False)

# Not forwarded to the job on a WebSocket: the handshake's own headers (the client library makes them), and
# Origin and User-Agent, which are passed as the library's own arguments.
WS_NOT_FORWARDED = HOP_BY_HOP | {
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "origin",
    "user-agent",
}
# How often an open socket's or a streaming response's credential is checked again (a logout or a revoked token
# ends it within this).
ACCESS_RECHECK_S = 5.0
PATH_SAFE = "/:@!$&'()*+,;=~"  # RFC 3986 path characters that stay as they are
Recheck = Callable[[], Awaitable[str | None]]  # why an open socket's caller may no longer use it, or None
log = logging.getLogger(__name__)


def _prefix(job_id: int) -> str:
    return f"/proxy/jobs/{job_id}"


async def _job_target(ctx: ServerContext, job_id: int, caller: Principal) -> tuple[Job, str, int]:
    """The job (visible to the caller, with a web UI, running), the host and the port its web UI listens on.

    Only the port Corral assigned to the job, and only while its node's agent reports that the job's own
    processes, and nothing else, listen there (services/webports.py): never another job's port or any other
    port of the node. Refused with 409 saying why otherwise."""
    store = ctx.store
    job = await run_in_threadpool(load_job, store, job_id, caller)
    if job.spec.port is None:
        raise NotFoundError("web UI of job", str(job_id))
    if job.state is not JobState.RUNNING or not job.node:
        raise ConflictError(f"job {job_id} is {job.state.value}: its web UI is only open while it runs")
    port = job.spec.port
    why = (
        "its node has not been handed the job yet"
        if not port
        else ctx.web_ports.why_not(job.node, job.id, job.attempt, port)
    )
    if why is not None:
        raise ConflictError(f"job {job_id}'s web UI is not listening: {why}")
    node = await run_in_threadpool(store.get_node, job.node)
    return job, node.address if node else job.node, port


@router.api_route("/proxy/jobs/{job_id}/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"])
async def proxy(job_id: Id, path: str, request: Request, caller: User) -> StreamingResponse:
    _, host, port = await _job_target(context_of(request.app), job_id, caller)
    url = f"http://{host}:{port}/{path}"
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    headers["X-Forwarded-Prefix"] = _prefix(job_id)
    upstream = _client.build_request(
        request.method, url, params=request.query_params, headers=headers, content=await request.body()
    )
    try:
        response = await _client.send(upstream, stream=True)
    except httpx.HTTPError as e:
        raise ConflictError(f"job {job_id}'s web UI at port {port} does not answer: {e}") from e
    out_headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}}

    async def body() -> AsyncIterator[bytes]:
        # A long response (a log tail, server-sent events) lasts no longer than the caller's access: before a
        # chunk goes out, at most every ACCESS_RECHECK_S, the credential is checked again; the body ends there.
        checked = time.monotonic()
        async for chunk in response.aiter_raw():
            if time.monotonic() - checked >= ACCESS_RECHECK_S:
                checked = time.monotonic()
                why = await _recheck_http(request, job_id)
                if why is not None:
                    log.info("proxied response from job %s cut short: %s", job_id, why)
                    return
            yield chunk

    return StreamingResponse(
        body(), status_code=response.status_code, headers=out_headers, background=BackgroundTask(response.aclose)
    )


async def _recheck_http(request: Request, job_id: int) -> str | None:
    """Why the caller of a streaming response may no longer read it (None: they still may, or the store did not
    answer now, which is not a reason to cut it)."""
    try:
        return await run_in_threadpool(
            _access_lost, context_of(request.app).store, job_id, functools.partial(require_job_ui_user, request)
        )
    except Exception:
        log.warning("could not recheck a proxied response's credential", exc_info=True)
        return None


@redirect_router.api_route("/proxy/jobs/{job_id}/{path:path}", methods=["GET", "HEAD"])
async def to_job_ui_origin(job_id: int, path: str, request: Request) -> RedirectResponse:
    """Job UIs live on their own origin: a link to the API port's old path is redirected (GET only: a form
    post is not replayed elsewhere)."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(
        f"{job_ui_base(request)}{_prefix(job_id)}/{quote(path, safe=PATH_SAFE)}{query}", status_code=307
    )


@redirect_router.api_route("/proxy/jobs/{job_id}/{path:path}", methods=["POST", "PUT", "PATCH", "DELETE"])
async def not_on_this_origin(job_id: int, path: str, request: Request) -> JSONResponse:
    return JSONResponse(
        error_body("not_found", f"job web UIs are served at {job_ui_base(request)}{_prefix(job_id)}/"), status_code=404
    )


@redirect_router.websocket("/proxy/jobs/{job_id}/{path:path}")
async def websocket_not_on_this_origin(websocket: WebSocket, job_id: int, path: str) -> None:
    await _refuse(websocket, NotFoundError("job web UI on this origin", f"{job_id} (use {job_ui_base(websocket)})"))


# ---- WebSocket ---------------------------------------------------------------------------------------------


def _same_origin(origin: str, host: str) -> bool:
    """Whether a browser's Origin header names this server as the client reached it (its Host header)."""
    try:
        o, h = urlsplit(origin), urlsplit("//" + host)
        if o.scheme not in ("http", "https") or not o.hostname or not h.hostname:
            return False
        default = 443 if o.scheme == "https" else 80
        return (o.hostname.lower(), o.port or default) == (h.hostname.lower(), h.port or default)
    except ValueError:  # a malformed port
        return False


def _authenticate_ws(websocket: WebSocket) -> Principal:
    """The caller, checked exactly as the HTTP route checks it: the handshake is a GET, so `require_user` reads
    the same Authorization header or session cookie from the same scope. A cookie alone is not enough: a page
    on any site may open a WebSocket here and the browser would send the cookie with it (and no CSRF header
    can be added), so a cookie session must also come from a page of this server (Origin equal to Host). A
    bearer header needs no such check: a browser page cannot set one on a WebSocket."""
    principal = require_user(Request({**websocket.scope, "type": "http", "method": "GET"}))
    if "authorization" not in websocket.headers:
        origin, host = websocket.headers.get("origin", ""), websocket.headers.get("host", "")
        if not _same_origin(origin, host):
            raise ForbiddenError(
                f"a WebSocket with a session cookie must come from this server's own pages "
                f"(Origin {origin or 'missing'}, server {host or 'unknown'})"
            )
    return principal


class _DenialLogFilter(logging.Filter):
    """uvicorn's websockets-sansio protocol logs "ASGI callable returned without completing handshake." at
    ERROR after every denial response it has sent correctly (it never marks that handshake done; uvicorn
    pull request #3138). Drop that one line, and only for a connection this router has just refused."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_denied.get() and record.getMessage() == "ASGI callable returned without completing handshake.")


_denied: ContextVar[bool] = ContextVar("corral_ws_denied", default=False)
logging.getLogger("uvicorn.error").addFilter(_DenialLogFilter())


async def _refuse(websocket: WebSocket, exc: CorralError) -> None:
    """Refuse the handshake with the HTTP route's status and error body (or, where the server cannot send an
    HTTP answer to a WebSocket request, a policy-violation close, which becomes a 403)."""
    status = next((s for t, s in STATUS_BY_ERROR.items() if isinstance(exc, t)), 500)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        _denied.set(True)  # in the connection's own task: what uvicorn logs after the app returns sees it
        body = error_body(exc.code, exc.message, getattr(exc, "field", None))
        await websocket.send_denial_response(JSONResponse(body, status_code=status, headers=headers))
    else:
        await websocket.close(1008, close_reason(exc.message))


async def _guard(expires_at: datetime | None, recheck: Recheck | None) -> tuple[str, str]:
    """Wait until the credential the socket was opened with no longer holds: it expires, or `recheck` (every
    ACCESS_RECHECK_S) gives a reason. The close reasons for the job's side and for the client's."""
    while True:
        left = math.inf if expires_at is None else (expires_at - datetime.now(UTC)).total_seconds()
        if left <= 0:
            return "the Corral session expired", "your Corral session expired"
        if recheck is None and left == math.inf:
            await asyncio.Event().wait()  # nothing to watch: until the relay ends and cancels this
        await asyncio.sleep(left if recheck is None else min(left, ACCESS_RECHECK_S))
        if recheck is None or (expires_at is not None and expires_at <= datetime.now(UTC)):
            continue  # (expired meanwhile: say so rather than ask the store)
        try:
            why = await recheck()
        except Exception:  # a store that does not answer now: the session is not over for that; ask again later
            log.warning("could not recheck a proxied WebSocket's credential", exc_info=True)
            continue
        if why is not None:
            return "the Corral session ended", why


async def _relay(
    websocket: WebSocket, upstream: ClientConnection, expires_at: datetime | None, recheck: Recheck | None = None
) -> None:
    client = asyncio.create_task(pump_client(websocket, upstream))
    job = asyncio.create_task(pump_upstream(websocket, upstream))
    guard = asyncio.create_task(_guard(expires_at, recheck))
    try:
        done, _ = await asyncio.wait({client, job, guard}, return_when=asyncio.FIRST_COMPLETED)
        if guard in done:  # the credential the socket was opened with expired or was withdrawn
            to_job, to_client = guard.result()
            await upstream.close(1001, to_job)
            await close_quietly(websocket, 1008, close_reason(to_client))
        elif client in done and not client.cancelled() and client.exception() is None and (ended := client.result()):
            code, reason = ended
            await upstream.close(*wire_code(code, reason, 1001, "the client went away"))
        else:  # the job's side closed: let the last frames out, then pass its close code on
            await asyncio.wait({job}, timeout=WS_CLOSE_TIMEOUT_S)
            await close_quietly(
                websocket,
                *wire_code(
                    upstream.close_code, upstream.close_reason or "", 1011, "the job's web UI dropped the connection"
                ),
            )
    finally:
        for task in (client, job, guard):
            task.cancel()
        await asyncio.gather(client, job, guard, return_exceptions=True)
        await upstream.close()


def _access_lost(store: StateStore, job_id: int, authenticate: Callable[[], Principal]) -> str | None:
    """Why the caller may no longer use an open socket or response from the job (None: they still may), checked
    with the request's own rules (`authenticate`) against the store as it is now: a logout or a revoked token, a
    role or tenant that no longer sees the job. Blocks on the store: run it in a thread."""
    try:
        load_job(store, job_id, authenticate())
    except AuthError:
        return "your Corral session ended"
    except CorralError:
        return f"access to job {job_id} was withdrawn"
    return None


@router.websocket("/proxy/jobs/{job_id}/{path:path}")
async def proxy_websocket(websocket: WebSocket, job_id: Id, path: str) -> None:
    try:
        caller = await run_in_threadpool(_authenticate_ws, websocket)
        _, host, port = await _job_target(context_of(websocket.app), job_id, caller)
    except CorralError as e:
        await _refuse(websocket, e)
        return
    query = websocket.scope.get("query_string", b"").decode("latin-1")
    netloc = f"[{host}]" if ":" in host else host
    url = f"ws://{netloc}:{port}/{quote(path, safe=PATH_SAFE)}" + (f"?{query}" if query else "")
    headers = [(k, v) for k, v in websocket.headers.items() if k.lower() not in WS_NOT_FORWARDED]
    headers.append(("X-Forwarded-Prefix", _prefix(job_id)))
    try:
        upstream = await open_upstream(websocket, url, headers, f"{netloc}:{port}")
    except (OSError, TimeoutError, InvalidHandshake) as e:
        if isinstance(e, InvalidStatus):
            code, why = 1011, f"its answer was HTTP {e.response.status_code}, not a WebSocket"
        elif isinstance(e, InvalidHandshake):
            code, why = 1011, f"its WebSocket handshake failed: {e}"
        else:
            code, why = 1013, f"it does not answer ({type(e).__name__}); try again later"
        await close_accepted(websocket, code, f"job {job_id}'s web UI at port {port}: {why}")
        return
    try:
        await websocket.accept(subprotocol=upstream.subprotocol)
    except BaseException:
        await upstream.close()
        raise
    await _relay(
        websocket,
        upstream,
        caller.token.expires_at,
        functools.partial(
            run_in_threadpool,
            _access_lost,
            context_of(websocket.app).store,
            job_id,
            functools.partial(_authenticate_ws, websocket),
        ),
    )
