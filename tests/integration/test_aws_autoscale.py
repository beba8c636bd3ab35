"""The autoscaler's loop with the real `aws` provider against moto's server (real boto3 over HTTP): a job that fits
no node starts an EC2 instance of the cheapest type that fits, tagged and named for its node; moto's instances never
join, so after the join timeout the instance is terminated and counted as a failed launch, and that type backs off
at once: the next cheapest type that fits is started instead (and the job says so)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from corral.api.pools import InstanceTypeIn, PoolIn
from corral.core.models import JobSpec
from corral.server.background.autoscaler import Autoscaler, JoinAccess
from corral.server.background.scheduling import Scheduler
from corral.server.services.notify import NodeNotifier
from corral.store.sql import SqlStore, open_store

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture
def ec2(moto_endpoint: str, aws_env: None) -> Any:
    import boto3

    return boto3.client("ec2", endpoint_url=moto_endpoint, region_name=REGION, **CREDENTIALS)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    s = open_store(f"sqlite:///{tmp_path / 'corral.db'}")
    yield s
    s.close()


def _wait(pred: Any, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := pred():
            return got
        time.sleep(0.1)
    raise AssertionError("not reached")


def test_a_launch_that_never_joins_is_terminated_counted_and_backed_off(
    store: SqlStore, ec2: Any, moto_endpoint: str, tmp_path: Path
) -> None:
    from corral.server.services.pools import create_pool

    ami = str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])
    admin = _admin(store)
    body = PoolIn(
        name="gpu-aws",
        provider="aws",
        region=REGION,
        instance_types=[
            InstanceTypeIn(name="p3.8xlarge", gpus=4, gpu_model="V100-16GB", price_per_hour=12.24),
            InstanceTypeIn(name="g5.12xlarge", gpus=4, gpu_model="A10G-24GB", price_per_hour=5.67),
        ],
        max_nodes=2,
        join_timeout_s=5,
        settings={"ami": ami, "endpoint_url": moto_endpoint, "install_command": "true"},
    )
    create_pool(store, admin, body, tmp_path / "pools")
    tenant = store.find_tenant("default")
    assert tenant is not None
    job = store.create_job(JobSpec(command=("train",), gpus=4, tenant_id=tenant.id), datetime.now(UTC))
    scheduler = Scheduler(store, NodeNotifier(), "bestfit", 1.0)
    tokens: list[str] = []

    def make_token(ttl: float, what: str) -> tuple[str, int]:
        tokens.append(what)
        return f"token-{len(tokens)}", len(tokens)

    scaler = Autoscaler(store, scheduler, JoinAccess("https://corral.example:8602", make_token), tmp_path / "pools")
    try:
        t0 = datetime.now(UTC)
        scheduler.run_once(t0)
        [launch] = scaler.run_once(t0)
        assert launch.instance_type == "g5.12xlarge" and launch.job_ids == (str(job.id),)  # the cheapest that fits
        [node] = store.list_pool_nodes("gpu-aws")
        node = _wait(lambda: (n := store.list_pool_nodes("gpu-aws")[0]).provider_id and n)
        reservations = ec2.describe_instances(InstanceIds=[node.provider_id])["Reservations"]
        instance = reservations[0]["Instances"][0]
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert instance["InstanceType"] == "g5.12xlarge" and instance["ImageId"] == ami
        assert tags["corral-pool"] == "gpu-aws" and tags["corral-node"] == node.name == tags["Name"]
        code, text = scheduler.pool_notes[job.id]
        assert code == "scale-up" and "pool gpu-aws is starting 1 x g5.12xlarge" in text
        scheduler.run_once(t0 + timedelta(seconds=1))
        assert scaler.run_once(t0 + timedelta(seconds=1)) == []  # the node starting is the job's: no second launch
        code, text = scheduler.pool_notes[job.id]
        assert code == "scale-up" and node.name in text

        # No agent ever joins (moto's instance runs nothing): past the join timeout it fails and is terminated.
        later = t0 + timedelta(seconds=6)
        scheduler.run_once(later)
        # ... and in the same pass that type backs off: the next cheapest type that fits is started instead
        [retry] = [a for a in scaler.run_once(later) if hasattr(a, "instance_type")]
        assert retry.instance_type == "p3.8xlarge"
        failed = next(n for n in store.list_pool_nodes("gpu-aws") if n.name == node.name)
        assert failed.state == "failed" and "did not join within 5 s" in failed.reason
        code, text = scheduler.pool_notes[job.id]
        assert code == "scale-up" and "p3.8xlarge" in text

        def terminated() -> bool:
            state = ec2.describe_instances(InstanceIds=[node.provider_id])["Reservations"][0]["Instances"][0]
            return bool(state["State"]["Name"] in ("shutting-down", "terminated"))

        _wait(terminated)
        events = [e.kind for e in store.list_pool_events("gpu-aws")]
        assert events.count("launch") == 2 and "launch-failed" in events
    finally:
        scaler._io.shutdown(wait=True)


def _admin(store: SqlStore) -> Any:
    from corral.server.auth import Principal
    from corral.store.records import TokenRecord

    now = datetime.now(UTC)
    tenant = store.find_tenant("default") or store.create_tenant("default", now)
    user = store.create_user("admin", "admin", now, tenant_id=tenant.id)
    return Principal(TokenRecord(1, user.id, "user", "t", now, False), user)
