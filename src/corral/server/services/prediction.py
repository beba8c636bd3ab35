"""Run-time predictions in the server: the scheduler's predictor (scheduler/queueing/prediction.py, the same code
the simulator runs) fed from the store's history of finished jobs.

It learns the store's recent successful jobs when the server starts (so what it learned survives a restart: the
history is durable) and each job that succeeds afterwards, as the scheduler sees it leave the running set. Every
key is scoped to the job's tenant: one tenant's jobs never shape, nor show through an explanation, another
tenant's predictions. The scheduler thread records; API threads read: one lock around the predictor.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from corral.core.states import JobState
from corral.scheduler.queueing.prediction import DurationPrediction, DurationPredictor, JobFeatures
from corral.store.records import Job

HISTORY_JOBS = 20_000  # successful jobs learnt at start, newest first
DEFAULT_TENANT = "default"


def compute_features(job: Job, tenants: Mapping[int, str], users: Mapping[int, str]) -> JobFeatures:
    """What a prediction keys on, from the job as submitted: its user's and tenant's names, its name, GPUs per node,
    command, queue and time limit; scoped to its tenant."""
    s = job.spec
    tenant = tenants.get(s.tenant_id or 0, DEFAULT_TENANT)
    return JobFeatures(
        user=users.get(s.user_id or 0, ""),
        tenant=tenant,
        name=s.name,
        gpus=s.gpus * s.nodes,
        script=" ".join(s.command[:8]),
        queue=s.queue,
        time_limit_s=float(s.time_limit_s) if s.time_limit_s else None,
        scope=tenant,
    )


def compute_run_s(job: Job) -> float | None:
    """How long a finished job's last attempt ran; None when it never started or did not succeed."""
    if job.state is not JobState.SUCCEEDED or job.started_at is None or job.finished_at is None:
        return None
    return max((job.finished_at - job.started_at).total_seconds(), 0.0)


class RunTimePredictions:
    """The server's predictor and what it has learnt. `learn` takes finished jobs (others are ignored, so a caller
    may pass every job that left the running set); `predict` answers for a pending or running job."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._predictor = DurationPredictor()
        self._learnt: set[int] = set()  # job ids recorded, so a job seen twice counts once (bounded below)
        self._generation = 0  # how many times it learnt something: a prediction made since holds until it changes
        # predict_all's answers of its last call: job id -> (the Job object, the prediction), and what they were
        # made with (generation, tenants' names, the users' map)
        self._answers: dict[int, tuple[Job, DurationPrediction | None]] = {}
        self._answered_with: tuple[int, dict[int, str], Mapping[int, str]] | None = None

    @property
    def recorded(self) -> int:
        with self._lock:
            return self._predictor.recorded

    def unknown(self, job_ids: Iterable[int]) -> list[int]:
        """Those of these job ids not learnt yet."""
        with self._lock:
            return [i for i in job_ids if i not in self._learnt]

    def learn(self, jobs: Iterable[Job], tenants: Mapping[int, str], users: Mapping[int, str]) -> int:
        """Record each successful job once, oldest finish first; returns how many were new."""
        done = sorted((j for j in jobs if compute_run_s(j) is not None), key=lambda j: (j.finished_at, j.id))
        added = 0
        with self._lock:
            for job in done:
                if job.id in self._learnt:
                    continue
                run_s = compute_run_s(job)
                assert run_s is not None
                self._predictor.record(compute_features(job, tenants, users), run_s)
                self._learnt.add(job.id)
                added += 1
            self._generation += added > 0
            if len(self._learnt) > 4 * HISTORY_JOBS:  # ids only guard against a double count of recent jobs
                self._learnt = set(sorted(self._learnt)[-2 * HISTORY_JOBS :])
        return added

    def predict(self, job: Job, tenants: Mapping[int, str], users: Mapping[int, str]) -> DurationPrediction | None:
        """The job's predicted run time; predict_all's last answer for it (the same object) when that still holds:
        the same Job object, nothing learnt since, its tenant's name and the users' map the same (a page lists 500
        jobs the scheduler asked about on its last pass)."""
        key = job.spec.tenant_id or 0
        with self._lock:
            last, entry = self._answered_with, self._answers.get(job.id)
            if (
                entry is not None
                and entry[0] is job
                and last is not None
                and last[0] == self._generation
                and last[2] is users
                and last[1].get(key, DEFAULT_TENANT) == tenants.get(key, DEFAULT_TENANT)
            ):
                return entry[1]
        features = compute_features(job, tenants, users)
        with self._lock:
            return self._predictor.predict(features)

    def forget_answers(self) -> None:
        """Drop predict_all's kept answers (and the jobs they hold): nothing waits or runs."""
        with self._lock:
            self._answers, self._answered_with = {}, None

    def predict_all(
        self, jobs: Iterable[Job], tenants: Mapping[int, str], users: Mapping[int, str]
    ) -> dict[int, DurationPrediction | None]:
        """Job id -> `predict` of each job, for a caller that asks for the same jobs again and again (the scheduler,
        each pass): a job's answer is kept, the same object, while the job (its Job object), the tenants' names,
        the users' map (the same object: replaced whole when it changes) and what was learnt stay the same. Only
        the last call's jobs are kept. Features are made outside the lock (API threads call `predict`)."""
        with self._lock:
            generation, last = self._generation, self._answered_with
            same = last is not None and last[0] == generation and last[1] == tenants and last[2] is users
            old = self._answers if same else {}
        answers: dict[int, tuple[Job, DurationPrediction | None]] = {}
        missing: list[tuple[Job, JobFeatures]] = []
        for job in jobs:
            entry = old.get(job.id)
            if entry is not None and entry[0] is job:
                answers[job.id] = entry
            else:
                missing.append((job, compute_features(job, tenants, users)))
        with self._lock:
            for job, features in missing:
                answers[job.id] = (job, self._predictor.predict(features))
            # tagged with the generation read first: if it learnt meanwhile, the next call asks again
            self._answers, self._answered_with = answers, (generation, dict(tenants), users)
        return {i: guess for i, (_, guess) in answers.items()}
