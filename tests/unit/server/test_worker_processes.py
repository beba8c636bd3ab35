"""CORRAL_WORKERS' parts (server/workers.py, server/runtime.py): the starter binds the agents' port and its workers
accept on the socket it hands them, while anything else that binds it is refused as without workers; a worker serving agents runs the app's start and stop but answers no request on
its own loopback port. The processes themselves: tests/e2e/test_workers.py."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from corral.core.telemetry import GpuEvent, GpuEventKind, GpuProcess, GpuSample, HostSample, TelemetryBatch
from corral.server.runtime import check_ports_free, lifespan_only
from corral.server.settings import Settings
from corral.server.workers import (
    WAKE_BUDGETS,
    WAKE_POOLS,
    WAKE_SCHEDULER,
    WAKE_SERVICES,
    WORKER_FDS_ENV,
    WORKER_OF_ENV,
    WORKER_WAKE_ENV,
    BatchChannel,
    NotAWorker,
    Workers,
    bind_sockets,
    inherited_sockets,
    inherited_wakes,
    read_batches,
    watch_progress,
    worker_of,
)


def test_the_starter_binds_the_agents_port_and_its_workers_accept_on_the_socket_it_hands_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound = bind_sockets("127.0.0.1", 0)
    port = bound[0].getsockname()[1]
    try:
        with pytest.raises(RuntimeError, match="is the port taken"):
            check_ports_free([("127.0.0.1", port, "is the port taken?")])  # a second `corral server`
        handed = os.dup(bound[0].fileno())  # what a worker inherits
        monkeypatch.setenv(WORKER_FDS_ENV, str(handed))
        (inherited,) = inherited_sockets()
        try:
            client = socket.create_connection(("127.0.0.1", port), 2)
            inherited.setblocking(True)
            inherited.settimeout(2)
            conn, _ = inherited.accept()  # the worker's copy accepts the connection made to the starter's port
            conn.close()
            client.close()
        finally:
            inherited.close()
    finally:
        for sock in bound:
            sock.close()


def test_a_worker_serving_agents_starts_and_stops_the_app_but_answers_no_request() -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        events.append("start")
        yield
        events.append("stop")

    app = FastAPI(lifespan=lifespan)

    @app.get("/api/v1/jobs")
    def jobs() -> list[int]:
        return [1]

    with TestClient(lifespan_only(app)) as client:
        assert events == ["start"]
        resp = client.get("/api/v1/jobs")
        assert resp.status_code == 404 and "answers no request" in resp.text
    assert events == ["start", "stop"]
    assert TestClient(app).get("/api/v1/jobs").json() == [1]  # the app itself would have answered


def test_only_its_starter_makes_a_process_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """CORRAL_WORKER_OF set by hand would skip every port check: it counts only in a child of that pid that was
    handed the agents' sockets."""
    monkeypatch.delenv(WORKER_OF_ENV, raising=False)
    monkeypatch.delenv(WORKER_FDS_ENV, raising=False)
    assert worker_of() is None
    monkeypatch.setenv(WORKER_OF_ENV, str(os.getpid()))  # this shell's own pid, as a person would set it
    with pytest.raises(NotAWorker, match="CORRAL_WORKER_OF"):
        worker_of()
    monkeypatch.setenv(WORKER_OF_ENV, str(os.getppid()))
    with pytest.raises(NotAWorker):
        worker_of()  # no sockets handed over
    monkeypatch.setenv(WORKER_FDS_ENV, "7")
    assert worker_of() == os.getppid()
    monkeypatch.setenv(WORKER_OF_ENV, f"{os.getppid()}; rm -rf /")
    with pytest.raises(NotAWorker):
        worker_of()


def _sent_through_a_channel(
    batch: TelemetryBatch, stored: int
) -> tuple[socket.socket, BatchChannel, threading.Thread, list[tuple[TelemetryBatch, int]]]:
    """`batch` sent on a worker's channel end, and what the starter's reader got of it (waited for, 2 s at most)."""
    worker_end, starter_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    got: list[tuple[TelemetryBatch, int]] = []
    channel = BatchChannel(worker_end)
    channel.send(batch, stored)
    reader = read_batches(starter_end, lambda b, n: got.append((b, n)))
    for _ in range(200):
        if got:
            break
        reader.join(0.01)
    return worker_end, channel, reader, got


def test_a_workers_batches_reach_the_starter_whole_and_a_busy_starter_never_blocks_the_worker() -> None:
    """The starter's /metrics and latest values come from the batches its workers received (BatchChannel)."""
    host = HostSample(1.0, 12.5, 64, 1.0, 2.0, 3.0, 1000, 2000, 5, 10, 1, 2, 3, 4)
    gpu = GpuSample(ts=1.0, index=3, uuid="GPU-3", utilization_percent=97.0, memory_used_mib=70000, power_w=650.0)
    xid = GpuEvent(ts=1.0, kind=GpuEventKind.XID, gpu_index=3, xid=79, detail="fallen off the bus")
    batch = TelemetryBatch(node="n7", ts=1.0, host=host, gpus=(gpu,), events=(xid,), gpu_count=8)
    worker_end, channel, reader, got = _sent_through_a_channel(batch, 17)
    assert got == [(batch, 17)]
    worker_end.shutdown(socket.SHUT_RDWR)  # the worker exits: the starter's reader ends
    reader.join(2)
    assert not reader.is_alive()
    # a starter that reads nothing: the worker's sends are dropped, never block its request
    busy_worker, busy_starter = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    busy = BatchChannel(busy_worker)
    for _ in range(10_000):
        busy.send(batch, 1)
    assert busy.dropped > 0
    busy_worker.close()
    busy_starter.close()


def test_a_batch_too_large_for_the_channel_still_brings_its_gpus_values() -> None:
    """The agent protocol allows batches larger than a datagram may be (64 GPUs with 1,024 processes each, 1,000
    events with long details): the starter, which reads back nothing its own workers stored, gets the GPUs' values
    and the events' kinds, without the process lists and the details' tails."""
    procs = tuple(GpuProcess(pid=p, used_memory_mib=1) for p in range(1024))
    gpus = tuple(
        GpuSample(ts=1.0, index=i, uuid=f"GPU-{i}", temperature_c=80.0 + i, processes=procs) for i in range(64)
    )
    events = tuple(
        GpuEvent(ts=1.0, kind=GpuEventKind.XID, gpu_index=i % 64, xid=79, detail="x" * 1000) for i in range(1000)
    )
    batch = TelemetryBatch(node="n9", ts=1.0, host=None, gpus=gpus, events=events, gpu_count=64)
    worker_end, channel, reader, got = _sent_through_a_channel(batch, 3)
    assert channel.dropped == 0 and len(got) == 1
    slim, stored = got[0]
    assert stored == 3 and [g.temperature_c for g in slim.gpus] == [g.temperature_c for g in gpus]
    assert all(g.processes == () for g in slim.gpus)
    assert all(e.xid == 79 and len(e.detail) <= 80 for e in slim.events)
    worker_end.close()
    reader.join(2)


def _until(cond: Callable[[], object], s: float = 2.0) -> None:
    deadline = time.monotonic() + s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_starter_wakes_the_loops_process_loops_and_relays_its_agents_workers_batches(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The people's API changed what a loop of the loops' process acts on (a submission, a budget, a pool, a service
    scaled to zero): the starter tells it, one byte per loop; each batch an agents' worker forwards reaches the
    loops' process too (its alert rounds read the GPUs' XID events, which are stored nowhere), and so does an agents'
    worker's wake for the scheduler (GPUs freed)."""
    workers = Workers(Settings(data_dir=tmp_path), [])
    woken: list[bytes] = []
    wake, wake_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    relay, relay_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    workers._wake, workers._relay = wake, relay  # as _spawn("loops") leaves them
    monkeypatch.setenv(WORKER_WAKE_ENV, str(wake_theirs.fileno()))
    handlers = {k: (lambda k=k: woken.append(k)) for k in (WAKE_SCHEDULER, WAKE_BUDGETS, WAKE_POOLS, WAKE_SERVICES)}
    reader = inherited_wakes(handlers)
    assert reader is not None
    for kind in (WAKE_BUDGETS, WAKE_SCHEDULER, WAKE_POOLS, WAKE_SERVICES):
        workers.tell(kind)
    _until(lambda: len(woken) == 4)
    assert woken == [WAKE_BUDGETS, WAKE_SCHEDULER, WAKE_POOLS, WAKE_SERVICES]

    gpu = GpuSample(ts=1.0, index=3, uuid="GPU-3", utilization_percent=97.0, memory_used_mib=70000, power_w=650.0)
    xid = GpuEvent(ts=1.0, kind=GpuEventKind.XID, gpu_index=3, xid=79, detail="fallen off the bus")
    batch = TelemetryBatch(node="n7", ts=1.0, host=None, gpus=(gpu,), events=(xid,), gpu_count=8)
    on_starter: list[tuple[TelemetryBatch, int]] = []
    on_loops: list[tuple[TelemetryBatch, int]] = []
    read_batches(relay_theirs, lambda b, n: on_loops.append((b, n)))
    worker_end, starter_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_batches(  # as Workers._spawn reads an agents' worker's channel
        starter_end,
        lambda b, n: on_starter.append((b, n)),
        relay=workers.relay,
        on_wake=lambda: workers.tell(WAKE_SCHEDULER),
    )
    BatchChannel(worker_end).send(batch, 9)
    _until(lambda: on_loops)
    assert on_starter == on_loops == [(batch, 9)]
    # a job that ended on an agents' worker's node freed GPUs: the wake reaches the loops' process's scheduler, on
    # the wake channel (never behind batches)
    BatchChannel(worker_end).send_wake()
    _until(lambda: len(woken) == 5)
    assert woken[4:] == [WAKE_SCHEDULER] and on_starter == on_loops == [(batch, 9)]  # a wake, not a batch

    workers.stop()  # the starter's ends close: the loops' process's readers end
    reader.join(2)
    assert not reader.is_alive()
    workers.tell(WAKE_SCHEDULER)  # nothing to tell any more: never raises
    worker_end.close()


def test_the_loops_process_gives_up_once_a_loop_finished_no_pass_for_too_long() -> None:
    """Nothing else on the machine takes the lease over from a loops' process that hangs: it exits (and its starter
    starts another) once its lease renewal or its scheduler finished no pass for STUCK_AFTER_S."""

    class FakeLoop:
        def __init__(self, name: str) -> None:
            self.name, self.passes = name, 0

    renewal, scheduler = FakeLoop("leadership"), FakeLoop("scheduler")
    stuck: list[str] = []
    stop = threading.Event()
    watcher = watch_progress([renewal, scheduler], stuck.append, stuck_after_s=0.3, every_s=0.02, stop=stop)
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # both keep passing: nothing is stuck
        renewal.passes += 1
        scheduler.passes += 1
        time.sleep(0.02)
    assert stuck == []
    deadline = time.monotonic() + 1.0
    while not stuck and time.monotonic() < deadline:  # the scheduler's pass never ends; the renewal goes on
        renewal.passes += 1
        time.sleep(0.02)
    assert stuck == ["scheduler"]
    watcher.join(1)
    assert not watcher.is_alive()  # said once
    stop.set()
