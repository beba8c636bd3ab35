"""Real processes: `corral up`, `corral agent` and the `corral` CLI, talking HTTP on loopback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from ports import free_port  # noqa: F401 (tests import it from here)

CORRAL = str(Path(sys.executable).with_name("corral"))
# Jobs run as unprivileged users (the agent runs as root here), who cannot execute the venv's interpreter (it
# lives under /root, 0700): a job that needs Python uses the system's, with the venv's packages on PYTHONPATH.
JOB_PYTHON = "/usr/bin/python3"
JOB_PYTHONPATH = sysconfig.get_paths()["purelib"]


# Ports handed out by free_port(), one empty file each, shared by every test process on this machine: the workers of
# a parallel run (pytest-xdist) and anyone else's run. The kernel never gives out a port that is bound, but a port
# is free between free_port() and the server's bind (seconds, while `corral up` starts), and again while a test
# restarts a server on the same port: another process asking the kernel then could be given it too. A port stays
# claimed for PORT_HOLD_S (longer than any test), then may be handed out again.
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
        self.agent_port = free_port()  # agents: mutual TLS with certificates from the cluster CA
        self.agent_url = f"https://127.0.0.1:{self.agent_port}"
        self.gateway_port = free_port()  # the services' gateway
        self.gateway_url = f"http://127.0.0.1:{self.gateway_port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        self.env.update(
            HOME=str(self.home),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            CORRAL_PORT=str(self.port),
            CORRAL_JOB_UI_PORT=str(self.ui_port),
            CORRAL_AGENT_PORT=str(self.agent_port),
            CORRAL_GATEWAY_PORT=str(self.gateway_port),
            CORRAL_DATA_DIR=str(self.data_dir),
            CORRAL_GPUS=gpus,
            CORRAL_NODE_NAME=node,
            PYTHONUNBUFFERED="1",
        )
        # Jobs run as their users' Unix identities (the tests run as root): their own dirs must lie where those
        # users can reach them, which tmp_path (under a 0700 dir) is not. `shared` is a dir any job may write.
        self.jobs_dir = Path(tempfile.mkdtemp(prefix="corral-e2e-jobs-"))
        os.chmod(self.jobs_dir, 0o711)
        self.shared = self.jobs_dir / "shared"
        self.shared.mkdir()
        os.chmod(self.shared, 0o1777)
        self.env["CORRAL_JOBS_DIR"] = str(self.jobs_dir)
        if database_url:
            self.env["CORRAL_DATABASE_URL"] = database_url
        self.procs: list[subprocess.Popen[bytes]] = []
        self.up_proc: subprocess.Popen[bytes] | None = None

    # ---- processes ------------------------------------------------------------
    def spawn(
        self, args: list[str], env: dict[str, str] | None = None, log_name: str = "proc"
    ) -> subprocess.Popen[bytes]:
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
            # a liveness probe only (an https:// server is verified by the CLI, against the cluster CA)
            return httpx.get(f"{self.url}/healthz", timeout=2, verify=False).status_code == 200
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

    def join_token(self, ttl: str = "10m", uses: int = 1) -> Path:
        """A new join token (made by the admin through the CLI), in a 0600 file; returns the file."""
        r = self.cli("tokens", "join", "create", "--ttl", ttl, "--uses", str(uses))
        assert r.returncode == 0, r.stderr
        path = self.root / f"join-token-{len(list(self.root.glob('join-token-*')))}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(r.stdout.strip() + "\n")
        return path

    def agent_env(self, node: str) -> dict[str, str]:
        return dict(self.env, CORRAL_DATA_DIR=str(self.root / f"agent-{node}"))

    def start_agent(self, node: str, gpus: str, token_file: Path | None = None) -> subprocess.Popen[bytes]:
        """A real `corral agent` that joins with a fresh one-use token (read from a file, never argv), then
        speaks mutual TLS. Pass `token_file=Path()` to start without a token (a restart reuses its certificate)."""
        args = [CORRAL, "agent", "--join", self.agent_url, "--gpus", gpus, "--node-name", node]
        if token_file is None:
            token_file = self.join_token()
        if token_file != Path():
            args += ["--token-file", str(token_file)]
        return self.spawn(args, env=self.agent_env(node), log_name=f"agent-{node}")

    def agent_tls_dir(self, node: str) -> Path:
        return self.root / f"agent-{node}" / "agent" / node / "tls"

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        # Jobs run under a shim in a session of their own (they outlive an agent restart by design): kill those
        # of this installation, found by its data directory on their command line (a shim started directly) or as
        # their working dir (one forked by the agent's shim fork server works in its job dir), and their children.
        # The root is this test's own (tmp_path, under a parallel run its worker's own base dir): `root/` never
        # matches another installation's `root2/` nor another worker's processes.
        mine = (str(self.root), str(self.jobs_dir))  # the jobs dir: mkdtemp's, unique too
        for proc in psutil.process_iter(["cmdline", "cwd"]):
            try:
                args = [*(proc.info["cmdline"] or ()), proc.info["cwd"] or ""]
                if any(f"{d}/" in arg or arg.endswith(d) for arg in args for d in mine):
                    for child in proc.children(recursive=True):
                        child.kill()
                    proc.kill()
            except psutil.Error:
                pass
        shutil.rmtree(self.jobs_dir, ignore_errors=True)

    # ---- the CLI ----------------------------------------------------------------
    def cli(
        self, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60
    ) -> subprocess.CompletedProcess[str]:
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
    # jobs' own process groups outlive `corral up` by design: end any a test left behind. tmp_path is this test's
    # own (under a parallel run, under its worker's own base dir too); the trailing / keeps test_x1 from matching
    # test_x10's processes. pkill reads the pattern as a regex: tmp_path has only [A-Za-z0-9_/-] (pytest's names).
    subprocess.run(["pkill", "-KILL", "-f", f"{tmp_path}/"], check=False)
