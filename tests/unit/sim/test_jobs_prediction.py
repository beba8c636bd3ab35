"""Prediction in the job simulator: a job's prediction comes only from jobs that finished before it was
made, the `predict` policy runs every job to completion, and sampled ETAs are scored against the next start."""

from __future__ import annotations

import pytest

import corral.sim.jobs as sim_jobs
from corral.scheduler.queueing import QueuedJob, get_queueing_policy
from corral.scheduler.queueing.prediction import DurationPrediction, DurationPredictor, JobFeatures
from corral.sim.jobs import SimConfig, simulate_jobs
from corral.sim.jobs_trace import SimCluster, TraceJob

POOL = {"V100-32GB": 4000}


def trace(n: int = 60) -> list[TraceJob]:
    """Jobs of two kinds (named `short-*` and `long-*`), each with a unique name suffix so a test can tell
    which job a prediction was asked for."""
    out = []
    for i in range(n):
        kind, run_s = ("short", 20.0) if i % 3 else ("long", 400.0)
        job = QueuedJob(f"j{i}", f"t{i % 2}", gpus=1 + i % 2, submit_s=float(7 * i))
        out.append(TraceJob(job, run_s, JobFeatures(f"u{i % 2}", f"t{i % 2}", f"{kind}-{i}", job.gpus)))
    return out


class SpyPredictor(DurationPredictor):
    """Logs what was recorded and, at each prediction, which job (by name) asked and what had been recorded."""

    log: list[tuple[str, str, int]] = []

    def record(self, features: JobFeatures, duration_s: float) -> None:
        SpyPredictor.log.append(("record", features.name, 0))
        super().record(features, duration_s)

    def predict(self, features: JobFeatures) -> DurationPrediction | None:
        SpyPredictor.log.append(("predict", features.name, self.recorded))
        return super().predict(features)


def test_a_prediction_uses_only_jobs_finished_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    SpyPredictor.log = []
    monkeypatch.setattr(sim_jobs, "DurationPredictor", SpyPredictor)
    jobs = trace()
    result = simulate_jobs(jobs, SimCluster(1, POOL), SimConfig(get_queueing_policy("predict")))
    assert len(result.records) == len(jobs)
    end = {f"{'short' if int(r.id[1:]) % 3 else 'long'}-{r.id[1:]}": r.end_s for r in result.records}
    submit = {tj.features.name: tj.job.submit_s for tj in jobs if tj.features}
    recorded: list[str] = []
    asked: set[str] = set()
    for what, name, n in SpyPredictor.log:
        if what == "record":
            recorded.append(name)
            continue
        assert n == len(recorded)
        if name not in asked:  # the first prediction is made at submission
            asked.add(name)
            assert all(end[r] <= submit[name] for r in recorded), f"{name} saw a job not finished by then"
            assert {r for r, e in end.items() if e < submit[name]} <= set(recorded), "a finished job was missed"
    assert asked == set(submit) and len(recorded) == len(jobs)


def test_predict_learns_within_the_run_and_beats_fifo_here() -> None:
    jobs = trace(120)
    res = {p: simulate_jobs(jobs, SimCluster(1, POOL), SimConfig(get_queueing_policy(p))) for p in ("fifo", "predict")}
    avg = {p: sum(r.jct_s for r in res[p].records) / len(jobs) for p in res}
    assert avg["predict"] < avg["fifo"]


@pytest.mark.parametrize("policy", ["corral", "predict"])
def test_sampled_etas_are_scored_against_the_next_start(policy: str) -> None:
    jobs = trace(90)
    cfg = SimConfig(get_queueing_policy(policy), eta_sample_s=30.0)
    result = simulate_jobs(jobs, SimCluster(1, POOL), cfg)
    plain = simulate_jobs(jobs, SimCluster(1, POOL), SimConfig(get_queueing_policy(policy)))
    assert [r.end_s for r in result.records] == [r.end_s for r in plain.records]  # explaining decides nothing
    assert all(e >= 0 for e in result.eta_errors_s)
    if policy == "predict":
        assert result.eta_errors_s  # predicted ends give ETAs where no job has a time limit
    else:
        assert result.eta_unknown > 0  # no time limits: ETAs are unknown while GPUs are busy
