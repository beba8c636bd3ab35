"""What several benchmarks share: a free local port and a percentile (nearest rank)."""

from __future__ import annotations

import socket
from collections.abc import Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile of `values` by nearest rank (p in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]
