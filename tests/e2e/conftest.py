"""Real processes: `corral up`, `corral agent` and the `corral` CLI, talking HTTP on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

CORRAL = str(Path(sys.executable).with_name("corral"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(pred: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition") -> Any:
    """Poll `pred` until it returns something truthy; fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout_s} s (last: {last!r})")


class Corral:
    """One `corral up` installation: its data dir, HOME (for the CLI config) and port."""

    def __init__(self, root: Path, gpus: str = "sim:8xH100-80GB", database_url: str = "", node: str = "node-a") -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.data_dir = root / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ui_port = free_port()  # jobs' web UIs, on an origin of their own
        self.ui_url = f"http://127.0.0.1:{self.ui_port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        self.env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"), CORRAL_PORT=str(self.port),
                        CORRAL_JOB_UI_PORT=str(self.ui_port),
                        CORRAL_DATA_DIR=str(self.data_dir), CORRAL_GPUS=gpus, CORRAL_NODE_NAME=node,
                        PYTHONUNBUFFERED="1")
        if database_url:
            self.env["CORRAL_DATABASE_URL"] = database_url
        self.procs: list[subprocess.Popen[bytes]] = []
        self.up_proc: subprocess.Popen[bytes] | None = None

    # ---- processes ------------------------------------------------------------
    def spawn(self, args: list[str], env: dict[str, str] | None = None, log_name: str = "proc") -> subprocess.Popen[bytes]:
        log = open(self.root / f"{log_name}-{len(self.procs)}.log", "wb")
        p = subprocess.Popen(args, env=env or self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def start(self) -> None:
        self.up_proc = self.spawn([CORRAL, "up"], log_name="up")
        wait_for(self.healthy, 60, "server healthy")
        wait_for(lambda: self.cli_json("nodes"), 30, "local node registered")

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def kill9(self) -> None:
        assert self.up_proc is not None
        self.up_proc.send_signal(signal.SIGKILL)
        self.up_proc.wait(10)

    def interrupt(self) -> int:
        assert self.up_proc is not None
        self.up_proc.send_signal(signal.SIGINT)
        return self.up_proc.wait(30)

    def start_agent(self, node: str, gpus: str) -> subprocess.Popen[bytes]:
        token = (self.data_dir / "join-token").read_text().strip()
        env = dict(self.env, CORRAL_DATA_DIR=str(self.root / f"agent-{node}"))
        return self.spawn([CORRAL, "agent", "--server", self.url, "--token", token, "--gpus", gpus,
                           "--node-name", node], env=env, log_name=f"agent-{node}")

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        # Jobs run under a shim in a session of their own (they outlive an agent restart by design): kill those
        # of this installation, found by its data directory on their command line, and their children.
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(str(self.root) in arg for arg in proc.info["cmdline"] or ()):
                    for child in proc.children(recursive=True):
                        child.kill()
                    proc.kill()
            except psutil.Error:
                pass

    # ---- the CLI ----------------------------------------------------------------
    def cli(self, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CORRAL, *args], env=env or self.env, capture_output=True, text=True, timeout=timeout_s)

    def cli_json(self, *args: str) -> Any:
        r = self.cli(*args, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def cli_json_as(self, env: dict[str, str], *args: str) -> Any:
        r = self.cli(*args, "--json", env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def submit(self, *args: str) -> int:
        r = self.cli("submit", *args)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.strip())

    def job(self, job_id: int) -> dict[str, Any]:
        return self.cli_json("show", str(job_id))  # type: ignore[no-any-return]

    def api_events(self, job_id: int) -> list[dict[str, Any]]:
        token = (self.data_dir / "admin-token").read_text().strip()
        r = httpx.get(f"{self.url}/api/v1/jobs/{job_id}/events", headers={"Authorization": f"Bearer {token}"})
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]

    def api_jobs(self) -> list[dict[str, Any]]:
        """All jobs straight from the REST API (faster than the CLI when polling a race)."""
        token = (self.data_dir / "admin-token").read_text().strip()
        r = httpx.get(f"{self.url}/api/v1/jobs", params={"all": "true"}, headers={"Authorization": f"Bearer {token}"})
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]


@pytest.fixture
def corral_factory(tmp_path: Path) -> Iterator[Callable[..., Corral]]:
    made: list[Corral] = []

    def make(name: str = "c", **kw: Any) -> Corral:
        c = Corral(tmp_path / name, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
    # jobs' own process groups outlive `corral up` by design: end any a test left behind
    subprocess.run(["pkill", "-KILL", "-f", str(tmp_path)], check=False)
