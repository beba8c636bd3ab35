"""What a scheduler keeps between its passes, checked against a fresh build after random changes: QueuedJobs (each
job's QueuedJob: its row, nomination and prediction, the tenants' names and the pool's models may change) and
NodeInfos (each node's NodeInfo)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime

from corral.core.resources import GpuInfo
from corral.scheduler.queueing.prediction import NUM_BINS, DurationPrediction, PredictionBasis
from corral.store.records import Job, JobSpec, Node
from corral.store.snapshot import NodeInfos, QueuedJobs, compute_node_info, compute_queued_job

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


def test_kept_node_infos_equal_fresh_ones_after_random_changes() -> None:
    """NodeInfos keeps each node's NodeInfo while the store hands back the same Node and its taints stay: whatever
    changed (GPUs, health, labels, images, memory, taints, nodes joining and leaving), it equals a fresh one."""
    rng = random.Random(5)
    kept = NodeInfos()

    def node(name: str) -> Node:
        gpus = tuple(
            GpuInfo(i, f"GPU-{name}-{i}", rng.choice(("H100-80GB", "A100-80GB")), 81920, healthy=rng.random() < 0.9)
            for i in range(rng.choice((1, 2, 8)))
        )
        labels = {"rack": rng.choice(("r1", "r2"))} if rng.random() < 0.5 else {}
        images = tuple(rng.sample(("pytorch:2", "jax:0.4", "tf:2"), rng.randint(0, 2)))
        return Node(
            name, name, "simulated", 64_000, rng.choice((256_000, 512_000)), "READY", T0, T0, gpus, labels,
            images=images,
        )  # fmt: skip

    nodes = {f"n{i}": node(f"n{i}") for i in range(20)}
    taints: dict[str, tuple[str, ...]] = {}
    reused = 0
    for _ in range(300):
        name = f"n{rng.randrange(25)}"
        move = rng.random()
        if move < 0.4:
            nodes[name] = node(name)  # joined, or its row changed
        elif move < 0.5:
            nodes.pop(name, None)
        elif move < 0.6:
            taints[name] = rng.choice(((), ("spot",), ("pool=a",)))
        listed = [nodes[k] for k in sorted(nodes)]
        got = kept.build(listed, taints)
        again = kept.build(listed, taints)
        reused += sum(1 for a, b in zip(got, again) if a is b)
        assert got == [compute_node_info(n, taints.get(n.name, ())) for n in listed]
    assert reused > 1000
