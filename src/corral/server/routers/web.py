"""The portal: one HTML shell for every page path, and its own static ES modules and CSS (no CDN)."""

from __future__ import annotations

import re
from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from corral.core.errors import AuthError, CorralError, NotFoundError
from corral.server.auth import authenticate
from corral.server.deps import StoreDep
from corral.server.services.jobs import load_job

router = APIRouter(include_in_schema=False)
WEB = files("corral.server.web")
STATIC_NAME = re.compile(r"^(pages/)?[a-z0-9_-]+\.(js|css|svg)$")
CONTENT_TYPES = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}
# The page paths the client-side router knows; each answers with the same shell.
PAGES = (
    "/",
    "/login",
    "/nodes",
    "/nodes/{name}",
    "/gpus/{node}/{index}",
    "/jobs",
    "/submit",
    "/alerts",
    "/admin",
    "/reports",
    "/schedules",
    "/services",
    "/services/{name}",  # the portal's page; the gateway (on the API port when CORRAL_GATEWAY_PORT=0) serves /services/NAME/...
    "/pools",
    "/pools/{name}",
)


# Only Corral's own files run: no inline scripts, no other origins, no framing (inline style attributes draw bars).
CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'"
)


def _shell(status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(
        WEB.joinpath("index.html").read_text(),
        status_code=status_code,
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
        },
    )


def _page() -> HTMLResponse:
    return _shell()


# Paths that programs call (the API, the session endpoints, files, jobs' web UIs): an unknown one stays a JSON 404.
MACHINE_PREFIXES = ("/api/", "/web/", "/static/", "/proxy/")


def is_page_path(method: str, path: str) -> bool:
    """A path a browser opens as a page: GET or HEAD, outside the machine prefixes."""
    return method in ("GET", "HEAD") and not (path + "/").startswith(MACHINE_PREFIXES)


def page_not_found() -> HTMLResponse:
    """The portal's own 404 view (the shell, whose router shows it) with HTTP 404, for a page path nobody serves."""
    return _shell(404)


for _path in PAGES:
    router.add_api_route(_path, _page, methods=["GET"], response_class=HTMLResponse)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job_id: str, request: Request, store: StoreDep) -> HTMLResponse:
    """The shell, with HTTP 404 when the caller's session cannot see that job (another tenant's job is
    missing, not forbidden); the page itself then shows the 404 view."""
    try:
        load_job(store, int(job_id), authenticate(request))
    except (NotFoundError, ValueError):
        return _shell(404)
    except (AuthError, CorralError):
        pass  # not logged in: the page sends the user to the login form
    return _shell()


@router.get("/static/{name:path}")
def static(name: str) -> Response:
    if not STATIC_NAME.fullmatch(name):
        return Response("not found", status_code=404, media_type="text/plain")
    path = WEB.joinpath("static", *name.split("/"))
    if not path.is_file():
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(
        path.read_bytes(), media_type=CONTENT_TYPES[name.rsplit(".", 1)[1]], headers={"Cache-Control": "no-cache"}
    )
