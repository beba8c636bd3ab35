"""QueuedJob validation (jobs.py): what a job may ask for."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.scheduler.queueing import QueuedJob, RunningJob


@pytest.mark.parametrize("limit", [0.0, -1.0])
def test_a_time_limit_must_be_positive(limit: float) -> None:
    with pytest.raises(ValidationError) as err:
        QueuedJob("j", "t", time_limit_s=limit)
    assert err.value.field == "time_limit_s"
    assert "job j: must be > 0" in str(err.value)


def test_a_short_positive_time_limit_or_none_is_accepted() -> None:
    assert QueuedJob("j", "t", time_limit_s=0.5).time_limit_s == 0.5
    assert QueuedJob("j", "t").time_limit_s is None


@pytest.mark.parametrize("kw", [{"gpus": -1}, {"nodes": 0}])
def test_gpus_and_nodes_must_be_in_range(kw: dict[str, int]) -> None:
    with pytest.raises(ValidationError) as err:
        QueuedJob("j", "t", **kw)  # type: ignore[arg-type]
    assert err.value.field == "gpus" and err.value.problem == "job j: gpus must be >= 0 and nodes >= 1"


@pytest.mark.parametrize("kw", [{"gpu_milli": 0}, {"gpu_milli": 1001}, {"gpus": 2, "gpu_milli": 500}])
def test_a_share_needs_one_gpu_and_a_milli_in_range(kw: dict[str, int]) -> None:
    with pytest.raises(ValidationError) as err:
        QueuedJob("j", "t", **kw)  # type: ignore[arg-type]
    assert err.value.field == "gpu_milli"
    assert err.value.problem == "job j: a share (< 1000) needs gpus=1, in 1..1000"


def test_what_a_job_needs_and_where_it_queues() -> None:
    assert QueuedJob("j", "t", gpus=0).need_milli == 0  # a job without GPUs is valid
    assert QueuedJob("j", "t", gpus=1, gpu_milli=1).need_milli == 1
    assert QueuedJob("j", "t", gpus=3, nodes=2).need_milli == 6000
    assert QueuedJob("j", "t").queue_name == "t"  # no queue: the tenant's own
    assert QueuedJob("j", "t", queue="q").queue_name == "q"


def test_a_running_jobs_expected_end() -> None:
    limited = QueuedJob("j", "t", time_limit_s=50.0)
    assert RunningJob(limited, 10.0, "M").expected_end_s == 60.0
    assert RunningJob(limited, 10.0, "M", exit_s=20.0).expected_end_s == 20.0  # preempted: gone by its deadline
    assert RunningJob(QueuedJob("j", "t"), 10.0, "M").expected_end_s is None
    assert RunningJob(limited, 10.0, "M", exit_s=20.0).terminating
    assert not RunningJob(limited, 10.0, "M").terminating
