"""A node whose job moved elsewhere is refused that job's log (403): the shipper stops shipping that run instead
of raising on every pass (which would hold back the run's exit report forever); other errors still raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.agent.logship import LogShipper
from corral.sdk.client import CorralAPIError


class RefusingClient:
    def __init__(self, status: int) -> None:
        self.status = status
        self.calls = 0

    def upload_logs(self, node: str, job_id: int, offset: int, data: bytes, attempt: int = 1, rank: int = 0) -> int:
        self.calls += 1
        raise CorralAPIError(self.status, "forbidden", "job 7 (attempt 1) is not placed on node n1", None, {})


def test_a_refused_run_is_no_longer_shipped(tmp_path: Path) -> None:
    log = tmp_path / "7.1.log"
    log.write_bytes(b"hello\n")
    client = RefusingClient(403)
    shipper = LogShipper(client, "n1")  # type: ignore[arg-type]
    shipper.ship(7, 1, log)
    shipper.ship(7, 1, log)
    assert client.calls == 1


@pytest.mark.parametrize("status", [401, 500])
def test_other_refusals_still_raise(tmp_path: Path, status: int) -> None:
    log = tmp_path / "7.1.log"
    log.write_bytes(b"hello\n")
    shipper = LogShipper(RefusingClient(status), "n1")  # type: ignore[arg-type]
    with pytest.raises(CorralAPIError):
        shipper.ship(7, 1, log)
