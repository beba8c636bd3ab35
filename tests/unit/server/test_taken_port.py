"""A server whose agent or job-UI port is taken says which, and never serves its API port in the meantime (a
script that waits for the API would otherwise see a server that exits a moment later)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import httpx
import pytest

from corral.server.runtime import ServerThread, check_ports_free
from corral.server.settings import Settings
from ports import free_port


@pytest.mark.parametrize(
    ("taken", "setting"), [("agent_port", "CORRAL_AGENT_PORT"), ("job_ui_port", "CORRAL_JOB_UI_PORT")]
)
def test_a_taken_port_fails_the_start_before_the_api_answers(tmp_path: Path, taken: str, setting: str) -> None:
    ports = {"port": free_port(), "agent_port": free_port(), "job_ui_port": free_port()}
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", ports[taken]))
        holder.listen()
        srv = ServerThread(Settings(data_dir=tmp_path / "data", gateway_port=0, **ports))
        answers: list[int] = []
        done = threading.Event()

        def watch_api() -> None:  # as a script waiting for the server would
            while not done.is_set():
                try:
                    answers.append(httpx.get(f"http://127.0.0.1:{ports['port']}/api/v1/nodes").status_code)
                except httpx.TransportError:
                    done.wait(0.005)

        watcher = threading.Thread(target=watch_api)
        watcher.start()
        try:
            with pytest.raises(RuntimeError) as e:
                srv.start()
        finally:
            done.set()
            watcher.join()
        assert answers == []  # the API never answered
        assert f"127.0.0.1:{ports[taken]} could not be opened" in str(e.value) and setting in str(e.value)
        assert all(not listener.thread.is_alive() for listener in srv.listeners)  # nothing started
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{ports['port']}/api/v1/nodes")


def test_two_listeners_given_one_port_fail_before_either_opens() -> None:
    port = free_port()
    with pytest.raises(RuntimeError, match="the second could not be opened: Address already in use"):
        check_ports_free(
            [
                ("127.0.0.1", port, "the first could not be opened"),
                ("127.0.0.1", port, "the second could not be opened"),
            ]
        )
    check_ports_free([("127.0.0.1", port, "free again")])  # the probes are closed


@pytest.mark.skipif(not socket.has_ipv6, reason="this machine has no IPv6 sockets")
def test_an_ipv6_wildcard_is_not_refused_for_an_ipv4_listener_on_its_port() -> None:
    with socket.socket() as v4:  # as uvicorn binds "::": an IPv6-only socket, so an IPv4 listener does not clash
        v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        v4.bind(("0.0.0.0", 0))
        v4.listen()
        try:
            check_ports_free([("::", v4.getsockname()[1], "refused")])
        except RuntimeError as e:
            assert "Cannot assign requested address" in str(e) or "not supported" in str(e)  # no IPv6 address here
