"""Why pending and when: a reason per waiting job and an ETA from the running jobs' time limits."""

from __future__ import annotations

from queue_builders import admit, job, running


def test_eta_from_time_limits_in_rank_order() -> None:
    run = [running(job("r1", "z", 4, time_limit_s=100.0)), running(job("r2", "z", 4, time_limit_s=200.0), start=10.0)]
    plan = admit(
        [job("x", gpus=2, submit=1), job("y", gpus=4, submit=2), job("w", gpus=4, submit=3)], gpus=8, run=run, now=50.0
    )
    assert plan.pending["x"].eta_s == 100.0  # r1 ends at its limit
    assert plan.pending["y"].eta_s == 210.0  # x goes first: 2 + 4 > 4 freed at 100, so after r2 too
    assert plan.pending["w"].eta_s is None  # needs more than the running jobs will ever release


def test_eta_unknown_without_time_limits() -> None:
    plan = admit([job("x", submit=1)], gpus=1, run=[running(job("r", "z"))])
    assert plan.pending["x"].reason == "capacity" and plan.pending["x"].eta_s is None


def test_overdue_job_counts_as_ending_now() -> None:
    plan = admit([job("x", submit=1)], gpus=1, run=[running(job("r", "z", time_limit_s=10.0))], now=50.0)
    assert plan.pending["x"].eta_s == 50.0


def test_every_pending_job_has_a_reason_and_a_distinct_position() -> None:
    pending = [job(f"j{i}", tenant="ab"[i % 2], gpus=1 + i % 3, submit=i) for i in range(12)]
    plan = admit(pending, gpus=4, policy="fifo")
    waiting = [j.id for j in pending if j.id not in {a.job_id for a in plan.admit}]
    assert sorted(plan.pending) == sorted(waiting)
    assert sorted(s.position for s in plan.pending.values()) == list(range(len(waiting)))
    assert all(s.reason and s.detail for s in plan.pending.values())


def test_model_constraint_is_reported() -> None:
    plan = admit([job("x", model="H100")], gpus=4)
    assert plan.pending["x"].reason == "model-constraint" and plan.pending["x"].eta_s is None
