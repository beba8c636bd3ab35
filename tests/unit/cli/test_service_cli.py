"""`corral services` and `corral service create|show|update|scale|rollback|delete` (issue 18) against a real server
on loopback (no agent: replicas stay PENDING, which is enough for what the CLI shows); refusals name the flag or
argument the user typed; `corral jobs` and `corral show` mark a service's replicas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.cli import main as cli_main
from corral.cli.services import compute_gateway_url
from corral.server.runtime import ServerThread
from corral.server.settings import Settings
from ports import free_port

CORRAL = str(Path(sys.executable).with_name("corral"))
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("server") / "data",
        port=free_port(),
        job_ui_port=0,
        agent_port=free_port(),
        gateway_port=free_port(),
        tls="off",
    )
    srv = ServerThread(settings)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def corral(
    server: ServerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Run:
    """`corral ARGS...` in this process: (exit code, stdout, stderr)."""
    monkeypatch.setenv("CORRAL_URL", server.settings.url)
    monkeypatch.setenv("CORRAL_TOKEN", server.credentials.admin_token)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("CORRAL_GATEWAY_URL", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            cli_main.main(list(args))
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def gateway(server: ServerThread) -> str:
    return f"http://127.0.0.1:{server.settings.effective_gateway_port}"


def test_create_list_show_update_scale_rollback_delete(
    corral: Run, server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = corral(
        "service", "create", "echo", "--port", "8080", "--replicas", "2", "--env", "A=1", "--", "sh", "-c", "true"
    )
    assert code == 0, err
    # the gateway is on its own port here, not API + 3: the CLI is told by CORRAL_GATEWAY_URL, as the server is
    assert out.startswith("service echo created: revision 1, 2 replica(s), at http://127.0.0.1:")

    monkeypatch.setenv("CORRAL_GATEWAY_URL", gateway(server))
    code, out, err = corral("services")
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "REVISION", "READY/DESIRED", "ROLLOUT", "RPS", "URL"]
    name, revision, ready, rollout, rps, url = row.split()
    assert (name, revision, ready, rollout, url) == (
        "echo",
        "1",
        "0/2",
        "progressing",
        f"{gateway(server)}/services/echo/",
    )
    assert rps in ("-", "0.0")  # no figures yet, or none of the requests

    code, out, err = corral("service", "show", "echo")
    assert code == 0, err
    assert "rollout  progressing" in out and "0 ready of 2 desired" in out, out
    assert "command  sh -c true" in out and "autoscaling  off" in out
    wait_until(lambda: corral("service", "show", "echo")[1].count("PENDING") == 2, "two replica jobs")
    code, out, _ = corral("service", "show", "echo")
    table = out[out.index("JOB") :].splitlines()
    assert table[0].split() == ["JOB", "REV", "STATE", "READY", "NODE", "GPUS", "PORT", "HEALTH"]
    assert "created" in out and "replica job" in out  # the events

    code, out, err = corral("service", "show", "echo", "--json")
    shown = json.loads(out)
    assert shown["name"] == "echo" and len(shown["replicas"]) == 2

    code, out, err = corral("service", "update", "echo", "--env", "B=2", "--health-path", "/healthz")
    assert code == 0, err
    assert out.startswith("service echo: revision 2, rollout progressing"), out
    code, out, _ = corral("service", "show", "echo", "--json")
    revisions = json.loads(out)["revisions"]
    assert revisions[-1]["template"]["env"] == {"A": "1", "B": "2"} and revisions[-1]["health_path"] == "/healthz"

    code, out, err = corral("service", "update", "echo", "--max-surge", "2", "--public")
    assert code == 0 and "revision 2" in out, err  # settings only: no new revision
    assert json.loads(corral("service", "show", "echo", "--json")[1])["public"] is True

    code, out, err = corral("service", "scale", "echo", "3")
    assert code == 0 and out.startswith("service echo: 3 replica(s) desired"), err

    code, out, err = corral("service", "rollback", "echo")
    assert code == 0 and out.strip() == "service echo: rolling back to revision 1", err

    code, out, err = corral("service", "delete", "echo")
    assert code == 0 and "deleting" in out, err
    wait_until(lambda: "echo" not in corral("services")[1], "the service to be removed")


def test_jobs_and_show_mark_a_services_replicas(corral: Run) -> None:
    assert corral("service", "create", "marked", "--port", "8081", "--", "sleep", "1000")[0] == 0
    wait_until(lambda: "marked (replica r1)" in corral("jobs")[1], "the replica in `corral jobs`")
    code, out, err = corral("jobs", "--wide")
    assert code == 0 and "marked (replica r1)" in out, err
    code, out, err = corral("jobs", "--json")
    replica = next(j for j in json.loads(out) if j["name"] == "marked")  # JSON as it was: the name alone
    assert replica["kind"] == "replica" and replica["service_revision"] == 1
    code, out, err = corral("show", str(replica["id"]))
    assert "service  marked, revision 1" in out, out
    assert corral("service", "delete", "marked")[0] == 0


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(
            ("Bad_Name", "--port", "80", "--", "true"), "error: NAME: 'Bad_Name' is not a service name", id="name"
        ),
        pytest.param(("ok", "--port", "0", "--", "true"), "error: --port: ", id="port-zero"),
        pytest.param(("ok", "--port", "70000", "--", "true"), "error: --port: ", id="port-high"),
        pytest.param(("ok", "--", "true"), "error: --port: missing", id="port-missing"),
        pytest.param(("ok", "--port", "80"), "error: COMMAND: missing", id="command-missing"),
        pytest.param(
            ("ok", "--port", "80", "--min", "3", "--max", "2", "--target-rps", "5", "--", "true"),
            "error: --min: 3 is above --max 2",
            id="min-above-max",
        ),
        pytest.param(("ok", "--port", "80", "--max", "2", "--", "true"), "error: --min", id="bounds-without-rate"),
        pytest.param(
            ("ok", "--port", "80", "--health-path", "healthz", "--", "true"), "error: --health-path: ", id="health"
        ),
        pytest.param(("ok", "--port", "80", "--env", "NOEQUALS", "--", "true"), "error: --env: ", id="env"),
        pytest.param(
            ("ok", "--port", "80", "--max-surge", "0", "--max-unavailable", "0", "--", "true"),
            "error: --max-surge: ",
            id="surge",
        ),
        pytest.param(("ok", "--port", "80", "--queue", "nope", "--", "true"), "error: --queue: ", id="queue"),
    ],
)
def test_create_refusals_name_the_flag(corral: Run, argv: tuple[str, ...], words: str) -> None:
    code, out, err = corral("service", "create", *argv)
    assert code == 1, (out, err)
    assert err.startswith(words) and len(err.splitlines()) == 1, err


def test_a_flag_the_server_refuses_is_named_too(corral: Run) -> None:
    """Checked by the server alone (min above max once the max is known): still the flag's name."""
    assert (
        corral(
            "service",
            "create",
            "bounded",
            "--port",
            "80",
            "--min",
            "1",
            "--max",
            "2",
            "--target-rps",
            "5",
            "--",
            "true",
        )[0]
        == 0
    )
    code, _, err = corral("service", "update", "bounded", "--min", "3")
    assert code == 1 and err.startswith("error: --min: min (3) is above max (2)"), err
    code, _, err = corral("service", "scale", "bounded", "4")  # autoscaled: scale is refused, saying what to do
    assert code == 1 and "is autoscaled between 1 and 2 replicas" in err and "--min/--max" in err, err
    code, out, err = corral("service", "update", "bounded", "--target-rps", "0")  # 0: autoscaling off
    assert code == 0, err
    assert json.loads(corral("service", "show", "bounded", "--json")[1])["autoscaled"] is False
    assert corral("service", "scale", "bounded", "2")[0] == 0
    assert corral("service", "delete", "bounded")[0] == 0


def test_update_scale_show_of_a_missing_service(corral: Run) -> None:
    for argv in (("show", "nope"), ("update", "nope", "--public"), ("scale", "nope", "1"), ("delete", "nope")):
        code, _, err = corral("service", *argv)
        assert code == 1 and "service 'nope' not found" in err, (argv, err)
    code, _, err = corral("service", "update", "nope")
    assert code == 2 and "nothing to change" in err, err
    code, _, err = corral("service", "scale", "nope", "-1")
    assert code == 2 and "N" in err, err


@pytest.mark.parametrize(
    ("api", "env", "gateway_url"),
    [
        ("http://127.0.0.1:8600", None, "http://127.0.0.1:8603"),
        ("https://head:9000", None, "https://head:9003"),
        ("http://[::1]:8600", None, "http://[::1]:8603"),
        ("https://corral.example", None, None),  # behind a proxy: no port to add 3 to
        ("http://127.0.0.1:8600", "https://svc.example/", "https://svc.example"),
    ],
)
def test_the_gateway_url(
    api: str, env: str | None, gateway_url: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    if env is None:
        monkeypatch.delenv("CORRAL_GATEWAY_URL", raising=False)
    else:
        monkeypatch.setenv("CORRAL_GATEWAY_URL", env)
    assert compute_gateway_url(api) == gateway_url


def test_the_installed_command_lists_services(server: ServerThread, tmp_path: Path) -> None:
    env = dict(
        os.environ,
        CORRAL_URL=server.settings.url,
        CORRAL_TOKEN=server.credentials.admin_token,
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    r = subprocess.run([CORRAL, "services", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and isinstance(json.loads(r.stdout), list), r.stderr


def test_an_image_alone_runs_the_images_own_command(corral: Run) -> None:
    code, out, err = corral("service", "create", "own-cmd", "--image", "registry.example/srv:1", "--port", "8000")
    assert code == 0, err
    code, out, err = corral("service", "show", "own-cmd")
    assert code == 0 and "command  (the image's own)" in out, out
    assert corral("service", "delete", "own-cmd")[0] == 0
