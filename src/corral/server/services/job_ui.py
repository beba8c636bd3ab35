"""A job as the API shows it, with the link to its web UI on the origin job UIs are served from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request, WebSocket

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


def job_out(
    request: Request, store: StateStore, sched: Scheduler, job: Job, names: dict[int, str] | None = None
) -> JobOut:
    """The job's wire shape with the scheduler's pending reason, position and ETA."""
    if names is None:
        names = known_tenant_names(store, (job.spec.tenant_id,))
    out = to_out(job, sched.pending_reasons, names, sched.pending_info, sched.pending_codes)
    if job.state in (JobState.PENDING, JobState.RUNNING):
        guess = sched.predictions.predict(job, names, sched.user_names())
        if guess is not None:
            out.predicted_run_s, out.prediction = round(guess.median_s, 1), guess.describe()
    if out.web_url:  # on the job-UI origin when it has one (CORRAL_JOB_UI_PORT)
        out.web_url = job_ui_base(request) + out.web_url
    return out
