"""Ship job log files to the server incrementally, per run, resuming at the size the server holds."""

from __future__ import annotations

import logging
from pathlib import Path

from corral.sdk.client import AgentClient, CorralAPIError

log = logging.getLogger("corral.agent")

CHUNK_BYTES = 1 << 20
REFUSED = -1  # the server refuses this run's log from this node


class LogShipper:
    def __init__(self, client: AgentClient, node: str) -> None:
        self.client = client
        self.node = node
        self._sent: dict[tuple[int, int, int], int] = {}

    def ship(self, job_id: int, attempt: int, path: Path, rank: int = 0) -> None:
        """Send whatever the server does not have yet. Raises CorralSDKError on transport errors."""
        key = (job_id, attempt, rank)
        try:
            self._ship(key, path)
        except CorralAPIError as e:
            if e.status != 403:
                raise
            # The job is no longer placed here (requeued elsewhere, revoked): the server refuses this node's
            # writes to its log. Stop shipping this run rather than block its exit report forever.
            log.warning("log of job %s attempt %s refused: %s", job_id, attempt, e)
            self._sent[key] = REFUSED

    def _ship(self, key: tuple[int, int, int], path: Path) -> None:
        job_id, attempt, rank = key
        if key not in self._sent:  # learn what the server holds (after an agent restart, say)
            self._sent[key] = self.client.upload_logs(self.node, job_id, 0, b"", attempt, rank)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return
        with f:
            while True:
                offset = self._sent.get(key)
                if offset is None or offset == REFUSED:  # forgotten meanwhile: the run's exit was acknowledged
                    return
                f.seek(offset)
                data = f.read(CHUNK_BYTES)
                if not data:
                    return
                held = self.client.upload_logs(self.node, job_id, offset, data, attempt, rank)
                if key in self._sent:
                    self._sent[key] = held

    def forget(self, job_id: int, attempt: int, rank: int = 0) -> None:
        self._sent.pop((job_id, attempt, rank), None)
