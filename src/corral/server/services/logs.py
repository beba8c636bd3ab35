"""Job logs on the server: one append-only file per job, written at explicit offsets (idempotent)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from corral.core.errors import ConflictError


class LogOffsetError(ConflictError):
    def __init__(self, expected: int) -> None:
        super().__init__(f"log offset mismatch: server has {expected} bytes")
        self.expected = expected


class LogStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def path(self, job_id: int) -> Path:
        return self.root / f"{job_id}.log"

    def size(self, job_id: int) -> int:
        try:
            return self.path(job_id).stat().st_size
        except FileNotFoundError:
            return 0

    def append(self, job_id: int, offset: int, data: bytes) -> int:
        """Write `data` that starts at byte `offset` of the job's log; bytes we already hold are skipped,
        so a retried upload is harmless. A gap raises LogOffsetError carrying the size we have."""
        with self._lock:
            size = self.size(job_id)
            if offset > size:
                raise LogOffsetError(size)
            fresh = data[size - offset:]
            if fresh:
                with open(self.path(job_id), "ab") as f:
                    f.write(fresh)
                    f.flush()
                    os.fsync(f.fileno())
            return size + len(fresh)

    def read(self, job_id: int, offset: int, limit: int = 1 << 20) -> bytes:
        try:
            with open(self.path(job_id), "rb") as f:
                f.seek(offset)
                return f.read(limit)
        except FileNotFoundError:
            return b""
