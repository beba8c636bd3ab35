"""The first web page at `/`: nodes, GPUs (free/used) and jobs, read through the API."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def index() -> HTMLResponse:
    return HTMLResponse(files("corral.server.web").joinpath("index.html").read_text())
