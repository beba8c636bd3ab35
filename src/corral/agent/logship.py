"""Ship job log files to the server incrementally, resuming at the size the server holds."""

from __future__ import annotations

from pathlib import Path

from corral.sdk.client import AgentClient

CHUNK_BYTES = 1 << 20


class LogShipper:
    def __init__(self, client: AgentClient, node: str) -> None:
        self.client = client
        self.node = node
        self._sent: dict[int, int] = {}

    def ship(self, job_id: int, path: Path) -> None:
        """Send whatever the server does not have yet. Raises CorralSDKError on transport errors."""
        if job_id not in self._sent:
            self._sent[job_id] = self.client.upload_logs(self.node, job_id, 0, b"")  # learn what it holds
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return
        with f:
            while True:
                f.seek(self._sent[job_id])
                data = f.read(CHUNK_BYTES)
                if not data:
                    return
                self._sent[job_id] = self.client.upload_logs(self.node, job_id, self._sent[job_id], data)

    def forget(self, job_id: int) -> None:
        self._sent.pop(job_id, None)
