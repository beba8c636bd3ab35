"""Loopback ports for tests' servers: one the kernel offers free, and that no other test process on this machine
(an xdist worker, a parallel run) and no earlier call of this one was given lately. Two calls in a row can otherwise
get the same port from the kernel (it happened in CI: a server's API and gateway ports were the same, and its
settings refused them)."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from pathlib import Path

PORTS_DIR = Path(tempfile.gettempdir()) / "corral-test-ports"
PORT_HOLD_S = 900.0


def _claim_port(port: int) -> bool:
    """Claim `port` for this process: True unless another process claimed it within PORT_HOLD_S."""
    mark = PORTS_DIR / str(port)
    for _ in range(2):
        try:
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return True
        except FileExistsError:
            pass
        try:
            if time.time() - mark.stat().st_mtime < PORT_HOLD_S:
                return False
            stale = mark.with_name(f"{port}.stale.{os.getpid()}.{time.monotonic_ns()}")
            os.rename(mark, stale)  # of several processes that found it stale, one renames it
            if time.time() - stale.stat().st_mtime < PORT_HOLD_S:  # renamed a fresh claim made meanwhile: undo
                os.rename(stale, mark)
                return False
            stale.unlink()
        except FileNotFoundError:
            return False
    return False


def free_port() -> int:
    """A loopback port that nothing listens on and that no other test process on this machine was given lately."""
    PORTS_DIR.mkdir(exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(PORTS_DIR, 0o1777)  # every user's test runs share it
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if _claim_port(port):
            return port
    raise AssertionError(f"no free loopback port: 200 ports the kernel offered are all claimed in {PORTS_DIR}")
