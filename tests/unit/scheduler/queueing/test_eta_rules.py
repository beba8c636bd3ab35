"""ETAs (eta.py): in rank order, each job's demand is added to the demand ahead of it, and the ETA is when the
free GPUs plus those released by running jobs at their time limits cover it; None when that needs jobs without
a time limit."""

from __future__ import annotations

from corral.scheduler.queueing import QueuedJob, RunningJob
from corral.scheduler.queueing.eta import EtaEstimator

V100 = "V100-32GB"
T4 = "T4-16GB"


def run(id: str, gpus: int, start: float, limit: float | None, model: str = V100) -> RunningJob:
    return RunningJob(QueuedJob(id, "z", gpus=gpus, time_limit_s=limit), start, model)


def test_demand_queues_up_behind_the_jobs_ahead() -> None:
    eta = EtaEstimator({V100: 1000}, [run("a", 2, 0.0, 100.0), run("b", 2, 0.0, 300.0)], now_s=10.0)
    assert eta.estimate(V100, 1000) == 10.0  # the free GPU: now
    assert eta.estimate(V100, 2000) == 100.0  # a's 2 GPUs at its limit
    assert eta.estimate(V100, 1000) == 300.0  # 1 + 2 ahead of it: b must end too
    assert eta.estimate(V100, 2000) is None  # more than will ever be released


def test_jobs_without_a_time_limit_never_count_as_released() -> None:
    eta = EtaEstimator({V100: 0}, [run("forever", 4, 0.0, None), run("a", 1, 0.0, 50.0)], now_s=10.0)
    assert eta.estimate(V100, 1000) == 50.0
    assert eta.estimate(V100, 1000) is None


def test_running_jobs_on_a_model_not_in_the_free_map_are_counted_without_error() -> None:
    # A model the free map omits (none of it free) still has ETAs from its running jobs' limits.
    eta = EtaEstimator({V100: 0}, [run("t", 1, 0.0, None, T4), run("u", 2, 0.0, 70.0, T4)], now_s=5.0)
    assert eta.estimate(T4, 1000) == 70.0
    assert eta.estimate(T4, 1000) == 70.0  # u releases 2: enough for both
    assert eta.estimate(T4, 1000) is None


def test_an_overdue_job_counts_as_ending_now_and_each_model_is_separate() -> None:
    eta = EtaEstimator({V100: 0, T4: 0}, [run("late", 1, 0.0, 5.0), run("t", 1, 0.0, 40.0, T4)], now_s=20.0)
    assert eta.estimate(V100, 1000) == 20.0
    assert eta.estimate(T4, 1000) == 40.0  # V100's demand is not ahead of T4's
