"""Job logs on the server: one append-only file per run (job attempt), written at explicit offsets
(idempotent), read as one stream: the attempts of a job in order.

Each run's log is capped (CORRAL_JOB_LOG_MAX_MB, plus LOG_SLACK_BYTES for the agent's own notices): an agent that
sends more - an older one, or a hostile one - has the rest discarded, told once in the log, and is answered as if
it had been written, so its shipper moves on to the run's exit report instead of retrying forever."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from corral.core.errors import ConflictError

LOG_SLACK_BYTES = 64 << 10  # room past the limit for the agent's notice lines (limit reached, bytes dropped)
_RUN_FILE = re.compile(r"^(\d+)\.(\d+)(?:\.r(\d+))?\.log$")


class LogOffsetError(ConflictError):
    def __init__(self, expected: int) -> None:
        super().__init__(f"log offset mismatch: server has {expected} bytes")
        self.expected = expected


def _capped_notice(limit: int) -> bytes:
    return f"\ncorral: this run's log reached the server's limit of {limit >> 20} MB; the server dropped the rest\n".encode()


class LogStore:
    """`max_run_bytes`: the most of one run's log stored (the job's limit; 0: no limit); LOG_SLACK_BYTES more are
    taken for the agent's notices, and the file never grows past max_run_bytes + LOG_SLACK_BYTES."""

    def __init__(self, root: Path, max_run_bytes: int = 0) -> None:
        self.root = root
        self.max_run_bytes = max_run_bytes
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
        so a retried upload is harmless. A gap raises LogOffsetError carrying the size we have.

        Past the cap, bytes are discarded (a notice line says so once) and the answer is where the sender's next
        bytes start, as if they had been written; a run whose log is full takes any offset from then on."""
        with self._lock:
            size = self.run_size(job_id, attempt, rank)
            room = None  # bytes this run's log may still take (None: no limit)
            notice = _capped_notice(self.max_run_bytes) if self.max_run_bytes > 0 else b""
            if self.max_run_bytes > 0:
                room = self.max_run_bytes + LOG_SLACK_BYTES - len(notice) - size  # < 0: full, notice written
            if offset > size and (room is None or room > 0):
                raise LogOffsetError(size)
            fresh = data[max(size - offset, 0) :] if offset <= size else b""
            kept = fresh if room is None else fresh[: max(room, 0)]
            out = kept
            if room is not None and room >= 0 and (len(kept) < len(fresh) or offset > size):
                out += notice  # the first bytes the cap drops: say so once (room < 0 from then on)
            if out:
                fd = os.open(self.path(job_id, attempt, rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with open(fd, "ab") as f:  # jobs' logs are theirs alone: 0600 in a 0700 dir
                    f.write(out)
                    f.flush()
                    os.fsync(f.fileno())
            if (room is not None and len(kept) < len(fresh)) or offset > size:
                return max(offset + len(data), size + len(out))  # dropped: the sender moves on as if written
            return size + len(out)

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
