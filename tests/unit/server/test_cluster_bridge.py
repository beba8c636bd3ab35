"""The cluster bridge (server/background/clusters.py) against the store (SQLite and PostgreSQL) and a cluster held
in memory behind the ClusterBackend protocol (the real Slurm one is proven end to end in tests/e2e/test_slurm_pool.py):
inventory becomes pool nodes that agents cannot take; a placed job is submitted once, queued then running then
ended with its exit code and its output in the job's log; a cancel reaches the cluster; a cluster job of an attempt
that is no longer current is stopped, another installation's job of the same name is left alone; a job the cluster
forgot fails with that reason; an unreachable cluster fails nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from memory_cluster import MemoryCluster, bridge, cluster, place_job  # noqa: F401  (bridge, cluster: fixtures)

from corral.api.schemas import AgentRegister
from corral.clusters.base import (
    CANCELLED,
    FAILED,
    STARTED,
    SUCCEEDED,
    ClusterJob,
)
from corral.core.containers import ContainerSpec
from corral.core.errors import ValidationError
from corral.core.models import JobSpec, compute_cluster_tolerations
from corral.core.states import JobState
from corral.server.background import clusters as bridge_module
from corral.server.background.clusters import ClusterBridge
from corral.server.services.agents import register_node
from corral.server.services.budgets import compute_prices
from corral.store.snapshot import compute_snapshot

T0 = datetime.now(UTC)


def _only(cluster: MemoryCluster) -> str:
    (ext,) = cluster.jobs
    return ext


def test_the_clusters_nodes_become_the_pools_and_no_agent_takes_their_names(store: Any, bridge: ClusterBridge) -> None:
    nodes = {n.name: n for n in store.list_nodes()}
    assert set(nodes) == {"hpc.n1", "hpc.n2"}
    n1 = nodes["hpc.n1"]
    assert n1.labels["pool"] == "hpc" and n1.labels["source"] == "slurm" and len(n1.gpus) == 4
    assert n1.gpus[0].model == "H100-80GB" and n1.backend == "slurm"
    assert bridge.cluster_nodes == {"hpc.n1", "hpc.n2"}
    assert compute_prices(store)[1]["hpc.n1"] == "hpc"  # reports and budgets count its jobs under the pool
    with pytest.raises(ValidationError) as e:  # an agent (a join-token holder) naming itself after a Slurm node
        register_node(store, AgentRegister(name="hpc.n1", backend="simulated", gpus=[]))
    assert e.value.field == "name"
    assert store.get_node("hpc.n1").labels["source"] == "slurm"
    # the scheduler's view: the node carries `slurm` as a taint; only jobs Slurm can run tolerate it
    state = next(s for s in compute_snapshot(store.list_nodes(), []) if s.info.name == "hpc.n1")
    assert "slurm" in state.info.taints
    assert compute_cluster_tolerations(JobSpec(command=("x",), gpus=1)) == ("slurm",)
    assert compute_cluster_tolerations(JobSpec(command=("x",), gpus=1, port=8888)) == ()
    container = JobSpec(command=("x",), gpus=1, container=ContainerSpec(image="reg/a:1"))
    assert compute_cluster_tolerations(container) == ("kubernetes",)
    assert compute_cluster_tolerations(replace(container, nodes=2)) == ()


def test_a_placed_job_is_submitted_once_followed_and_ends_with_its_exit_code(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    job_id = place_job(store, gpus=2, env={"A": "b"})
    bridge.run_once(datetime.now(UTC))
    ext = _only(cluster)
    sub = cluster.subs[ext]
    assert (sub.job_id, sub.attempt, sub.gpus, sub.env["A"], sub.env["CORRAL_ATTEMPT"]) == (job_id, 1, 2, "b", "1")
    job = store.get_job(job_id)
    assert job.state is JobState.RUNNING and "hpc.n1" in job.delivered_to
    bridge.run_once(datetime.now(UTC))
    assert len(cluster.jobs) == 1  # not submitted again
    assert "PENDING (Priority)" in store.get_job(job_id).phase

    cluster.move(ext, STARTED, detail="RUNNING")
    cluster.jobs[ext] = replace(cluster.jobs[ext], placement={"n2": (1, 3)})  # Slurm chose another node and GPUs
    cluster.logs[ext] = b"epoch 1\n"
    bridge.run_once(datetime.now(UTC))
    job = store.get_job(job_id)
    assert job.phase == ""
    assert job.placed_parts == (("hpc.n2", (1, 3)),) and "hpc.n2" in job.delivered_to  # what the cluster chose
    assert any(e.kind == "placed" and "hpc.n2" in e.message for e in store.list_events(job_id))
    assert bridge.logs.read(job_id, 0) == b"epoch 1\n"
    cluster.logs[ext] = b"epoch 1\nepoch 2\n"
    cluster.move(ext, FAILED, 3, "FAILED (NonZeroExitCode)")
    bridge.run_once(datetime.now(UTC))
    job = store.get_job(job_id)
    assert job.state is JobState.FAILED and job.exit_code == 3 and "NonZeroExitCode" in job.reason
    assert bridge.logs.read(job_id, 0) == b"epoch 1\nepoch 2\n"  # the rest of the output, once


def test_a_placement_on_more_nodes_than_the_job_asked_for_is_not_recorded(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    """The store counts a job's parts beyond its first node only for jobs of several nodes (what an assign re-checks
    on a node): a one-node job the cluster says runs on two keeps Corral's placement."""
    job_id = place_job(store, gpus=2)
    bridge.run_once(datetime.now(UTC))
    placed = store.get_job(job_id).placed_parts
    ext = _only(cluster)
    cluster.move(ext, STARTED, detail="RUNNING")
    cluster.jobs[ext] = replace(cluster.jobs[ext], placement={"n1": (0, 1), "n2": (0, 1)})
    bridge.run_once(datetime.now(UTC))
    assert store.get_job(job_id).placed_parts == placed


def test_a_cancel_reaches_the_cluster_and_the_job_ends_cancelled(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    job_id = place_job(store, gpus=2)
    bridge.run_once(datetime.now(UTC))
    ext = _only(cluster)
    cluster.move(ext, STARTED)
    assert store.request_cancel(job_id, datetime.now(UTC)) is not None
    bridge.run_once(datetime.now(UTC))
    assert cluster.cancelled == [ext]
    bridge.run_once(datetime.now(UTC))
    assert store.get_job(job_id).state is JobState.CANCELLED


def test_a_job_cancelled_by_the_clusters_admin_fails_saying_so(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    job_id = place_job(store, gpus=2)
    bridge.run_once(datetime.now(UTC))
    cluster.move(_only(cluster), CANCELLED, detail="CANCELLED")
    bridge.run_once(datetime.now(UTC))
    job = store.get_job(job_id)
    assert job.state is JobState.FAILED and "cancelled in the slurm cluster" in job.reason


def test_stale_attempts_are_stopped_and_another_installations_jobs_left_alone(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    job_id = place_job(store, gpus=1)
    # an older installation's job of the same name (made long before this job was placed): not this job
    old = ClusterJob("7", job_id, 1, SUCCEEDED, 0, submitted_s=(T0 - timedelta(hours=1)).timestamp())
    cluster.jobs["7"] = old
    bridge.run_once(datetime.now(UTC))
    assert store.get_job(job_id).state is JobState.RUNNING  # not ended by the other one's exit
    mine = next(e for e in cluster.jobs if e != "7")
    cluster.move(mine, STARTED)
    # Corral requeues it (a lost node, a preemption): the cluster's attempt 1 is stopped, attempt 2 submitted later
    assert store.requeue_job(job_id, "node lost", datetime.now(UTC))
    unknown = ClusterJob("8", 999_999, 1, STARTED, submitted_s=datetime.now(UTC).timestamp())  # no such job here
    cluster.jobs["8"] = unknown
    bridge.run_once(datetime.now(UTC))
    assert mine in cluster.cancelled and "8" not in cluster.cancelled and "7" not in cluster.cancelled


def test_a_job_the_cluster_forgot_fails_and_an_unreachable_cluster_fails_nothing(
    store: Any, bridge: ClusterBridge, cluster: MemoryCluster
) -> None:
    job_id = place_job(store, gpus=2)
    bridge.run_once(datetime.now(UTC))
    ext = _only(cluster)
    cluster.down = True
    for _ in range(5):
        bridge.run_once(datetime.now(UTC))
    assert store.get_job(job_id).state is JobState.RUNNING
    assert any(e.kind == "unreachable" for e in store.list_pool_events("hpc", limit=10))
    cluster.down = False
    del cluster.jobs[ext]  # purged while the server looked away
    for _ in range(bridge_module.MISSES_BEFORE_LOST):
        bridge.run_once(datetime.now(UTC))
    job = store.get_job(job_id)
    assert job.state is JobState.FAILED and "no longer knows" in job.reason
