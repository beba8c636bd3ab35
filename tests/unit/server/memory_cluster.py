"""A cluster held in memory behind the ClusterBackend protocol, for the cluster bridge's tests
(test_cluster_bridge.py, test_slurm_pool_hostile.py): it does what it is told and nothing more, and the tests move
its jobs along. The real backends are proven against real Slurm (tests/e2e/test_slurm_pool.py,
tests/integration/test_slurm_rest_backend.py) and the Kubernetes API server of tests/kube_api."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from corral.clusters.base import CANCELLED, QUEUED, ClusterError, ClusterJob, ClusterNode, Submission
from corral.core.models import JobSpec
from corral.core.pools import PoolSpec
from corral.server.background import clusters as bridge_module
from corral.server.background.clusters import ClusterBridge
from corral.server.services.logs import LogStore

ATTACKER_UID = 4242  # a user of the Slurm cluster, not Corral


class MemoryCluster:
    kind = "slurm"

    def __init__(self) -> None:
        self.nodes = [ClusterNode("n1", 4, "H100"), ClusterNode("n2", 4, "H100")]
        self.jobs: dict[str, ClusterJob] = {}
        self.subs: dict[str, Submission] = {}
        self.logs: dict[str, bytes] = {}
        self.cancelled: list[str] = []
        self.reads: list[tuple[str, int, int]] = []
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ClusterError("cannot reach the controller", transient=True)

    def list_nodes(self) -> list[ClusterNode]:
        self._check()
        return list(self.nodes)

    def submit(self, sub: Submission) -> str:
        self._check()
        for ext, held in self.subs.items():
            if held.name == sub.name:
                return ext
        ext = str(100 + len(self.jobs))
        self.jobs[ext] = ClusterJob(ext, sub.job_id, sub.attempt, QUEUED, detail="PENDING (Priority)",
                                    submitted_s=datetime.now(UTC).timestamp(), uid=sub.uid)  # fmt: skip
        self.subs[ext] = sub
        return ext

    def runs_as(self, uid: int | None) -> int | None:  # as Slurm in job-user mode: the job's own account
        return uid

    def forge(self, ext: str, job_id: int, attempt: int, state: str = QUEUED, **kw: Any) -> None:
        """A cluster user's own `sbatch --job-name=corral-<job_id>-<attempt>` (straight to Slurm, not Corral's)."""
        kw.setdefault("uid", ATTACKER_UID)  # squeue says whose it is: the cluster user's own
        self.jobs[ext] = ClusterJob(ext, job_id, attempt, state, submitted_s=datetime.now(UTC).timestamp(), **kw)

    def list_jobs(self) -> list[ClusterJob]:
        self._check()
        return list(self.jobs.values())

    def cancel(self, external_id: str) -> None:
        self._check()
        self.cancelled.append(external_id)
        if external_id in self.jobs and not self.jobs[external_id].ended:
            self.move(external_id, CANCELLED, detail="CANCELLED")

    def read_log(self, external_id: str, offset: int, limit: int) -> bytes:
        self.reads.append((external_id, offset, limit))
        return self.logs.get(external_id, b"")[offset : offset + limit]

    def close(self) -> None:
        pass

    def move(self, ext: str, state: str, exit_code: int | None = None, detail: str = "") -> None:
        self.jobs[ext] = replace(self.jobs[ext], state=state, exit_code=exit_code, detail=detail)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> MemoryCluster:
    """Every cluster pool's backend is this one cluster."""
    c = MemoryCluster()
    monkeypatch.setattr(bridge_module, "create_backend", lambda spec: c)
    return c


@pytest.fixture
def bridge(store: Any, cluster: MemoryCluster, tmp_path: Path) -> ClusterBridge:
    return make_bridge(store, tmp_path)


def place_job(store: Any, gpus: int, **kw: Any) -> int:
    """A job the scheduler placed on hpc.n1 (GPUs 0..gpus-1): the bridge's to hand to the cluster."""
    job = store.create_job(JobSpec(command=("train",), gpus=gpus, **kw), datetime.now(UTC))
    assert store.assign_job_parts(job.id, [("hpc.n1", list(range(gpus)))], datetime.now(UTC))
    return int(job.id)


def make_bridge(store: Any, tmp_path: Path, max_log: int = 0) -> ClusterBridge:
    """Pool `hpc` (slurm) in `store` and a bridge over it that has read its nodes once."""
    store.create_pool(PoolSpec(name="hpc", provider="slurm", kind="slurm", instance_types=(),
                               settings={"slurm_conf": "/x", "log_dir": "/y"}), "admin", datetime.now(UTC))  # fmt: skip
    b = ClusterBridge(store, LogStore(tmp_path / "logs", max_log), None, inventory_every_s=0.0)
    b.run_once(datetime.now(UTC))
    return b
