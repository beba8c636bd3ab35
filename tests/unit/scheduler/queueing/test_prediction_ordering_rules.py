"""The `predict` order (ordering.py) and predicted ends in ETAs (eta.py): a predicted-short job goes before a
predicted-long one of equal attained service, a misprediction is corrected as service accrues, a job without
a prediction falls back to service levels, and ETAs use predicted ends only when given them."""

from __future__ import annotations

from queue_builders import admit, admitted, job, running

from corral.scheduler.queueing import QueuedJob, RunningJob
from corral.scheduler.queueing.eta import EtaEstimator, compute_predicted_ends
from corral.scheduler.queueing.ordering import RankContext, compute_predicted_level, compute_rank
from corral.scheduler.queueing.policy import CORRAL_THRESHOLDS_GPU_S, get_queueing_policy
from corral.scheduler.queueing.prediction import MIN_JOBS, DurationPrediction, DurationPredictor, JobFeatures

PREDICT = get_queueing_policy("predict")
MODEL = "V100-32GB"


def predicted(run_s: float, jobs: int = MIN_JOBS) -> DurationPrediction:
    p = DurationPredictor()
    for _ in range(jobs):
        p.record(JobFeatures("u", "t", "x"), run_s)
    got = p.predict(JobFeatures("u", "t", "x"))
    assert got is not None
    return got


def test_a_predicted_short_job_ranks_before_a_predicted_long_one_of_equal_service() -> None:
    ctx = RankContext()
    short = job("short", submit=9, predicted=predicted(60.0), attained_gpu_s=30.0)
    long = job("long", submit=1, predicted=predicted(36_000.0), attained_gpu_s=30.0)
    assert compute_rank(short, PREDICT, ctx, 1) < compute_rank(long, PREDICT, ctx, 0)
    # Through admission, on one GPU: the later, predicted-short job starts.
    assert admitted(admit([long, short], gpus=1, policy="predict", now=10.0)) == ["short"]


def test_other_policies_ignore_predictions() -> None:
    short = job("short", submit=9, predicted=predicted(60.0))
    long = job("long", submit=1, predicted=predicted(36_000.0))
    for name in ("fifo", "las", "corral"):
        assert admitted(admit([long, short], gpus=1, policy=name, now=10.0)) == ["long"], name


def test_a_misprediction_is_corrected_as_service_accrues() -> None:
    # Predicted 60 s but has run an hour: it now ranks behind a fresh job predicted at 10 minutes, which
    # preempts it (the job has run past min_run_s).
    wrong = job("wrong", submit=0, predicted=predicted(60.0))
    fresh = job("fresh", submit=5, predicted=predicted(600.0))
    ctx = RankContext()
    assert compute_rank(wrong, PREDICT, ctx, 0) < compute_rank(fresh, PREDICT, ctx, 1)
    assert compute_rank(wrong, PREDICT, ctx, 0, attained_gpu_s=3600.0) > compute_rank(fresh, PREDICT, ctx, 1)
    plan = admit([fresh], gpus=1, run=[running(wrong, start=0.0)], policy="predict", now=3600.0)
    assert [p.job_id for p in plan.preempt] == ["wrong"]


def test_without_a_prediction_the_service_levels_decide() -> None:
    # Cold start: no prediction, so the job's level is the next service threshold above what it attained.
    fresh, served = job("a"), job("b", attained_gpu_s=500.0)
    assert compute_predicted_level(fresh, 0.0, CORRAL_THRESHOLDS_GPU_S) < compute_predicted_level(
        served, 500.0, CORRAL_THRESHOLDS_GPU_S
    )
    assert admitted(admit([served, fresh], gpus=1, policy="predict")) == ["a"]


def test_levels_are_in_gpu_seconds() -> None:
    # The same predicted run time on 8 GPUs weighs 8 times as much as on one.
    one, eight = job("one", predicted=predicted(600.0)), job("eight", gpus=8, predicted=predicted(600.0))
    thresholds = CORRAL_THRESHOLDS_GPU_S
    assert compute_predicted_level(eight, 0.0, thresholds) == compute_predicted_level(one, 0.0, thresholds) + 3


def run_with(id: str, start: float, limit: float | None, pred: DurationPrediction | None) -> RunningJob:
    return RunningJob(QueuedJob(id, "z", gpus=1, time_limit_s=limit, predicted=pred), start, MODEL)


def test_etas_use_predicted_ends_only_when_given() -> None:
    jobs = [run_with("a", 0.0, None, predicted(100.0)), run_with("b", 0.0, 50.0, predicted(3600.0))]
    plain = EtaEstimator({MODEL: 0}, jobs, now_s=10.0)
    assert plain.estimate(MODEL, 1000) == 50.0  # b's time limit
    assert plain.estimate(MODEL, 1000) is None  # a has no limit: unknown, as before
    ends = compute_predicted_ends(jobs, 10.0)
    assert 60 < ends["a"] < 150 and ends["b"] > 1000
    eta = EtaEstimator({MODEL: 0}, jobs, now_s=10.0, predicted_end_s=ends)
    assert eta.estimate(MODEL, 1000) == 50.0  # b's limit comes before its predicted end
    assert eta.estimate(MODEL, 1000) == ends["a"]


def test_a_predicted_end_is_from_now_once_the_job_outlived_it() -> None:
    job_ = run_with("a", 0.0, None, predicted(100.0))
    assert compute_predicted_ends([job_], 1000.0)["a"] >= 1000.0
    gone = RunningJob(job_.job, 0.0, MODEL, exit_s=1005.0)  # being preempted: its deadline, not a guess
    assert compute_predicted_ends([gone], 1000.0) == {}


def test_predict_is_the_default_of_the_server_and_the_simulator() -> None:
    # Issue 15: the default orders by predicted run time (docs/queueing.md gives the figures it was chosen on).
    from corral.server.settings import Settings

    assert get_queueing_policy(None) is PREDICT
    assert Settings.model_fields["queueing"].default == "predict"
