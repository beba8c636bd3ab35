"""The `local` provider: a "cloud" of agent processes with simulated GPUs on this machine (the demo and the e2e
tests). Launching starts `corral agent --join URL --token-file F --gpus sim:4xMODEL --node-name NAME` in a
session of its own, with its data dir under `<root>/<node>/`; its pid is kept there, so a restarted server
finds its nodes again (list_instances) and terminating stops the whole process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from corral.cloud.base import GONE, PENDING, RUNNING, Instance, LaunchRequest, ProviderError

STOP_GRACE_S = 10.0
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
# Settings a local pool may take: where its agents reach a container engine (none by default: processes only)
SETTINGS = ("docker_host",)


class LocalProvider:
    name = "local"

    def __init__(self, pool: str, root: Path, settings: Mapping[str, str] | None = None) -> None:
        settings = dict(settings or {})
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ProviderError(f"settings: {', '.join(unknown)} unknown to the local provider ({', '.join(SETTINGS)})")
        self.pool = pool
        self.root = root / pool
        self.settings = settings

    def _dir(self, node: str) -> Path:
        if not SAFE_NAME.fullmatch(node):
            raise ProviderError(f"{node!r} is not a node name")
        return self.root / node

    def _pid(self, node: str) -> int | None:
        try:
            return int((self._dir(node) / "agent.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _alive(pid: int, node: str) -> bool:
        """The process lives and is that node's agent (a reused pid is not)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        if node.encode() not in cmdline:
            return False
        try:
            status = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return status.rsplit(")", 1)[-1].split()[0] != "Z"

    def launch(self, request: LaunchRequest) -> str:
        node = request.node_name
        home = self._dir(node)
        pid = self._pid(node)
        if pid is not None and self._alive(pid, node):
            return f"local:{node}"
        itype = request.instance_type
        try:
            home.mkdir(parents=True, exist_ok=True, mode=0o700)
            token_file = home / "join-token"
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(request.join_token)
            env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
            env["CORRAL_DOCKER_HOST"] = self.settings.get("docker_host", "none")
            for key in ("CORRAL_JOBS_DIR", "CORRAL_POLL_WAIT_S"):  # what a test or the demo sets for every agent
                if key in os.environ:
                    env[key] = os.environ[key]
            command = [
                sys.executable,
                "-c",
                "from corral.cli.main import main; main()",
                "agent",
                "--join",
                request.join_url,
                "--token-file",
                str(token_file),
                "--gpus",
                itype.sim_spec(),
                "--node-name",
                node,
                "--data-dir",
                str(home / "data"),
            ]
            with open(home / "agent.log", "ab") as log:
                proc = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
                )
            (home / "agent.pid").write_text(str(proc.pid))
        except OSError as e:
            raise ProviderError(f"cannot start a local agent for {node}: {e}") from e
        return f"local:{node}"

    def terminate(self, provider_id: str) -> None:
        node = provider_id.removeprefix("local:")
        pid = self._pid(node)
        if pid is None or not self._alive(pid, node):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and self._alive(pid, node):
            time.sleep(0.1)
        if self._alive(pid, node):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our child
        self._kill_leftovers(node)

    def _kill_leftovers(self, node: str) -> None:
        """A machine that goes takes its processes with it: the node's jobs (their shims outlive an agent by
        design) are found by the node's dir on their command line."""
        import psutil

        home = str(self._dir(node)) + "/"
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(home in arg for arg in proc.info["cmdline"] or ()):
                    for child in proc.children(recursive=True):
                        child.kill()
                    proc.kill()
            except psutil.Error:
                pass

    def interrupt(self, node: str, seconds: float) -> None:
        """Play a spot interruption (the demo's and the tests'): the instance reports a notice of `seconds`, then
        this provider takes it back (its agent is stopped) once they have passed."""
        home = self._dir(node)
        if not home.is_dir():
            raise ProviderError(f"no local instance {node}")
        (home / "interruption").write_text(str(time.time() + max(seconds, 0.0)))

    def _deadline(self, node: str) -> float | None:
        try:
            return float((self._dir(node) / "interruption").read_text().strip())
        except (OSError, ValueError):
            return None

    def list_instances(self) -> list[Instance]:
        out: list[Instance] = []
        if not self.root.is_dir():
            return out
        for home in sorted(self.root.iterdir()):
            node = home.name
            if not SAFE_NAME.fullmatch(node):
                continue
            pid = self._pid(node)
            if pid is None:
                out.append(Instance(f"local:{node}", node, PENDING))
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            deadline = self._deadline(node)
            if deadline is not None and time.time() >= deadline and self._alive(pid, node):
                self.terminate(f"local:{node}")  # the "cloud" takes its instance back
            state = RUNNING if self._alive(pid, node) else GONE
            left = None if deadline is None or state == GONE else max(deadline - time.time(), 0.0)
            out.append(Instance(f"local:{node}", node, state, spot=deadline is not None, interruption_s=left))
        return out


__all__ = ["LocalProvider"]
