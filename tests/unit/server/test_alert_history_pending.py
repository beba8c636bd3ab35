"""The alert history keeps what fired and what resolved. A job's idle alert that is still pending when the job ends
(a job that ran 5 s: its GPUs were never busy) is dropped with the job's series and leaves no "pending" row behind,
neither in the current alerts nor in the history; rows such a pending alert left in an older version are not shown."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from corral.alerts.evaluator import SeriesPoint
from corral.alerts.rules import make_labels
from corral.server.auth import Principal
from corral.server.health import TelemetryService
from corral.server.services.alerting import AlertService
from corral.server.settings import Settings
from corral.store.records import TokenRecord
from corral.store.sql import SqlStore, open_store
from corral.store.telemetry import AlertHistoryRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _idle(job: str) -> SeriesPoint:
    return SeriesPoint("job_gpu_utilization_percent", make_labels({"job": job, "tenant": "", "node": "n1"}), 0.0)


def _unhealthy() -> SeriesPoint:
    return SeriesPoint("gpu_unhealthy", make_labels({"node": "n1", "gpu": 0, "uuid": "GPU-0", "reason": "xid 79"}), 1.0)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[AlertService, SqlStore, Principal]]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    store = open_store(url)
    admin = store.create_user("root", "admin", T0)
    caller = Principal(TokenRecord(1, admin.id, "user", "t", T0, False), admin)
    yield (
        AlertService(store, cast(TelemetryService, None), Settings(data_dir=tmp_path, database_url=url)),
        store,
        caller,
    )
    store.close()


def _rounds(service: AlertService, monkeypatch: pytest.MonkeyPatch, *rounds: list[SeriesPoint]) -> None:
    """One evaluation per list of series, 5 s apart (what compute_series would build from running jobs)."""
    for i, series in enumerate(rounds):
        monkeypatch.setattr(service, "compute_series", lambda now, s=series: s)
        service.evaluate(1000.0 + 5 * i)


def _states(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["rule"], r["state"]) for r in rows]


def test_an_idle_alert_pending_when_its_job_ends_leaves_no_row(
    setup: tuple[AlertService, SqlStore, Principal], monkeypatch: pytest.MonkeyPatch
) -> None:
    service, store, admin = setup
    _rounds(service, monkeypatch, [_idle("7")])
    assert _states(service.list_alerts(admin, None)) == [("job_gpu_idle", "pending")]  # while job 7 runs
    _rounds(service, monkeypatch, [])  # job 7 ended: its series is gone
    assert service.list_alerts(admin, None) == []
    assert store.list_alert_history() == [] and service.history(admin, 100) == []


def test_firing_and_resolved_are_still_history(
    setup: tuple[AlertService, SqlStore, Principal], monkeypatch: pytest.MonkeyPatch
) -> None:
    service, _, admin = setup
    _rounds(service, monkeypatch, [_unhealthy(), _idle("8")], [])
    assert _states(service.history(admin, 100)) == [("gpu_unhealthy", "resolved"), ("gpu_unhealthy", "firing")]


def test_pending_rows_an_older_version_wrote_are_not_shown(setup: tuple[AlertService, SqlStore, Principal]) -> None:
    service, store, admin = setup
    old = AlertHistoryRecord("f1", "job_gpu_idle", "pending", "warning", {"job": "3"}, 0.0, "idle", T0)
    store.add_alert_history([old])
    assert service.history(admin, 100) == []
