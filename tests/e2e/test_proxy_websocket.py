"""WebSockets through the job proxy: a job serving a WebSocket echo app (ws_echo_app.py) on the port Corral
assigned it ($CORRAL_JOB_PORT), reached at ws://server/proxy/jobs/ID/... with real server, agent and job processes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Close
from websockets.sync.client import ClientConnection, connect

from .conftest import JOB_PYTHON, JOB_PYTHONPATH, Corral, free_port, wait_for

pytestmark = pytest.mark.e2e
ECHO_APP = Path(__file__).with_name("ws_echo_app.py")


def _ws(c: Corral, job: int, path: str = "ws", **kw: Any) -> ClientConnection:
    return connect(
        f"ws://127.0.0.1:{c.ui_port}/proxy/jobs/{job}/{path}", open_timeout=10, proxy=None, max_size=None, **kw
    )


def _refused(c: Corral, job: int, **kw: Any) -> tuple[int, dict[str, Any]]:
    """The HTTP status and error body of a handshake the proxy refuses."""
    with pytest.raises(InvalidStatus) as e:
        _ws(c, job, **kw).close()
    return e.value.response.status_code, json.loads(e.value.response.body or b"{}")


def _closed_by_proxy(c: Corral, job: int, path: str = "ws", **kw: Any) -> tuple[Close, str | None]:
    """A socket the proxy accepts and then closes (the job's app failed): the close frame and the subprotocol."""
    with _ws(c, job, path, **kw) as ws, pytest.raises(ConnectionClosed) as e:
        ws.recv(timeout=15)
    assert e.value.rcvd is not None, e.value
    return e.value.rcvd, ws.subprotocol


def _admin(c: Corral) -> str:
    return (c.data_dir / "admin-token").read_text().strip()


def _session(c: Corral, **login: str) -> str:
    r = httpx.post(f"{c.url}/web/login", json=login)
    assert r.status_code == 200, r.text
    return r.cookies["corral_session"]


def test_websocket_echo_through_the_proxy(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    bearer = {"Authorization": f"Bearer {_admin(c)}"}
    job = c.submit(
        "--web-ui", "--name", "ws-echo", "--env", f"PYTHONPATH={JOB_PYTHONPATH}", "--", JOB_PYTHON, str(ECHO_APP)
    )
    wait_for(lambda: c.job(job)["state"] == "RUNNING", 30, "running")

    def hello() -> dict[str, Any] | None:
        try:
            with _ws(
                c,
                job,
                "ws?x=1&y=%20z",
                additional_headers=dict(bearer, **{"X-Test": "yes"}),
                subprotocols=["other", "corral-test"],
            ) as ws:
                ws.send("hello?")
                seen = json.loads(ws.recv(timeout=10))
                assert ws.subprotocol == "corral-test"
                return seen  # type: ignore[no-any-return]
        except ConnectionClosed as e:  # 1013 until the app listens
            assert e.rcvd is not None and e.rcvd.code == 1013, e
            return None
        except InvalidStatus as e:  # 409 until the agent has seen the job's own process listen on its port
            assert e.response.status_code == 409, e
            return None

    seen = wait_for(hello, 30, "the job's WebSocket app answers through the proxy")
    assert seen["path"] == "/ws?x=1&y=%20z"
    assert seen["subprotocol"] == "corral-test"
    headers = seen["headers"]
    assert headers["x-forwarded-prefix"] == f"/proxy/jobs/{job}"
    assert headers["x-test"] == "yes"
    assert "authorization" not in headers and "cookie" not in headers  # Corral's credentials stay with Corral

    # text and binary frames both ways, a large one too; the job's close code comes back
    with _ws(c, job, additional_headers=bearer) as ws:
        ws.send("héllo")
        assert ws.recv(timeout=10) == "héllo"
        ws.send(b"\x00\x01\xffbinary")
        assert ws.recv(timeout=10) == b"\x00\x01\xffbinary"
        big = os.urandom(3 * 1024 * 1024)
        ws.send(big)
        assert ws.recv(timeout=30) == big
        ws.send("close 4001 bye from the job")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "bye from the job")

    # the client's close code reaches the job
    with _ws(c, job, additional_headers=bearer) as ws:
        ws.send("ping")
        assert ws.recv(timeout=10) == "ping"
        ws.close(4002, "bye from the client")
    wait_for(
        lambda: "client closed 4002 bye from the client" in c.cli("logs", str(job)).stdout,
        15,
        "the job's app saw the client's close code",
    )

    # without credentials, or a wrong token: 401
    status, body = _refused(c, job)
    assert status == 401 and body["error"]["code"] == "unauthorized"
    assert _refused(c, job, additional_headers={"Authorization": "Bearer crl_wrong"})[0] == 401

    # the portal's session cookie works from the server's own pages only (cross-site WebSocket hijacking)
    cookie = {"Cookie": f"corral_session={_session(c, token=_admin(c))}"}
    with _ws(c, job, additional_headers=cookie, origin=c.ui_url) as ws:
        ws.send("hello?")
        headers = json.loads(ws.recv(timeout=10))["headers"]
        assert "cookie" not in headers
        assert headers["origin"] != c.ui_url  # the app sees itself as the origin
        ws.send(b"via cookie")
        assert ws.recv(timeout=10) == b"via cookie"
    status, body = _refused(c, job, additional_headers=cookie, origin="http://evil.example")
    assert status == 403 and "Origin http://evil.example" in body["error"]["message"]
    assert _refused(c, job, additional_headers=cookie)[0] == 403  # no Origin at all
    assert _refused(c, job, additional_headers=cookie, origin=c.url)[0] == 403  # the portal's origin is another
    assert _refused(c, job, additional_headers=cookie, origin=f"http://127.0.0.1:{free_port()}")[0] == 403
    with _ws(c, job, additional_headers=dict(cookie, **bearer), origin="http://evil.example") as ws:
        ws.send("a bearer header needs no Origin check")  # (a browser page cannot set one)
        assert ws.recv(timeout=10) == "a bearer header needs no Origin check"

    # another tenant's user: the job does not exist for them, by token or by cookie
    assert c.cli("tenants", "create", "vision").returncode == 0
    r = c.cli(
        "users",
        "create",
        "alice",
        "--tenant",
        "vision",
        "--password",
        env=dict(c.env, CORRAL_PASSWORD="alice-secret-1"),
    )
    assert r.returncode == 0, r.stderr
    alice = _session(c, username="alice", password="alice-secret-1")
    status, body = _refused(c, job, additional_headers={"Authorization": f"Bearer {alice}"})
    assert status == 404 and body["error"]["code"] == "not_found"
    assert _refused(c, job, additional_headers={"Cookie": f"corral_session={alice}"}, origin=c.ui_url)[0] == 404
    assert _refused(c, 999999, additional_headers=bearer)[0] == 404

    # the app refusing the upgrade: accepted, then closed with 1011 and the app's HTTP status
    closed, _ = _closed_by_proxy(c, job, "forbidden", additional_headers=bearer)
    assert closed.code == 1011 and "HTTP 403, not a WebSocket" in closed.reason

    # the HTTP route on the same path still answers (the echo app says a plain GET needs an upgrade)
    assert httpx.get(f"{c.ui_url}/proxy/jobs/{job}/ws", headers=bearer).status_code == 426

    assert c.cli("cancel", str(job)).returncode == 0
    wait_for(lambda: c.job(job)["state"] == "CANCELLED", 30, "cancelled")
    status, body = _refused(c, job, additional_headers=bearer)
    assert status == 409 and "CANCELLED" in body["error"]["message"]
    server_log = "".join(p.read_text() for p in c.root.glob("up-*.log"))
    assert "ERROR" not in server_log and "Traceback" not in server_log, server_log  # refusals are not errors


def test_websocket_to_a_job_app_that_fails(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    bearer = {"Authorization": f"Bearer {_admin(c)}"}
    silent = c.submit("--web-ui", "--", "sleep", "600")  # has a web UI, listens on nothing
    plain = c.submit(
        "--web-ui",
        "--",
        "sh",
        "-c",  # answers HTTP, not WebSocket
        f"exec {JOB_PYTHON} -m http.server $CORRAL_JOB_PORT --bind 127.0.0.1 --directory {c.shared}",
    )
    no_port = c.submit("--", "sleep", "600")
    for job in (silent, plain, no_port):
        wait_for(lambda: c.job(job)["state"] == "RUNNING", 30, f"job {job} running")

    # Nothing of the job listens on its port: refused before the handshake, never connected to the node's port.
    status, body = _refused(c, silent, additional_headers=bearer, subprotocols=["corral-test"])
    assert status == 409 and "not listening" in body["error"]["message"], body

    status, _ = _refused(c, no_port, additional_headers=bearer)
    assert status == 404

    def refused_upgrade() -> Close | None:
        try:
            closed, _ = _closed_by_proxy(c, plain, additional_headers=bearer)
        except InvalidStatus as e:  # 409 until the agent has seen http.server listen (it binds after it starts)
            if e.response.status_code != 409:
                raise
            return None
        return closed if closed.code == 1011 else None  # 1013 until it listens

    closed = wait_for(refused_upgrade, 30, "the plain HTTP app fails the upgrade")
    assert "handshake failed" in closed.reason  # http.server answers HTTP/1.0


def _closed_within(ws: ClientConnection, timeout_s: float = 20.0) -> Close:
    """The close frame the proxy sends on a socket the client keeps open (TimeoutError: none came)."""
    with pytest.raises(ConnectionClosed) as e:
        ws.recv(timeout=timeout_s)
    assert e.value.rcvd is not None, e.value
    return e.value.rcvd


def test_a_revoked_token_or_a_logout_closes_open_websockets(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    job = c.submit(
        "--web-ui", "--name", "ws-echo", "--env", f"PYTHONPATH={JOB_PYTHONPATH}", "--", JOB_PYTHON, str(ECHO_APP)
    )
    wait_for(lambda: c.job(job)["state"] == "RUNNING", 30, "running")
    token = c.cli_json("tokens", "create", "--name", "notebook")
    bearer = {"Authorization": f"Bearer {token['token']}"}

    def echoes() -> bool:
        try:
            with _ws(c, job, additional_headers=bearer) as ws:
                ws.send("up?")
                return ws.recv(timeout=10) == "up?"
        except ConnectionClosed:  # 1013 until the app listens
            return False
        except InvalidStatus as e:  # 409 until the agent has seen the job's own process listen on its port
            assert e.response.status_code == 409, e
            return False

    wait_for(echoes, 30, "the job's WebSocket app answers through the proxy")
    r = httpx.post(f"{c.url}/web/login", json={"token": _admin(c)})
    assert r.status_code == 200, r.text
    session, csrf = r.cookies["corral_session"], r.json()["csrf"]
    with (
        _ws(c, job, additional_headers=bearer) as by_token,
        _ws(c, job, additional_headers={"Cookie": f"corral_session={session}"}, origin=c.ui_url) as by_cookie,
    ):
        for ws in (by_token, by_cookie):
            ws.send("hello")
            assert ws.recv(timeout=10) == "hello"

        r2 = c.cli("tokens", "revoke", str(token["id"]))
        assert r2.returncode == 0, r2.stderr
        closed = _closed_within(by_token)
        assert (closed.code, closed.reason) == (1008, "your Corral session ended")
        by_cookie.send("the session's socket is still open")
        assert by_cookie.recv(timeout=10) == "the session's socket is still open"

        r = httpx.post(f"{c.url}/web/logout", cookies={"corral_session": session}, headers={"X-CSRF-Token": csrf})
        assert r.status_code == 204, r.text
        closed = _closed_within(by_cookie)
        assert (closed.code, closed.reason) == (1008, "your Corral session ended")
    wait_for(
        lambda: c.cli("logs", str(job)).stdout.count("client closed 1001 the Corral session ended") == 2,
        15,
        "the job's app saw both sockets closed by the proxy",
    )
