"""CORRAL_AGENT_THREADS: the agent port's requests run their blocking work on at most that many threads at once, so
under load a fleet's syncs queue instead of crowding people's requests (the API port's own 40 threads) out of the
interpreter."""

from __future__ import annotations

import threading
import time

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from corral.server.inputs import ThreadBudget


def _busy_app() -> tuple[Starlette, list[int]]:
    """A sync endpoint (run on the loop's thread pool) that records how many of its calls overlap."""
    lock, now, peak = threading.Lock(), [0], [0]

    def work(request: Request) -> PlainTextResponse:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/work", work)]), peak


def _fire(app: object, requests: int) -> None:
    async def main() -> None:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://agents") as client,
            anyio.create_task_group() as tg,
        ):
            for _ in range(requests):
                tg.start_soon(client.get, "/work")

    anyio.run(main)


def test_requests_run_on_at_most_the_budget_of_threads() -> None:
    app, peak = _busy_app()
    _fire(ThreadBudget(app, threads=3), 12)
    assert peak[0] == 3


def test_without_a_budget_the_same_requests_overlap_more() -> None:
    # the control: the loop's default pool (40 threads) runs all 12 at once, so the cap above is the budget's doing
    app, peak = _busy_app()
    _fire(app, 12)
    assert peak[0] > 3


def test_the_agent_port_takes_its_budget_from_the_settings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from corral.server.app import create_agent_app, create_app
    from corral.server.settings import Settings

    app = create_app(Settings(data_dir=tmp_path, agent_threads=5, database_url=f"sqlite:///{tmp_path / 'c.db'}"))
    budgets = [m.kwargs["threads"] for m in create_agent_app(app).user_middleware if m.cls is ThreadBudget]
    assert budgets == [5]
