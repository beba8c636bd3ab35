"""A job as the API shows it, with the link to its web UI on the origin job UIs are served from."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fastapi import Request, WebSocket
from pydantic import TypeAdapter

from corral.api.schemas import JobOut
from corral.core.states import JobState
from corral.server.context import context_of
from corral.server.services.jobs import to_out
from corral.server.services.tenancy import known_tenant_names
from corral.store.base import StateStore
from corral.store.records import Job

if TYPE_CHECKING:
    from corral.server.background.scheduling import Scheduler


def job_ui_base(request: Request | WebSocket) -> str:
    """Where job UIs are served: CORRAL_JOB_UI_URL, else this request's host at the job-UI port; "" when they
    share the API's origin (links stay relative)."""
    settings = context_of(request.app).settings
    if not settings.effective_job_ui_port:
        return ""
    return _base(request, settings.job_ui_url, settings.effective_job_ui_port)


def gateway_base(request: Request | WebSocket) -> str:
    """Where the services' gateway answers: CORRAL_GATEWAY_URL, else this request's host at the gateway port, else
    (the gateway on the API port) this request's own origin."""
    settings = context_of(request.app).settings
    return _base(request, settings.gateway_url, settings.effective_gateway_port or request.url.port)


def _base(request: Request | WebSocket, configured: str, port: int | None) -> str:
    """The operator's public URL when set, else this request's scheme and host at `port` (none: no port)."""
    if configured:
        return str(configured).rstrip("/")
    host = request.url.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if request.url.scheme in ("https", "wss") else "http"
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


_ASK = object()  # job_out: ask the predictor
# the scheduler's word on pending jobs: reasons, (queue position, ETA) and codes, by job id
Pending = tuple[dict[int, str], dict[int, tuple[int, datetime | None]], dict[int, str]]


def job_out(
    request: Request,
    store: StateStore,
    sched: Scheduler,
    job: Job,
    names: dict[int, str] | None = None,
    guess: Any = _ASK,
    pending: Pending | None = None,
) -> JobOut:
    """The job's wire shape with the scheduler's pending reason, position and ETA. `guess`: the run-time prediction
    when the caller asked for it already; `pending`: the scheduler's (reasons, info, codes) as the caller read them
    (a pass replaces them whole)."""
    if names is None:
        names = known_tenant_names(store, (job.spec.tenant_id,))
    reasons, info, codes = pending or (sched.pending_reasons, sched.pending_info, sched.pending_codes)
    out = to_out(job, reasons, names, info, codes)
    if job.state in (JobState.PENDING, JobState.RUNNING):
        if guess is _ASK:
            guess = sched.predictions.predict(job, names, sched.user_names())
        if guess is not None:
            out.predicted_run_s, out.prediction = round(guess.median_s, 1), guess.describe()
    if out.web_url:  # on the job-UI origin when it has one (CORRAL_JOB_UI_PORT)
        out.web_url = job_ui_base(request) + out.web_url
    return out


_JOB_JSON: TypeAdapter[JobOut] = TypeAdapter(JobOut)
MAX_KEPT_JSON = 4096  # bytes of a job's JSON that JobPages keeps (most jobs: ~1.2 KB)


class JobPages:
    """Each listed job's JSON, kept while nothing it is made of changed: a page of 500 jobs built 500 `JobOut`
    models and serialised them on every `GET /api/v1/jobs`, most of that request's time once its rows are kept
    (SqlStore.list_jobs). A job's entry holds what its JSON was made of: the job itself (the store hands back the very
    object it keeps while the row's version stays), the scheduler's reason, code, position and ETA for it, its
    tenant's name, its run-time prediction (the predictor's answer, kept by identity) and where job UIs are served.
    A job with an ETA is made afresh each time (`eta_s` counts down)."""

    MAX_KEPT = 10_000  # entries; past this many it starts again (with MAX_KEPT_JSON: 40 MiB at most)

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Job, tuple[Any, ...], Any, bytes]] = {}
        self._lock = threading.Lock()

    def json(
        self, request: Request, store: StateStore, sched: Scheduler, jobs: Sequence[Job], names: dict[int, str]
    ) -> bytes:
        """The JSON array of `jobs` as `[job_out(...) for job in jobs]` would serialise (by alias, as FastAPI does)."""
        base = job_ui_base(request)
        # read once: every job's key and JSON are made of these (a pass replaces them whole meanwhile)
        reasons, codes, info = sched.pending_reasons, sched.pending_codes, sched.pending_info
        pending: Pending = (reasons, info, codes)
        users = sched.user_names()
        kept = self._kept
        parts: list[bytes] = []
        made: list[tuple[Job, tuple[Any, ...], Any, bytes]] = []
        for job in jobs:
            guess = (
                sched.predictions.predict(job, names, users)
                if job.state in (JobState.PENDING, JobState.RUNNING)
                else None
            )
            where = info.get(job.id)
            key = (reasons.get(job.id), codes.get(job.id), where, names.get(job.spec.tenant_id or 0), base)
            entry = kept.get(job.id)
            if entry is not None and entry[0] is job and entry[2] is guess and entry[1] == key:
                parts.append(entry[3])
                continue
            out = job_out(request, store, sched, job, names, guess, pending)
            data = _JOB_JSON.dump_json(out, by_alias=True)
            parts.append(data)
            # no ETA (nothing in it depends on the time) and not large (a job may carry 512 KiB of command and
            # environment: read and made each time, as the store does)
            if (where is None or where[1] is None) and len(data) <= MAX_KEPT_JSON:
                made.append((job, key, guess, data))
        if made:
            with self._lock:
                if len(kept) + len(made) > self.MAX_KEPT:
                    kept.clear()
                for entry in made:
                    kept[entry[0].id] = entry
        return b"[" + b",".join(parts) + b"]"
