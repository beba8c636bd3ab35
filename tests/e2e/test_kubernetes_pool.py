"""A kubernetes pool end to end: a real `corral up` (its own node has no GPUs) in front of tests/kube_api, a server
that speaks the part of the Kubernetes API the pool uses (no real API server can be installed here; what that
proves and what it does not: docs/pools.md). Through the real `kubernetes` client the pool reads the cluster's nodes,
runs container jobs as Pods in the tenant's namespace and follows them back: output, exit codes, an image that
cannot be pulled, a cancel that deletes the Pod. A job the cluster cannot run (no image) is refused when pinned."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from .conftest import Corral, wait_for

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Path]:
    """The fake API server as a process of its own (2 nodes x 4 GPUs); yields its kubeconfig."""
    config = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.kube_api.server", "--port", "0", "--kubeconfig", str(config),
         "--nodes", "2", "--gpus", "4", "--model", "NVIDIA-H100-80GB-HBM3"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.readline()  # its URL, once it listens
    yield config
    proc.terminate()
    proc.wait(10)


def _ended(c: Corral, job: int, timeout_s: float = 60) -> dict[str, Any]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: (j := c.job(job))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and j, timeout_s, f"job {job} ends"
    )


def test_container_jobs_run_as_pods_and_come_back(corral_factory: Any, kube: Path) -> None:
    c: Corral = corral_factory(gpus="none")
    c.start()
    r = c.cli("pool", "create", "k8s", "--kind", "kubernetes", "--setting", f"kubeconfig={kube}")
    assert r.returncode == 0, r.stderr
    nodes = wait_for(
        lambda: (ns := [n for n in c.cli_json("nodes") if n["source"] == "kubernetes"]) and len(ns) == 2 and ns,
        30, "the cluster's nodes read",
    )  # fmt: skip
    assert all(n["pool"] == "k8s" and n["gpus_total"] == 4 for n in nodes), nodes

    ok = c.submit("--gpus", "1", "--image", "reg.example/team/train:1", "--env", "GREETING=hi pod", "--",
                  "sh", "-c", 'echo "greeting=$GREETING attempt=$CORRAL_ATTEMPT"; exit 3')  # fmt: skip
    done = _ended(c, ok)
    assert done["state"] == "FAILED" and done["exit_code"] == 3, (done["reason"], done["phase"])
    assert done["node"].startswith("k8s."), done
    assert c.cli("logs", str(ok)).stdout == "greeting=hi pod attempt=1\n"

    # the Pod: in the tenant's namespace, with the GPU limit and the labels tying it to its job
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kube)))
    pods = api.list_pod_for_all_namespaces(label_selector=f"corral.job-id={ok}").items
    assert len(pods) == 1 and pods[0].metadata.namespace == "corral-default", [p.metadata for p in pods]
    limits = pods[0].spec.containers[0].resources.limits
    assert limits["nvidia.com/gpu"] == "1" and pods[0].spec.containers[0].image == "reg.example/team/train:1"

    missing = c.submit("--gpus", "1", "--image", "missing/nope:1", "--", "true")
    failed = _ended(c, missing)
    assert failed["state"] == "FAILED" and "ImagePull" in failed["reason"], failed["reason"]

    sleeper = c.submit("--gpus", "2", "--image", "reg.example/team/train:1", "--", "sleep", "300")
    wait_for(lambda: api.list_pod_for_all_namespaces(label_selector=f"corral.job-id={sleeper}").items
             and api.list_pod_for_all_namespaces(label_selector=f"corral.job-id={sleeper}").items[0].status.phase
             == "Running", 30, "its Pod runs")  # fmt: skip
    assert c.cli("cancel", str(sleeper)).returncode == 0
    assert _ended(c, sleeper, 30)["state"] == "CANCELLED"
    wait_for(lambda: not api.list_pod_for_all_namespaces(label_selector=f"corral.job-id={sleeper}").items, 30,
             "its Pod deleted")  # fmt: skip

    # Kubernetes runs containers only: a command pinned to the pool is refused, naming the pool and why
    r = c.cli("submit", "--gpus", "1", "--pool", "k8s", "--", "true")
    assert r.returncode != 0 and "--pool" in r.stderr and "kubernetes cluster" in r.stderr, r.stderr
