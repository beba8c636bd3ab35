"""Usage reports (pure): GPU-hours clipped to the range, grouped by tenant, user, GPU model and day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.core.errors import ValidationError
from corral.server.services.reports import JobRun, compute_usage_rows, render_csv

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def job(
    job_id: int,
    tenant: int,
    user: int,
    start_h: float,
    end_h: float | None,
    gpus: int = 1,
    milli: int = 1000,
    node: str = "n1",
    util: float | None = None,
) -> JobRun:
    return JobRun(
        job_id,
        tenant,
        user,
        gpus,
        milli,
        1,
        T0 + timedelta(hours=start_h),
        None if end_h is None else T0 + timedelta(hours=end_h),
        ((node, tuple(range(gpus))),),
        util,
    )


JOBS = [
    job(1, 1, 10, 0, 2, gpus=4),
    job(2, 2, 20, 1, 3, gpus=1, milli=500),
    job(3, 1, 11, 23, 25, gpus=2),
    job(4, 2, 20, -5, -1, gpus=8),
]  # job 4 ended before the range
TENANTS = {1: "vision", 2: "nlp"}
USERS = {10: "alice", 11: "carol", 20: "bob"}
MODELS = {("n1", i): "H100-80GB" for i in range(8)}


@pytest.mark.parametrize(
    ("group_by", "expected"),
    [
        pytest.param("tenant", {"vision": (8 + 4, 2), "nlp": (1.0, 1)}, id="by-tenant"),
        pytest.param("user", {"alice": (8, 1), "carol": (4, 1), "bob": (1.0, 1)}, id="by-user"),
        pytest.param("gpu_model", {"H100-80GB": (13.0, 3)}, id="by-model"),
        pytest.param("day", {"2026-03-01": (8 + 1 + 2, 3), "2026-03-02": (2, 1)}, id="by-day-split-at-midnight"),
    ],
)
def test_gpu_hours_grouped(group_by: str, expected: dict[str, tuple[float, int]]) -> None:
    rows = compute_usage_rows(
        JOBS, group_by, T0, T0 + timedelta(days=2), T0 + timedelta(days=3), TENANTS, USERS, MODELS
    )
    assert {r["key"]: (r["gpu_hours"], r["jobs"]) for r in rows} == expected


def test_running_job_counts_until_now_and_range_clips() -> None:
    rows = compute_usage_rows(
        [job(5, 1, 10, 0, None, gpus=2)],
        "tenant",
        T0 + timedelta(hours=1),
        T0 + timedelta(hours=10),
        T0 + timedelta(hours=3),
        TENANTS,
        USERS,
        MODELS,
    )
    assert rows == [{"key": "vision", "gpu_hours": 4.0, "jobs": 1, "avg_util_pct": None, "cost": 0.0}]


def test_utilisation_weighted_by_gpu_hours_and_csv() -> None:
    runs = [job(1, 1, 10, 0, 2, gpus=4, util=50.0), job(2, 2, 20, 1, 3, gpus=1, milli=500, util=100.0)]
    rows = compute_usage_rows(
        runs, "gpu_model", T0, T0 + timedelta(days=1), T0 + timedelta(days=1), TENANTS, USERS, MODELS
    )
    assert rows[0]["avg_util_pct"] == pytest.approx((50 * 8 + 100 * 1) / 9, abs=0.01)
    assert render_csv(rows, "gpu_model").splitlines() == [
        "gpu_model,gpu_hours,jobs,avg_util_pct,cost",
        f"H100-80GB,9.0,2,{rows[0]['avg_util_pct']},0.0",
    ]


def test_unknown_grouping_names_the_field() -> None:
    with pytest.raises(ValidationError) as e:
        compute_usage_rows([], "planet", T0, T0, T0, {}, {}, {})
    assert e.value.field == "group_by"


def test_cost_prices_each_part_on_its_node_and_groups_by_pool_and_job() -> None:
    """Owned GPUs at the admin's rate, a cloud node at its type's price per GPU-hour; a 2-node job counts per node."""
    gang = JobRun(7, 1, 10, 2, 1000, 2, T0, T0 + timedelta(hours=3), (("n1", (0, 1)), ("burst-g4-1", (0, 1))))
    rows = compute_usage_rows(
        [gang],
        "pool",
        T0,
        T0 + timedelta(days=1),
        T0 + timedelta(days=1),
        TENANTS,
        USERS,
        MODELS,
        prices={"burst-g4-1": 0.625},
        owned_price=0.5,
        pools={"burst-g4-1": "burst"},
    )
    assert {r["key"]: (r["gpu_hours"], r["jobs"], r["cost"]) for r in rows} == {
        "burst": (6.0, 1, 3.75),
        "static": (6.0, 1, 3.0),
    }
    by_job = compute_usage_rows(
        [gang], "job", T0, T0 + timedelta(days=1), T0 + timedelta(days=1), TENANTS, USERS, MODELS,
        prices={"burst-g4-1": 0.625}, owned_price=0.5,
    )  # fmt: skip
    assert by_job == [{"key": "7", "gpu_hours": 12.0, "jobs": 1, "avg_util_pct": None, "cost": 6.75}]
