"""CORRAL_AGENT_THREADS: the agent port's requests run their blocking work on at most that many threads at once, so
under load a fleet's syncs queue instead of crowding people's requests (the API port's own 40 threads) out of the
interpreter. With so few threads, one node (a hostile one, or a busy one) must not fill them with work that waits
on a lock: its work runs one piece at a time, and log appends have a pool of their own (server/threads.py)."""

from __future__ import annotations

import threading
import time

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from corral.server.threads import ThreadBudget


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


def _agents(tmp_path, threads: int):  # type: ignore[no-untyped-def]
    """The agent port's app on a fresh store, with nodes "evil" (a job running on GPU 0) and "good"."""
    from datetime import UTC, datetime

    from node_certs import NodeCertApp, cert_headers, issue_node_cert

    from corral.core.resources import GpuInfo
    from corral.server.app import create_agent_app, create_app
    from corral.server.settings import Settings
    from corral.store.records import JobSpec

    app = create_app(Settings(data_dir=tmp_path, agent_threads=threads, database_url=f"sqlite:///{tmp_path / 'c.db'}"))
    store, now = app.state.ctx.store, datetime.now(UTC)
    for n in ("evil", "good"):
        store.upsert_node(n, n, "simulated", 0, 0, {}, [GpuInfo(0, f"{n}-0", "H100-80GB", 81920)], now)
    job = store.create_job(JobSpec(command=("x",), gpus=1), now).id
    assert store.assign_job(job, "evil", [0], now)
    heads = {n: cert_headers(issue_node_cert(app, n)) for n in ("evil", "good")}
    return app, NodeCertApp(create_agent_app(app)), heads, job


def _good_syncs_while(agent_app, heads, lock, jammed) -> None:  # type: ignore[no-untyped-def]
    """Holds `lock` and starts `jammed(client)` requests that wait on it, then a sync of the good node must be
    answered (a pool filled with the waiting ones would never answer it: the test fails after 30 s); then lets the
    jammed ones through."""

    async def main() -> None:
        transport = httpx.ASGITransport(app=agent_app)
        client = httpx.AsyncClient(transport=transport, base_url="http://agents", timeout=60)
        lock.acquire()
        try:
            async with client, anyio.create_task_group() as tg:
                for request in jammed(client):
                    tg.start_soon(request)
                await anyio.sleep(0.5)  # the jammed requests reach the lock
                try:
                    with anyio.fail_after(30):
                        r = await client.post("/api/v1/agents/good/sync", json={"wait_s": 0}, headers=heads["good"])
                finally:
                    lock.release()  # the jammed ones finish (a thread cannot be cancelled)
                assert r.status_code == 200, r.text
        finally:
            if lock.locked():
                lock.release()

    anyio.run(main)


def test_a_node_syncing_many_times_at_once_holds_one_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app, agent_app, heads, _ = _agents(tmp_path, threads=2)
    lock = app.state.ctx.report_order.lock("evil")  # its reports are applied one at a time, under this lock
    sync = {"wait_s": 0}
    _good_syncs_while(
        agent_app,
        heads,
        lock,
        lambda c: [lambda: c.post("/api/v1/agents/evil/sync", json=sync, headers=heads["evil"])] * 4,
    )


def test_log_appends_waiting_on_the_log_lock_leave_the_port_its_threads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app, agent_app, heads, job = _agents(tmp_path, threads=1)
    lock = app.state.ctx.logs._lock  # noqa: SLF001 (one lock for every job's appends, held across the fsync)
    url = f"/api/v1/agents/evil/jobs/{job}/logs?offset=0"
    _good_syncs_while(agent_app, heads, lock, lambda c: [lambda: c.post(url, content=b"x", headers=heads["evil"])] * 3)
