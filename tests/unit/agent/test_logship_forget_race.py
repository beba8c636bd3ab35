"""The agent's log shipper while the sync acknowledges the same run's exit on another thread: the run is forgotten
(and its log deleted) between two chunks. The shipper stops shipping that run; it must not raise (a KeyError here
once stopped the whole agent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral.agent.logship import LogShipper


class ForgettingClient:
    """Holds what it was sent; after the first chunk, the other thread forgets the run (as sync_once does)."""

    def __init__(self) -> None:
        self.shipper: LogShipper | None = None
        self.received = b""

    def upload_logs(self, node: str, job_id: int, offset: int, data: bytes, attempt: int, rank: int) -> int:
        if not data:  # "what do you hold?"
            return len(self.received)
        assert offset == len(self.received)
        self.received += data
        if self.shipper is not None:
            self.shipper.forget(job_id, attempt, rank)
        return len(self.received)


def test_a_run_forgotten_between_two_chunks_stops_its_shipping_quietly(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr("corral.agent.logship.CHUNK_BYTES", 4)
    log = tmp_path / "run.log"
    log.write_bytes(b"0123456789")
    client = ForgettingClient()
    shipper = LogShipper(client, "n1")  # type: ignore[arg-type]
    client.shipper = shipper
    shipper.ship(7, 1, log)  # no KeyError
    assert client.received == b"0123"  # the first chunk went; the run was forgotten before the second
    client.shipper = None
    shipper.ship(7, 1, log)  # a later call learns the server's size again and sends the rest
    assert client.received == b"0123456789"
