"""CORRAL_URL may name several server replicas (issue 17): every CLI command, light (submit, jobs) or not (nodes,
whoami), fails over from one that cannot be reached to one that answers, against a real server on loopback; a bad
URL in the list is an error naming CORRAL_URL and what is wrong, before any request."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.server.runtime import ServerThread
from corral.server.settings import Settings
from ports import free_port

CORRAL = str(Path(sys.executable).with_name("corral"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("server") / "data",
        port=free_port(),
        job_ui_port=0,
        gateway_port=0,
        agent_port=free_port(),
        tls="off",
    )
    srv = ServerThread(settings)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def corral(server: ServerThread, url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        CORRAL_URL=url,
        CORRAL_TOKEN=server.credentials.admin_token,
        XDG_CONFIG_HOME=str(tmp_path / "config"),  # no saved config: CORRAL_URL alone
    )
    return subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=60)


def test_every_command_fails_over_from_a_dead_replica_to_a_live_one(server: ServerThread, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    urls = f"{dead},{server.settings.url}"
    r = corral(server, urls, tmp_path, "submit", "--name", "failover", "--", "true")
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    r = corral(server, urls, tmp_path, "jobs")
    assert r.returncode == 0, r.stderr
    assert job_id in r.stdout and "failover" in r.stdout
    r = corral(server, urls, tmp_path, "whoami")  # the typer app's CorralClient
    assert r.returncode == 0 and r.stdout.startswith("admin "), r.stderr
    # every replica down: one line naming each URL tried
    other = f"http://127.0.0.1:{free_port()}"
    r = corral(server, f"{dead},{other}", tmp_path, "jobs")
    assert r.returncode == 1 and r.stderr.startswith("error: no Corral server answered (2 tried): "), r.stderr
    assert dead in r.stderr and other in r.stderr and len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:1,ftp://head:8600", "'ftp://head:8600' is not an http:// or https:// URL"),
        ("http://127.0.0.1:1,,http://127.0.0.1:2", "an empty URL"),
        ("http://head:86000", "a port that is not a number from 1 to 65535"),
    ],
)
@pytest.mark.parametrize("command", ["jobs", "whoami"])
def test_a_bad_url_names_corral_url(server: ServerThread, tmp_path: Path, url: str, words: str, command: str) -> None:
    r = corral(server, url, tmp_path, command)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: CORRAL_URL: ") and words in r.stderr, r.stderr
    assert "cannot reach" not in r.stderr
