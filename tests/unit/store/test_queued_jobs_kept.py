"""QueuedJobs keeps each job's QueuedJob between a scheduler's passes: whatever changed between two builds (a job's
row, its nomination, its prediction, the tenants' names, the pool's models), what it hands back equals what
compute_queued_job builds from scratch."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime

from corral.scheduler.queueing.prediction import NUM_BINS, DurationPrediction, PredictionBasis
from corral.store.records import Job, JobSpec
from corral.store.snapshot import QueuedJobs, compute_queued_job

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _guess(jobs: int) -> DurationPrediction:
    counts = tuple(jobs if b == 10 else 0 for b in range(NUM_BINS))
    return DurationPrediction(counts, PredictionBasis("name", ("train-*",), jobs, 60.0))


def _job(i: int, rng: random.Random) -> Job:
    spec = JobSpec(
        command=("x",),
        gpus=rng.choice((1, 2, 4)),
        priority=rng.randint(-2, 2),
        tenant_id=rng.choice((None, 1, 2)),
        gpu_models=rng.choice(((), ("H100",), ("A100",))),
    )
    return Job(id=i, spec=spec, state="PENDING", created_at=T0)  # type: ignore[arg-type]


def test_kept_queued_jobs_equal_fresh_ones_after_random_changes() -> None:
    rng = random.Random(3)
    kept = QueuedJobs()
    jobs = {i: _job(i, rng) for i in range(40)}
    tenants = {1: "vision", 2: "nlp"}
    models = ["A100-80GB", "H100-80GB"]
    nominated: dict[int, float] = {}
    guesses = {i: _guess(i + 1) for i in range(40)}
    predicted: dict[int, DurationPrediction | None] = {}
    reused = 0
    for _ in range(300):
        move = rng.random()
        i = rng.randrange(40)
        if move < 0.2 and i in jobs:
            jobs[i] = replace(jobs[i], spec=replace(jobs[i].spec, priority=rng.randint(-2, 2)))  # its row changed
        elif move < 0.3:
            nominated[i] = rng.random()
        elif move < 0.4:
            nominated.pop(i, None)
        elif move < 0.5:
            predicted[i] = rng.choice((None, guesses[i], _guess(1)))
        elif move < 0.55:
            tenants = {**tenants, rng.choice((1, 2)): rng.choice(("vision", "nlp", "speech"))}
        elif move < 0.6:
            models = rng.choice((["A100-80GB", "H100-80GB"], ["H100-80GB"], ["A100-80GB", "H100-94GB"]))
        elif move < 0.7:
            jobs.pop(i, None)
        else:
            jobs.setdefault(i, _job(i, rng))
        listed = [jobs[k] for k in sorted(jobs)]
        got = kept.build(listed, tenants, models, nominated, predicted)
        again = kept.build(listed, tenants, models, nominated, predicted)
        reused += sum(1 for a, b in zip(got, again) if a is b)
        assert got == [compute_queued_job(j, tenants, models, nominated, predicted.get(j.id)) for j in listed]
    assert reused > 1000  # built once, handed back as is while nothing changed
