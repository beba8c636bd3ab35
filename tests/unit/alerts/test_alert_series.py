"""Series for rule evaluation: from batches, health, lost nodes and jobs; end to end with the defaults."""

from __future__ import annotations

from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.agent.metrics import Collector
from corral.alerts.defaults import DEFAULT_RULES
from corral.alerts.evaluator import Alert, AlertState, evaluate_rules
from corral.alerts.series import (
    JobPlacement,
    compute_batch_series,
    compute_health_series,
    compute_job_utilization_series,
    compute_node_lost_series,
    compute_queue_series,
)
from corral.core.health import HealthChecker, HealthPolicy
from corral.core.simfault import SimFault
from corral.core.telemetry import HostSample, TelemetryBatch

HOST = HostSample(1.0, 10, 8, 0, 0, 0, 1, 4, 1, 4, 0, 0, 0, 0)
JOB = JobPlacement("j1", "vision", "n1", (0, 1))


def _batch(sim: SimulatedGpuBackend, now: float) -> TelemetryBatch:
    return Collector(sim, lambda b: None, node="n1", host_reader=lambda t: HOST).collect_once(now)


def test_batch_series_label_gpus_with_their_job() -> None:
    sim = SimulatedGpuBackend("sim:4xH100-80GB", "n1")
    points = compute_batch_series(_batch(sim, 5.0), [JOB, JobPlacement("j2", "nlp", "n2", (2,))])
    temps = {dict(p.labels)["gpu"]: dict(p.labels) for p in points if p.metric == "gpu_temperature_c"}
    assert temps["0"]["job"] == "j1" and temps["1"]["tenant"] == "vision"
    assert "job" not in temps["2"]  # j2 runs on another node
    assert {p.metric for p in points} >= {"gpu_utilization_percent", "host_cpu_percent", "host_memory_used_percent"}
    assert [p.value for p in points if p.metric == "host_memory_used_percent"] == [25.0]


def test_fault_events_become_series() -> None:
    sim = SimulatedGpuBackend("sim:2xH100-80GB", "n1")
    sim.inject_fault(1, SimFault(xid=79, ecc=True))
    points = compute_batch_series(_batch(sim, 5.0))
    assert [
        (p.metric, dict(p.labels).get("xid"), p.value) for p in points if p.metric in ("gpu_xid", "gpu_ecc_dbe")
    ] == [("gpu_xid", "79", 79.0), ("gpu_ecc_dbe", None, 1.0)]
    assert all(dict(p.labels)["gpu"] == "1" for p in points if p.metric == "gpu_xid")


def test_job_utilization_is_the_mean_of_its_gpus_and_skips_jobs_without_data() -> None:
    util = {("n1", 0): 10.0, ("n1", 1): 0.0}
    points = compute_job_utilization_series([JOB, JobPlacement("j3", "nlp", "n9", (0,))], util)
    assert [(dict(p.labels)["job"], p.value) for p in points] == [("j1", 5.0)]


def test_health_lost_and_queue_series() -> None:
    [unhealthy] = compute_health_series("n1", {3: "xid"}, {3: "GPU-3"})
    assert dict(unhealthy.labels) == {"node": "n1", "gpu": "3", "uuid": "GPU-3", "reason": "xid"}
    assert [dict(p.labels)["node"] for p in compute_node_lost_series(["b", "a", "b"])] == ["a", "b"]
    assert [p.value for p in compute_queue_series({"vision": 3})] == [3.0]


def test_xid_79_fires_gpu_unhealthy_and_clearing_resolves_it() -> None:
    """The alerting half of the e2e scenario, in one process with injected time."""
    sim = SimulatedGpuBackend("sim:4xH100-80GB", "n1")
    checker = HealthChecker(range(4), now=0.0, policy=HealthPolicy(recovery_checks=2))
    alerts: dict[str, Alert] = {}
    seen: list[tuple[str, AlertState]] = []

    def step(now: float) -> None:
        nonlocal alerts
        batch = _batch(sim, now)
        checker.check_batch(batch)
        state = checker.state
        unhealthy = {g.index: g.reason for g in state.gpus if g.index in state.unhealthy_indices}
        series = compute_batch_series(batch) + compute_health_series("n1", unhealthy, {})
        result = evaluate_rules(list(DEFAULT_RULES), series, alerts, now)
        alerts = result.alerts
        seen.extend((c.alert.rule, c.alert.state) for c in result.changes if c.notify)

    step(5.0)
    sim.inject_fault(2, SimFault(xid=79))
    step(10.0)
    assert seen == [("gpu_unhealthy", AlertState.FIRING)]
    sim.clear_faults()
    for now in (15.0, 20.0, 25.0):
        step(now)
    assert seen == [("gpu_unhealthy", AlertState.FIRING), ("gpu_unhealthy", AlertState.RESOLVED)]


def test_only_the_wanted_metrics_are_made_with_the_same_points_and_order() -> None:
    sim = SimulatedGpuBackend("sim:4xH100-80GB", "n1")
    batch = _batch(sim, 5.0)
    wanted = {"gpu_temperature_c", "gpu_ecc_dbe_total", "host_cpu_percent"}
    every = compute_batch_series(batch, [JOB])
    assert compute_batch_series(batch, [JOB], wanted) == [p for p in every if p.metric in wanted]
    assert len({p.metric for p in every}) > len(wanted)


def test_a_gpu_labelled_again_when_another_job_holds_it() -> None:
    """Labels are kept between rounds: a GPU's job and tenant still follow whoever holds it now."""
    sim = SimulatedGpuBackend("sim:2xH100-80GB", "n1")
    batch = _batch(sim, 5.0)

    def labels_of_gpu0(jobs: list[JobPlacement]) -> dict[str, str]:
        points = compute_batch_series(batch, jobs, {"gpu_temperature_c"})
        return next(dict(p.labels) for p in points if dict(p.labels)["gpu"] == "0")

    assert labels_of_gpu0([JOB])["tenant"] == "vision"
    assert labels_of_gpu0([JobPlacement("j9", "nlp", "n1", (0,))]) | {"uuid": ""} == {
        "node": "n1",
        "gpu": "0",
        "uuid": "",
        "job": "j9",
        "tenant": "nlp",
    }
    assert "job" not in labels_of_gpu0([]) and "tenant" not in labels_of_gpu0([])
