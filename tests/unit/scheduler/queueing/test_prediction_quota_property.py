"""Issue 4's quota property (test_queueing_quota_property.py) under the `predict` policy: ordering by
predicted run time changes nothing that quotas promise. Same scenarios and checks; the predictor trusts a
key after one finished job (instead of MIN_JOBS) so that predictions, not the cold start, order most jobs of
these 20-job runs."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from test_queueing_quota_property import (
    CYCLE_S,
    GRACE_S,
    HORIZON_S,
    NEWCOMER_TAKES_OVER,
    OLDER_JOB_TAKES_OVER,
    WAITING_JOB_UNNOMINATED,
    Scenario,
    check_quotas,
    scenarios,
)

import corral.sim.jobs as sim_jobs
from corral.scheduler.queueing import get_queueing_policy, validate_quotas
from corral.scheduler.queueing.prediction import DurationPredictor
from corral.sim.jobs import SimConfig, simulate_jobs
from corral.sim.jobs_trace import SimCluster


def run_and_check(sc: Scenario) -> None:
    validate_quotas(sc.book, {m: n * 1000 for m, n in sc.pool.items()})
    cfg = SimConfig(
        get_queueing_policy("predict"),
        cycle_s=CYCLE_S,
        grace_s=GRACE_S,
        restart_overhead_s=1.0,
        quotas=sc.book,
        horizon_s=HORIZON_S,
    )
    eager = functools.partial(DurationPredictor, min_jobs=1)
    saved, sim_jobs.DurationPredictor = sim_jobs.DurationPredictor, eager  # type: ignore[misc,assignment]
    try:
        result = simulate_jobs(sc.trace, SimCluster(1, {m: n * 1000 for m, n in sc.pool.items()}), cfg)
    finally:
        sim_jobs.DurationPredictor = saved  # type: ignore[misc]
    done = {r.id for r in result.records}
    assert len(done) == len(sc.trace), f"never finished: {sorted(t.job.id for t in sc.trace if t.job.id not in done)}"
    check_quotas(result, sc.book, sc.trace)


@pytest.mark.parametrize(
    "sc",
    [NEWCOMER_TAKES_OVER, OLDER_JOB_TAKES_OVER, WAITING_JOB_UNNOMINATED],
    ids=["newcomer", "older-job", "waiting-unnominated"],
)
def test_a_reclaim_in_flight_restores_the_guarantee_within_grace_under_predict(sc: Scenario) -> None:
    run_and_check(sc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_guarantees_are_restored_within_grace_and_maxima_hold_under_predict(sc: Scenario) -> None:
    run_and_check(sc)
