"""Job logs on the server: one append-only file per run (job attempt), written at explicit offsets
(idempotent), read as one stream: the attempts of a job in order."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from corral.core.errors import ConflictError

_RUN_FILE = re.compile(r"^(\d+)\.(\d+)(?:\.r(\d+))?\.log$")


class LogOffsetError(ConflictError):
    def __init__(self, expected: int) -> None:
        super().__init__(f"log offset mismatch: server has {expected} bytes")
        self.expected = expected


class LogStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def path(self, job_id: int, attempt: int = 1, rank: int = 0) -> Path:
        return self.root / (f"{job_id}.{attempt}.log" if rank == 0 else f"{job_id}.{attempt}.r{rank}.log")

    def _runs(self, job_id: int, rank: int = 0) -> list[Path]:
        """The job's run logs of one rank (a multi-node job's part), oldest attempt first."""
        found = []
        for p in self.root.glob(f"{job_id}.*.log"):
            m = _RUN_FILE.fullmatch(p.name)
            if m and int(m.group(1)) == job_id and int(m.group(3) or 0) == rank:
                found.append((int(m.group(2)), p))
        return [p for _, p in sorted(found)]

    def run_size(self, job_id: int, attempt: int = 1, rank: int = 0) -> int:
        try:
            return self.path(job_id, attempt, rank).stat().st_size
        except FileNotFoundError:
            return 0

    def run_sizes(self, job_id: int, rank: int = 0) -> list[tuple[int, int]]:
        """(attempt, bytes) of each run log of one rank, oldest first: where each attempt's part of the stream ends."""
        out = []
        for p in self._runs(job_id, rank):
            m = _RUN_FILE.fullmatch(p.name)
            try:
                out.append((int(m.group(2)) if m else 0, p.stat().st_size))
            except FileNotFoundError:
                continue
        return out

    def size(self, job_id: int, rank: int = 0) -> int:
        """Bytes of the whole stream (every attempt) of one rank."""
        return sum(p.stat().st_size for p in self._runs(job_id, rank))

    def append(self, job_id: int, offset: int, data: bytes, attempt: int = 1, rank: int = 0) -> int:
        """Write `data` that starts at byte `offset` of that run's log; bytes we already hold are skipped,
        so a retried upload is harmless. A gap raises LogOffsetError carrying the size we have."""
        with self._lock:
            size = self.run_size(job_id, attempt, rank)
            if offset > size:
                raise LogOffsetError(size)
            fresh = data[size - offset :]
            if fresh:
                fd = os.open(self.path(job_id, attempt, rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with open(fd, "ab") as f:  # jobs' logs are theirs alone: 0600 in a 0700 dir
                    f.write(fresh)
                    f.flush()
                    os.fsync(f.fileno())
            return size + len(fresh)

    def read(self, job_id: int, offset: int, limit: int = 1 << 20, rank: int = 0) -> bytes:
        """Up to `limit` bytes of one rank's stream from `offset`."""
        out = bytearray()
        for p in self._runs(job_id, rank):
            try:
                size = p.stat().st_size
            except FileNotFoundError:
                continue
            if offset >= size:
                offset -= size
                continue
            with open(p, "rb") as f:
                f.seek(offset)
                out += f.read(limit - len(out))
            offset = 0
            if len(out) >= limit:
                break
        return bytes(out)
