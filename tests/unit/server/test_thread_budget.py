"""CORRAL_AGENT_THREADS: agents' syncs and telemetry run their blocking work on a pool of that many threads of their
own, so under load a fleet's work queues for a few threads instead of 40 taking turns on one interpreter. With so
few threads, one node (a hostile one, or a busy one) must not fill them with work that waits on a lock: its work runs
one piece at a time, and log uploads have a pool of their own (server/threads.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import httpx

from corral.server.threads import _agent_threads, _pool, on_log_thread, on_node_thread


def _overlap(calls: list[Callable[[Callable[[], None]], Awaitable[None]]]) -> int:
    """Runs every call at once, each handed a blocking piece of work (50 ms); returns how many pieces overlapped."""
    lock, now, peak = threading.Lock(), [0], [0]

    def work() -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for call in calls:
                tg.start_soon(call, work)

    anyio.run(main)
    return peak[0]


def test_nodes_work_runs_on_at_most_the_agents_threads() -> None:
    assert _overlap([partial(on_node_thread, f"n{i}", 3) for i in range(12)]) == 3


def test_the_loops_own_pool_would_run_the_same_work_all_at_once() -> None:
    # the control: anyio's default pool (40 threads, left to joins and identity checks) runs all 12 at once
    assert _overlap([anyio.to_thread.run_sync] * 12) == 12


def test_one_nodes_work_runs_one_piece_at_a_time() -> None:
    assert _overlap([partial(on_node_thread, "n1", 8)] * 6) == 1
    assert _overlap([partial(on_log_thread, "n1")] * 6) == 1
    assert _overlap([partial(on_log_thread, f"n{i}") for i in range(6)]) == 6


def test_agents_leave_the_loops_own_pool_as_it_was(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Joins, identity checks and registration keep the loop's 40 threads: requests that have shown no node's
    certificate (a forged join waiting on the SQLite write gate) never take the agents' few."""
    _, agent_app, heads, _ = _agents(tmp_path, threads=2)

    async def main() -> tuple[int, int]:
        transport = httpx.ASGITransport(app=agent_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://agents") as client:
            r = await client.post("/api/v1/agents/good/sync", json={"wait_s": 0}, headers=heads["good"])
            assert r.status_code == 200, r.text
        return anyio.to_thread.current_default_thread_limiter().total_tokens, _pool(_agent_threads, 2).total_tokens

    assert anyio.run(main) == (40, 2)


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
