"""A job's log stream holds every attempt in order; run_sizes says where each attempt's part ends (the
portal's per-attempt log blocks, through the X-Log-Runs header)."""

from __future__ import annotations

from pathlib import Path

from corral.server.services.logs import LogStore


def test_run_sizes_split_the_stream_by_attempt(tmp_path: Path) -> None:
    logs = LogStore(tmp_path / "logs")
    logs.append(7, 0, b"first try\n", attempt=1)
    logs.append(7, 0, b"second\n", attempt=2)
    logs.append(7, 0, b"rank one\n", attempt=2, rank=1)
    logs.append(70, 0, b"another job\n", attempt=1)
    assert logs.run_sizes(7) == [(1, 10), (2, 7)]
    assert logs.run_sizes(7, rank=1) == [(2, 9)]
    stream = logs.read(7, 0)
    assert stream[:10] == b"first try\n" and stream[10:] == b"second\n"
    assert logs.run_sizes(8) == []
