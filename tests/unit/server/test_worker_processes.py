"""CORRAL_WORKERS' parts (server/workers.py, server/runtime.py): workers share a port, while anything else that binds
it is refused as without workers; a worker serving agents runs the app's start and stop but answers no request on
its own loopback port. The processes themselves: tests/e2e/test_workers.py."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from corral.server.runtime import check_ports_free, lifespan_only
from corral.server.workers import WORKER_OF_ENV, reuse_port_sockets, worker_of


def test_workers_share_a_port_and_anything_else_is_refused_it() -> None:
    first = reuse_port_sockets("127.0.0.1", 0)
    port = first[0].getsockname()[1]
    second = reuse_port_sockets("127.0.0.1", port)  # another worker on the same port
    try:
        with pytest.raises(RuntimeError, match="is the port taken"):
            check_ports_free([("127.0.0.1", port, "is the port taken?")])  # a second `corral server`
        plain = socket.socket()
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
        plain.close()
    finally:
        for sock in first + second:
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
        assert resp.status_code == 404 and "agents" in resp.text
    assert events == ["start", "stop"]
    assert TestClient(app).get("/api/v1/jobs").json() == [1]  # the app itself would have answered


def test_only_a_pid_names_a_starter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKER_OF_ENV, raising=False)
    assert worker_of() is None
    monkeypatch.setenv(WORKER_OF_ENV, "4242")
    assert worker_of() == 4242
    monkeypatch.setenv(WORKER_OF_ENV, "4242; rm -rf /")
    assert worker_of() is None
