"""/proxy/jobs/{id}/...: a running job's own web UI (the port it declared), through Corral's authentication.

Only callers who may see the job get through (another tenant's job is 404). The request goes to the job's
node at the port; the response streams back. HTTP only (no WebSocket upgrade).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import httpx
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from corral.core.errors import ConflictError, NotFoundError
from corral.core.states import JobState
from corral.server.auth import Principal, require_user
from corral.server.services.jobs import load_job

router = APIRouter(tags=["proxy"], include_in_schema=False)
User = Annotated[Principal, Depends(require_user)]
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host", "content-length", "authorization", "cookie"}
_client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0), follow_redirects=False)


@router.api_route("/proxy/jobs/{job_id}/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"])
async def proxy(job_id: int, path: str, request: Request, caller: User) -> StreamingResponse:
    store = request.app.state.store
    job = await run_in_threadpool(load_job, store, job_id, caller)
    if not job.spec.port:
        raise NotFoundError("web UI of job", str(job_id))
    if job.state is not JobState.RUNNING or not job.node:
        raise ConflictError(f"job {job_id} is {job.state.value}: its web UI is only open while it runs")
    node = await run_in_threadpool(store.get_node, job.node)
    host = node.address if node else job.node
    url = f"http://{host}:{job.spec.port}/{path}"
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    headers["X-Forwarded-Prefix"] = f"/proxy/jobs/{job_id}"
    upstream = _client.build_request(request.method, url, params=request.query_params, headers=headers,
                                     content=await request.body())
    try:
        response = await _client.send(upstream, stream=True)
    except httpx.HTTPError as e:
        raise ConflictError(f"job {job_id}'s web UI at port {job.spec.port} does not answer: {e}") from e
    out_headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}}

    async def body() -> AsyncIterator[bytes]:
        async for chunk in response.aiter_raw():
            yield chunk

    return StreamingResponse(body(), status_code=response.status_code, headers=out_headers,
                             background=BackgroundTask(response.aclose))
