"""Ship job log files to the server incrementally, per run, resuming at the size the server holds."""

from __future__ import annotations

from pathlib import Path

from corral.sdk.client import AgentClient

CHUNK_BYTES = 1 << 20


class LogShipper:
    def __init__(self, client: AgentClient, node: str) -> None:
        self.client = client
        self.node = node
        self._sent: dict[tuple[int, int, int], int] = {}

    def ship(self, job_id: int, attempt: int, path: Path, rank: int = 0) -> None:
        """Send whatever the server does not have yet. Raises CorralSDKError on transport errors."""
        key = (job_id, attempt, rank)
        if key not in self._sent:  # learn what the server holds (after an agent restart, say)
            self._sent[key] = self.client.upload_logs(self.node, job_id, 0, b"", attempt, rank)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return
        with f:
            while True:
                f.seek(self._sent[key])
                data = f.read(CHUNK_BYTES)
                if not data:
                    return
                self._sent[key] = self.client.upload_logs(self.node, job_id, self._sent[key], data, attempt, rank)

    def forget(self, job_id: int, attempt: int, rank: int = 0) -> None:
        self._sent.pop((job_id, attempt, rank), None)
