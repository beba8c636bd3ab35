"""CountLedger (the queueing core's GPU-count view): which model a job fits on, and the reason and detail a
waiting job shows when it fits nowhere (model-constraint, gang-incomplete, capacity)."""

from __future__ import annotations

import pytest

from corral.scheduler.queueing import CountLedger, QueuedJob, RunningJob, reasons

V100 = "V100-32GB"
T4 = "T4-16GB"


def job(id: str, gpus: int = 1, gpu_milli: int = 1000, model: str = "", nodes: int = 1) -> QueuedJob:
    return QueuedJob(id, "t", gpus=gpus, gpu_milli=gpu_milli, model=model, nodes=nodes)


def held(j: QueuedJob, model: str = V100, exit_s: float | None = None) -> RunningJob:
    return RunningJob(j, 0.0, model, exit_s)


def test_free_and_incoming_start_from_the_pool_and_the_running_jobs() -> None:
    ledger = CountLedger({V100: 8000, T4: 2000}, [held(job("r", 3)), held(job("x", 2), exit_s=50.0)])
    assert ledger.models() == [V100, T4]
    assert ledger.free(V100) == 3000 and ledger.free(T4) == 2000
    assert ledger.incoming(V100) == 2000  # only the job being preempted is coming back
    assert ledger.incoming(T4) == 0
    assert ledger.total_free() == 5000


def test_a_model_the_pool_lacks_has_nothing_free_or_incoming() -> None:
    ledger = CountLedger({V100: 8000}, [])
    assert ledger.free(T4) == 0
    assert ledger.incoming(T4) == 0


def test_no_matching_model_is_a_model_constraint() -> None:
    assert CountLedger({V100: 8000}, []).check(job("x", model="H100")) == (
        None,
        reasons.MODEL,
        "no H100 GPUs in the pool",
    )


def test_a_job_larger_than_every_matching_pool_is_a_model_constraint_with_the_sizes() -> None:
    ledger = CountLedger({V100: 8000, T4: 4000}, [])
    assert ledger.check(job("x", gpus=16)) == (
        None,
        reasons.MODEL,
        "asks for 16 GPUs; the pool has at most 8 of a matching model",
    )
    # Only the matching model's pool counts: T4 has 4, so a T4 job of 6 never fits.
    assert ledger.check(job("y", gpus=6, model=T4)) == (
        None,
        reasons.MODEL,
        "asks for 6 GPUs; the pool has at most 4 of a matching model",
    )


def test_best_fit_takes_the_model_with_the_fewest_free_gpus_that_still_fit() -> None:
    # V100 has 3 free, T4 5: a 2-GPU job goes where it leaves the least room unused (V100), whatever the
    # order of names or of the pool.
    ledger = CountLedger({T4: 5000, V100: 8000}, [held(job("r", 5))])
    assert ledger.check(job("x", gpus=2)) == (V100, "", "")
    # Only models it fits on: a 4-GPU job skips V100 (3 free) for T4.
    assert ledger.check(job("y", gpus=4)) == (T4, "", "")


def test_best_fit_ties_go_to_the_first_model_by_name() -> None:
    ledger = CountLedger({V100: 4000, T4: 4000}, [])
    assert ledger.check(job("x", gpus=2)) == (T4, "", "")
    ledger = CountLedger({"B-model": 4000, "A-model": 4000}, [])
    assert ledger.check(job("x", gpus=2)) == ("A-model", "", "")


def test_part_of_a_multi_gpu_job_free_is_gang_incomplete() -> None:
    ledger = CountLedger({V100: 8000}, [held(job("r", 5))])
    assert ledger.check(job("x", gpus=4)) == (None, reasons.GANG, "3 of 4 GPUs free")
    assert ledger.check(job("g", gpus=2, nodes=3)) == (None, reasons.GANG, "3 of 6 GPUs free")


def test_nothing_free_is_capacity_not_gang() -> None:
    ledger = CountLedger({V100: 4000}, [held(job("r", 4))])
    assert ledger.check(job("x", gpus=2)) == (None, reasons.CAPACITY, "2 GPUs needed, 0 free")


def test_a_single_gpu_or_share_that_does_not_fit_is_capacity() -> None:
    # Some room is free, but a job of one GPU (or a share of one) is no gang: it waits for capacity.
    ledger = CountLedger({V100: 1000}, [held(job("r", 1, gpu_milli=700))])
    assert ledger.check(job("x", gpu_milli=500)) == (None, reasons.CAPACITY, "0.5 GPUs needed, 0.3 free")
    assert ledger.check(job("y")) == (None, reasons.CAPACITY, "1 GPUs needed, 0.3 free")


def test_an_overcommitted_model_shows_zero_free() -> None:
    ledger = CountLedger({V100: 2000}, [held(job("r", 3))])
    assert ledger.free(V100) == -1000
    assert ledger.check(job("x", gpus=2)) == (None, reasons.CAPACITY, "2 GPUs needed, 0 free")


def test_take_reserve_and_release_move_gpus_between_free_and_incoming() -> None:
    ledger = CountLedger({V100: 4000}, [held(job("r", 2)), held(job("x", 2), exit_s=9.0)])
    assert (ledger.free(V100), ledger.incoming(V100)) == (0, 2000)
    ledger.release(V100, 1000)  # a victim chosen now will release one more
    assert ledger.incoming(V100) == 3000
    ledger.reserve(job("w", 2), V100)  # nothing free: both from what is coming back
    assert (ledger.free(V100), ledger.incoming(V100)) == (0, 1000)
    ledger = CountLedger({V100: 4000}, [held(job("r", 3)), held(job("x", 1), exit_s=9.0)])
    ledger.reserve(job("w", 2), V100)  # the free GPU first, then one coming back
    assert (ledger.free(V100), ledger.incoming(V100)) == (0, 0)
    ledger = CountLedger({V100: 4000}, [])
    ledger.take(job("a", 3), V100)
    assert ledger.free(V100) == 1000 and ledger.check(job("b", 2))[1] == reasons.GANG


def test_a_count_ledger_knows_no_nodes() -> None:
    ledger = CountLedger({V100: 4000}, [])
    assert ledger.knows_nodes is False
    assert list(ledger.whole_free(V100, 2)) == []
    assert ledger.keep_spot(job("moving")) is False  # no room is ever kept for a job moved off a node
    with pytest.raises(AssertionError, match="^a count ledger has no nodes to hold$"):
        ledger.hold_nodes(V100, ["n0"])
    with pytest.raises(AssertionError, match="^a count ledger has no nodes to hold$"):
        ledger.unhold_nodes(V100, ["n0"])
    ledger.end_cycle()
    assert ledger.free(V100) == 4000
