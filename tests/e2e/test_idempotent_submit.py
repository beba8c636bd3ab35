"""A client that retries a submission after the server crashed makes one job, not two (issue 11); the same for
the CLI's light path and for arrays and batches (issue 13).

A real `corral up` sits behind a TCP relay. The first submission reaches the server, which accepts it; the relay
then kills the server with SIGKILL before the reply reaches the client, and starts it again. The SDK sees a
dropped connection, retries with the same Idempotency-Key until the server is back, and gets the first job."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from corral.api.schemas import JobSubmit
from corral.sdk.client import CorralClient

from .conftest import CORRAL, Corral, wait_for

pytestmark = pytest.mark.e2e


class CrashAfterAcceptRelay:
    """127.0.0.1:port -> the server. The first reply to a POST /api/v1/jobs is swallowed and `crash()` is called."""

    def __init__(self, upstream_port: int, crash: Callable[[], None]) -> None:
        self.upstream_port = upstream_port
        self.crash = crash
        self.replies: list[
            bytes
        ] = []  # the first bytes of every read of a reply to a submission, swallowed one included
        self._crashed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()  # the server is down: the client sees a dropped connection and retries
            return
        submissions = threading.Event()
        threading.Thread(target=self._pump_requests, args=(client, upstream, submissions), daemon=True).start()
        with client, upstream:
            while data := _recv(upstream):
                if submissions.is_set():
                    self.replies.append(data[:200])
                    if not self._crashed.is_set():
                        self._crashed.set()
                        self.crash()  # the job is committed (its reply is here); the client never hears of it
                        return
                client.sendall(data)

    @staticmethod
    def _pump_requests(client: socket.socket, upstream: socket.socket, submissions: threading.Event) -> None:
        while data := _recv(client):
            if b"POST /api/v1/jobs " in data or b"POST /api/v1/jobs/batch " in data:
                submissions.set()
            try:
                upstream.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def test_a_retry_after_the_server_crashed_makes_one_job(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.start()

    def crash_and_restart() -> None:
        c.kill9()
        c.up_proc = c.spawn([CORRAL, "up"], log_name="up-again")

    relay = CrashAfterAcceptRelay(c.port, crash_and_restart)
    token = (c.data_dir / "admin-token").read_text().strip()
    try:
        with CorralClient(f"http://127.0.0.1:{relay.port}", token, timeout_s=10) as client:
            job = client.submit(JobSubmit(command=["sleep", "600"], name="once"), retry_for_s=90)
    finally:
        relay.close()
    assert len(relay.replies) >= 2, "the submission was not retried"
    assert b"201" in relay.replies[0].split(b"\r\n", 1)[0]  # the first attempt was accepted...
    # ...and a retry was answered with it (a reply may reach the relay in several reads: headers, then the body)
    assert any(b"idempotent-replayed: true" in r.lower() for r in relay.replies[1:]), relay.replies
    wait_for(c.healthy, 60, "server back")
    jobs = c.api_jobs()
    assert [j["id"] for j in jobs] == [job.id] and jobs[0]["name"] == "once"


def _crashing_relay(c: Corral) -> CrashAfterAcceptRelay:
    def crash_and_restart() -> None:
        c.kill9()
        c.up_proc = c.spawn([CORRAL, "up"], log_name="up-again")

    return CrashAfterAcceptRelay(c.port, crash_and_restart)


def test_the_cli_retrying_an_array_after_the_server_crashed_makes_it_once(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.start()
    relay = _crashing_relay(c)
    try:
        env = dict(c.env, CORRAL_URL=f"http://127.0.0.1:{relay.port}")
        r = c.cli("submit", "--array", "0-4", "--name", "once", "--", "sleep", "600", env=env, timeout_s=120)
    finally:
        relay.close()
    assert r.returncode == 0, r.stderr
    assert len(relay.replies) >= 2, "the submission was not retried"
    assert any(b"idempotent-replayed: true" in x.lower() for x in relay.replies[1:]), relay.replies
    wait_for(c.healthy, 60, "server back")
    jobs = c.api_jobs()
    assert sorted(j["array_index"] for j in jobs) == [0, 1, 2, 3, 4] and {j["array_id"] for j in jobs} == {
        int(r.stdout)
    }


def test_the_sdk_retrying_a_batch_after_the_server_crashed_makes_it_once(corral_factory: Any) -> None:
    c: Corral = corral_factory(gpus="none", node="head")
    c.start()
    relay = _crashing_relay(c)
    token = (c.data_dir / "admin-token").read_text().strip()
    batch = [JobSubmit(command=["sleep", "600"], name="a"), JobSubmit(command=["sleep", "600"], name="b", array="0-1")]
    try:
        with CorralClient(f"http://127.0.0.1:{relay.port}", token, timeout_s=10) as client:
            made = client.submit_many(batch, retry_for_s=90)
    finally:
        relay.close()
    assert len(relay.replies) >= 2, "the submission was not retried"
    wait_for(c.healthy, 60, "server back")
    jobs = c.api_jobs()
    assert sorted(j["id"] for j in jobs) == sorted(j.id for j in made) and len(made) == 3
    assert [(j.name, j.array_index) for j in made] == [("a", None), ("b", 0), ("b", 1)]
