"""What several benchmarks share: a free local port, a percentile (nearest rank), a throwaway PostgreSQL database,
a `corral up` to measure."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def wait_for(pred: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.05) -> Any:
    """pred()'s first truthy answer, or SystemExit naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every_s)
    raise SystemExit(f"{what}: not reached within {timeout_s:.0f} s")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def temp_pg_database(admin_url: str, prefix: str = "corral_bench") -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database made through `admin_url`, dropped (connections and all) after."""
    import uuid

    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile of `values` by nearest rank (p in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def make_bench_root(with_marks: bool = False) -> Path:
    """A fresh temp dir for one run, 0711: jobs run as their own Unix users (root agent) and reach only what they
    are told by name. With `with_marks`, a world-writable sticky `marks/` in it where jobs leave timestamps."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    root.chmod(0o711)
    if with_marks:
        (root / "marks").mkdir()
        (root / "marks").chmod(0o1777)
    return root


def start_corral_up(
    command: Sequence[str], root: Path, env_extra: dict[str, str], log: Path | None = None, timeout_s: float = 90.0
) -> tuple[subprocess.Popen[bytes], str, str]:
    """`corral up` (command, e.g. [".venv/bin/corral"]) with its data dir, HOME and config under `root`, on a free
    port, in its own session; returns (process, URL, admin token) once the API answers. Exits loudly when it does
    not within `timeout_s` (the tail of `log` shown when one was given). `env_extra` adds or overrides CORRAL_*
    settings (CORRAL_GPUS defaults to sim:8xH100-80GB); the caller's other CORRAL_* variables are dropped."""
    import httpx

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(
        CORRAL_PORT=str(port),
        CORRAL_DATA_DIR=str(root / "data"),
        CORRAL_GPUS="sim:8xH100-80GB",
        HOME=str(root),
        XDG_CONFIG_HOME=str(root / ".config"),
    )
    env.update(env_extra)
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen([*command, "up"], env=env, stdout=out, stderr=out, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/api/v1/nodes", headers={"Authorization": "Bearer x"}).status_code == 401:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            stop_corral(proc)
            sys.exit(f"`corral up` did not serve (exit {proc.returncode}){': ' + tail if tail else ''}")
        time.sleep(0.1)
    return proc, url, (root / "data" / "admin-token").read_text().strip()


def stop_corral(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to the server's whole session, then a kill if it is still there after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
