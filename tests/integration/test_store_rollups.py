"""Telemetry rollups in the store (SQLite and PostgreSQL): a minute's raw points become one bucket per series, and
points that arrive late for a bucket already rolled are merged into it, not written beside it or lost."""

from __future__ import annotations

import pytest

from corral.store.sql import SqlStore
from corral.store.telemetry import Point

M = "gpu_utilization_percent"


def test_points_roll_into_one_bucket_per_series_and_late_ones_merge(store: SqlStore) -> None:
    base = 1_800_000_000.0  # a minute boundary (divisible by 60)
    store.insert_points(
        [Point(base + 1, "n1", 0, M, 10.0), Point(base + 30, "n1", 0, M, 30.0), Point(base + 5, "n1", 1, M, 50.0)]
        + [Point(base + 61, "n1", 0, M, 70.0)]  # the next minute
    )
    assert store.compute_and_store_rollups(base, base + 120) == 3
    got = store.query_rollups(M, base, base + 120)
    assert got == {("n1", 0): [(base, 20.0), (base + 60, 70.0)], ("n1", 1): [(base, 50.0)]}
    # a point of the first minute that came late, and one of a new series
    store.insert_points([Point(base + 59, "n1", 0, M, 80.0), Point(base + 59.5, "n2", 0, M, 5.0)])
    assert store.compute_and_store_rollups(base + 59, base + 60) == 1 + 1
    got = store.query_rollups(M, base, base + 120)
    assert got[("n1", 0)] == [(base, 40.0), (base + 60, 70.0)]  # (10 + 30 + 80) / 3
    assert got[("n2", 0)] == [(base, 5.0)] and got[("n1", 1)] == [(base, 50.0)]
    assert store.compute_and_store_rollups(base + 120, base + 180) == 0


def test_points_are_stored_as_sent_with_and_without_a_job(store: SqlStore) -> None:
    """insert_points (COPY on PostgreSQL, executemany on SQLite): every field comes back as sent."""
    base = 1_800_000_000.25
    sent = [Point(base + i / 8, "node-a", i % 3 - 1, M, 12.5 + i, 40 + i if i % 2 else None) for i in range(40)]
    assert store.insert_points(sent) == 40
    got = store.query_points(M, base, base + 10)
    want: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for p in sent:
        want.setdefault((p.node, p.gpu), []).append((p.ts, p.value))
    assert got == want
    assert store.query_points(M, base, base + 10, job_id=41) == {("node-a", 0): [(base + 1 / 8, 13.5)]}


def test_a_failed_copy_is_a_database_error_as_any_query(postgres_url: str) -> None:
    """A driver error in PostgreSQL's COPY path surfaces as SQLAlchemy's OperationalError, which the API answers
    503 (SQLite inserts through SQLAlchemy)."""
    import psycopg
    from sqlalchemy.exc import OperationalError

    from corral.store.telemetry import _copy_points

    raw = psycopg.connect(postgres_url.replace("postgresql+psycopg://", "postgresql://"))
    raw.close()
    with pytest.raises(OperationalError):
        _copy_points(raw, [Point(1.0, "n", 0, M, 1.0)])
