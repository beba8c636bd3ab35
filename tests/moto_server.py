"""moto's server as a real HTTP endpoint for AWS's APIs (EC2, S3, ...): a subprocess on a free 127.0.0.1 port, talked
to by real boto3 over HTTP (`endpoint_url=`), so a test exercises the same requests and replies a real AWS gives.

    with run_moto_server() as endpoint:   # "http://127.0.0.1:PORT"
        boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1") ...

Every service shares one server (moto keeps a state per account and region). `reset_moto(endpoint)` empties it.
Raises MotoUnavailable when moto's server is not installed or does not answer (a test then calls missing_real_part).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping

START_TIMEOUT_S = 30.0


class MotoUnavailable(RuntimeError):
    """moto's server is not installed, or did not start (the message says why)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=2) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def run_moto_server(env: Mapping[str, str] | None = None, attempts: int = 3) -> Iterator[str]:
    """Start moto's server (`python -m moto.server`) and yield its endpoint URL; stop it on exit. `env`: more
    environment for the server (e.g. MOTO_ENABLE_AMI_VALIDATION=true). A port taken between choosing and binding is
    retried on another one."""
    if not (_installed("moto") and _installed("flask")):  # flask: what moto's [server] extra brings
        raise MotoUnavailable("moto[server] is not installed")
    last = ""
    for _ in range(attempts):
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None and not _answers(endpoint):
                time.sleep(0.1)
            if proc.poll() is None and _answers(endpoint):
                yield endpoint
                return
            log.seek(0)
            last = log.read().decode(errors="replace")[-2000:]
        finally:
            _stop(proc)
            log.close()
    raise MotoUnavailable(f"moto's server did not start: {last.strip() or 'no output'}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def reset_moto(endpoint: str) -> None:
    """Forget every resource the server holds (all services, accounts and regions)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        r.read()


__all__ = ["MotoUnavailable", "reset_moto", "run_moto_server"]
