"""The kubernetes pool's backend through the official client (kubernetes 36) against the fake API server
(tests/kube_api): inventory, Pods as Corral makes them, how each way of ending comes back, cancel, idempotent
submit, a restarted server finding its Pods, a watch whose resourceVersion expired, hostile tenant names, and a
token the API refuses."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes  # the dev extra has it (corral[kubernetes] for users)
import pytest

from corral.clusters.base import (
    CANCELLED,
    FAILED,
    QUEUED,
    STARTED,
    SUCCEEDED,
    ClusterBackend,
    ClusterError,
    ClusterJob,
    RegistryLogin,
    Submission,
)
from corral.clusters.kubernetes import KubernetesBackend
from corral.core.pools import compute_model_memory
from kube_api.server import FakeKubeApi
from kube_api.store import ApiError

MODEL = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def kube() -> Iterator[FakeKubeApi]:
    with FakeKubeApi(nodes=2, gpus=4, model=MODEL) as api:
        yield api


@pytest.fixture
def make_backend(kube: FakeKubeApi, tmp_path: Path) -> Iterator[Callable[..., KubernetesBackend]]:
    made: list[KubernetesBackend] = []

    def make(token: str | None = None, **settings: str) -> KubernetesBackend:
        path = kube.write_kubeconfig(tmp_path / f"kubeconfig-{len(made)}", token=token)
        backend = KubernetesBackend({"kubeconfig": str(path), **settings})
        backend.watch_timeout_s = 2
        made.append(backend)
        return backend

    yield make
    for b in made:
        b.close()


@pytest.fixture
def backend(make_backend: Callable[..., KubernetesBackend]) -> KubernetesBackend:
    return make_backend()


def job(job_id: int = 1, script: str = "echo hello", **kw: Any) -> Submission:
    kw.setdefault("tenant", "team-a")
    kw.setdefault("image", "busybox:1.36")
    return Submission(job_id=job_id, attempt=kw.pop("attempt", 1), command=("sh", "-c", script), **kw)


def wait_job(
    backend: KubernetesBackend, ext: str, until: Callable[[ClusterJob], bool], timeout_s: float = 15
) -> ClusterJob:
    deadline = time.monotonic() + timeout_s
    seen: ClusterJob | None = None
    while time.monotonic() < deadline:
        seen = next((j for j in backend.list_jobs() if j.external_id == ext), None)
        if seen is not None and until(seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{ext}: last seen {seen}")


def wait_until(check: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def has_pod(kube: FakeKubeApi, ext: str) -> bool:
    try:
        kube.pod(*ext.split("/"))
    except ApiError:
        return False
    return True


def ended(j: ClusterJob) -> bool:
    return j.ended


def test_backend_is_a_cluster_backend(backend: KubernetesBackend) -> None:
    assert isinstance(backend, ClusterBackend) and backend.kind == "kubernetes"


def test_inventory_reads_gpus_model_memory_quantities_states_and_taints(
    kube: FakeKubeApi, backend: KubernetesBackend
) -> None:
    kube.set_node("gpu-node-0", allocatable={"cpu": "15500m", "memory": "128974848Ki"})
    kube.set_node("gpu-node-1", unschedulable=True, taints=["nvidia.com/gpu=present:NoSchedule", "spot:NoExecute"])
    nodes = {n.name: n for n in backend.list_nodes()}
    a, b = nodes["gpu-node-0"], nodes["gpu-node-1"]
    assert (a.gpus, a.gpu_model, a.gpu_memory_mib, a.cpus, a.memory_mib, a.state) == (
        4,
        MODEL,
        81559,
        15,
        125952,
        "up",
    )
    assert (b.cpus, b.memory_mib, b.state) == (16, 65536, "drain")
    assert b.taints == ("nvidia.com/gpu=present:NoSchedule", "spot=:NoExecute")
    assert a.labels["nvidia.com/gpu.product"] == MODEL
    kube.set_node("gpu-node-0", ready=False, gpus=2)
    a = next(n for n in backend.list_nodes() if n.name == "gpu-node-0")
    assert (a.state, a.gpus) == ("down", 2)


def test_a_job_runs_as_a_pod_in_its_tenants_namespace(kube: FakeKubeApi, backend: KubernetesBackend) -> None:
    corral_model = next(iter(backend.list_nodes())).gpu_model  # what the inventory says...
    corral_name = compute_model_memory(corral_model, 81559)[0]  # ...and the name Corral gives it ("...-79GB")
    login = RegistryLogin(host="registry.example.com", username="robot", password="s3cret")
    sub = job(
        7,
        "echo hello $GREETING; pwd",
        gpus=2,
        cpus=4,
        memory_mib=2048,
        gpu_model=corral_name,
        env={"GREETING": "world"},
        workdir="/tmp",
        tolerations=("dedicated=ml:NoSchedule", "spot"),
        uid=1000,
        gid=1000,
        time_limit_s=600,
        registry_login=login,
    )
    ext = backend.submit(sub)
    assert ext == "corral-team-a/corral-7-1"
    pod = kube.pod("corral-team-a", "corral-7-1")
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"]["labels"] == {
        "corral.job-id": "7",
        "corral.attempt": "1",
        "corral.tenant": "team-a",
        "app.kubernetes.io/managed-by": "corral",
    }
    assert c["image"] == "busybox:1.36" and c["command"] == ["sh", "-c", "echo hello $GREETING; pwd"]
    assert c["env"] == [{"name": "GREETING", "value": "world"}] and c["workingDir"] == "/tmp"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2", "cpu": "4", "memory": "2048Mi"}
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 600
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": MODEL}  # the label's value, not Corral's name
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
    ]
    assert spec["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000}
    assert spec["automountServiceAccountToken"] is False
    (pull,) = spec["imagePullSecrets"]
    secret = kube.store.get("secrets", "corral-team-a", pull["name"])
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    auths = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))["auths"]
    assert auths["registry.example.com"]["username"] == "robot"
    assert base64.b64decode(auths["registry.example.com"]["auth"]) == b"robot:s3cret"
    ns = kube.store.get("namespaces", "", "corral-team-a")
    assert ns["metadata"]["labels"]["corral.tenant"] == "team-a"

    done = wait_job(backend, ext, ended)
    assert (done.state, done.exit_code, done.job_id, done.attempt) == (SUCCEEDED, 0, 7, 1)
    assert list(done.placement) in (["gpu-node-0"], ["gpu-node-1"]) and done.submitted_s is not None
    assert backend.read_log(ext, 0, 1 << 20) == b"hello world\n/tmp\n"
    assert backend.read_log(ext, 6, 5) == b"world"
    assert backend.read_log(ext, 100, 10) == b""
    # a second job with the same registry login replaces the secret (the 409 path) and names the same one
    login2 = RegistryLogin(host="registry.example.com", username="robot", password="rotated")
    backend.submit(job(8, registry_login=login2))
    secret = kube.store.get("secrets", "corral-team-a", pull["name"])
    auths = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))["auths"]
    assert auths["registry.example.com"]["password"] == "rotated"


def test_a_nonzero_exit_fails_with_its_code(backend: KubernetesBackend) -> None:
    ext = backend.submit(job(2, "echo oops >&2; exit 3"))
    done = wait_job(backend, ext, ended)
    assert (done.state, done.exit_code, done.detail) == (FAILED, 3, "Error")
    assert backend.read_log(ext, 0, 100) == b"oops\n"


@pytest.mark.parametrize(
    ("case", "image", "time_limit_s", "exit_code", "detail"),
    [
        ("oom", "busybox", None, 137, "OOMKilled"),
        ("evicted", "busybox", None, 137, "Evicted: The node was low on resource: memory."),
        ("deadline", "busybox", 1, 137, "DeadlineExceeded: Pod was active on the node longer than"),
        ("image pull", "missing/nope:1", None, None, "ErrImagePull: rpc error: code = NotFound"),
    ],
)
def test_each_way_a_pod_fails_comes_back_with_its_reason(
    kube: FakeKubeApi,
    backend: KubernetesBackend,
    case: str,
    image: str,
    time_limit_s: int | None,
    exit_code: int | None,
    detail: str,
) -> None:
    ext = backend.submit(job(3, "sleep 30", image=image, time_limit_s=time_limit_s))
    ns, name = ext.split("/")
    if case in ("oom", "evicted"):
        wait_job(backend, ext, lambda j: j.state == STARTED)
        kube.oom_kill(ns, name) if case == "oom" else kube.evict(ns, name)
    done = wait_job(backend, ext, ended)
    assert (done.state, done.exit_code) == (FAILED, exit_code)
    # an image pull is seen failing either at its first error or once the kubelet backs off (load decides which)
    details = (detail, "ImagePullBackOff: Back-off pulling image") if case == "image pull" else (detail,)
    assert done.detail.startswith(details), done.detail
    if case == "image pull":  # it would retry for ever: the backend deletes it, and still says why it failed
        wait_until(lambda: not has_pod(kube, ext))
        again = wait_job(backend, ext, ended)
        assert (again.state, again.detail) == (FAILED, done.detail)
        assert backend.read_log(ext, 0, 100) == b""


def test_a_pod_waiting_for_room_is_queued_with_the_schedulers_words(backend: KubernetesBackend) -> None:
    ext = backend.submit(job(4, gpus=16))
    queued = wait_job(backend, ext, lambda j: j.detail.startswith("Unschedulable"))
    assert queued.state == QUEUED and queued.placement == {}
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu" in queued.detail
    assert backend.read_log(ext, 0, 100) == b""  # not started: nothing, not an error


def test_cancel_deletes_the_pod_and_is_idempotent(kube: FakeKubeApi, backend: KubernetesBackend) -> None:
    ext = backend.submit(job(5, "echo started; sleep 30"))
    wait_job(backend, ext, lambda j: j.state == STARTED)
    backend.cancel(ext)
    done = wait_job(backend, ext, ended)
    assert done.state == CANCELLED
    wait_until(lambda: not has_pod(kube, ext))
    backend.cancel(ext)  # again: not an error
    backend.cancel("corral-team-a/corral-999-1")  # never there
    assert wait_job(backend, ext, ended).state == CANCELLED


def test_submitting_the_same_name_twice_returns_the_same_pod(kube: FakeKubeApi, backend: KubernetesBackend) -> None:
    first = backend.submit(job(6, "sleep 30"))
    uid = kube.pod(*first.split("/"))["metadata"]["uid"]
    assert backend.submit(job(6, "sleep 30")) == first
    pods, _ = kube.store.list("pods", "corral-team-a")
    assert [p["metadata"]["uid"] for p in pods] == [uid]


def test_a_new_backend_finds_the_running_pod_by_its_labels(
    kube: FakeKubeApi, make_backend: Callable[..., KubernetesBackend]
) -> None:
    before = make_backend()
    ext = before.submit(job(9, "sleep 30"))
    wait_job(before, ext, lambda j: j.state == STARTED)
    before.close()  # the server stops...
    kube.store.create("namespaces", "", {"metadata": {"name": "other"}})  # ...and a Pod not Corral's is there
    other = {"metadata": {"name": "corral-77-1"}, "spec": {"containers": [{"name": "x", "image": "y"}]}}
    kube.store.create("pods", "other", other)
    after = make_backend()  # ...and starts again
    (found,) = after.list_jobs()
    assert (found.external_id, found.job_id, found.attempt, found.state) == (ext, 9, 1, STARTED)


def test_a_watch_whose_resource_version_expired_lists_again_and_goes_on(
    kube: FakeKubeApi, backend: KubernetesBackend
) -> None:
    first = backend.submit(job(10, "sleep 30"))
    wait_job(backend, first, lambda j: j.state == STARTED)
    wait_until(lambda: kube.watches_open >= 1)
    kube.restart()  # the watch ends, and its resourceVersion is now too old (410 Gone)
    wait_until(lambda: kube.expired_watches == 1)
    second = backend.submit(job(11, "exit 4"))
    done = wait_job(backend, second, ended)
    assert (done.state, done.exit_code) == (FAILED, 4)
    wait_until(lambda: kube.watches_open >= 1)  # watching again, from the new list's resourceVersion
    assert backend._watching
    kube.oom_kill(*first.split("/"))  # seen through the renewed watch
    assert wait_job(backend, first, ended).detail == "OOMKilled"


@pytest.mark.parametrize("tenant", ["../x", "x/../../kube-system", "Team_A", "a" * 70, "team.a", "kube-system"])
def test_a_hostile_tenant_name_stays_in_a_namespace_of_its_own(
    kube: FakeKubeApi, backend: KubernetesBackend, tenant: str
) -> None:
    ext = backend.submit(job(12, tenant=tenant))  # the fake refuses names and labels the real API refuses
    ns, _ = ext.split("/")
    assert ns.startswith("corral-") and len(ns) <= 63 and "/" not in ns and ".." not in ns
    assert kube.store.get("namespaces", "", ns)["metadata"]["annotations"]["corral.tenant"] == tenant
    assert wait_job(backend, ext, ended).state == SUCCEEDED
    assert backend.submit(job(13, tenant="team-a")).split("/")[0] != ns


def test_tenants_whose_names_read_alike_get_different_namespaces(backend: KubernetesBackend) -> None:
    names = {backend.submit(job(20 + i, tenant=t)).split("/")[0] for i, t in enumerate(["team-a", "team.a", "team_a"])}
    assert len(names) == 3


def test_a_wrong_token_is_a_clear_cluster_error(make_backend: Callable[..., KubernetesBackend]) -> None:
    backend = make_backend(token="not-the-token")
    with pytest.raises(ClusterError, match=r"refused the pool's credentials \(401 Unauthorized\) to list nodes"):
        backend.list_nodes()
    with pytest.raises(ClusterError, match="401"):
        backend.submit(job(30))


def test_refused_submissions(backend: KubernetesBackend) -> None:
    with pytest.raises(ClusterError, match="multi-node jobs are not supported"):
        backend.submit(job(31, nodes=2))
    with pytest.raises(ClusterError, match="containers only"):
        backend.submit(job(32, image=""))
    with pytest.raises(ClusterError, match="toleration"):
        backend.submit(job(33, tolerations=("a=b:Sometimes",)))


def test_an_unreadable_kubeconfig_and_an_unreachable_api_are_cluster_errors(tmp_path: Path) -> None:
    missing = KubernetesBackend({"kubeconfig": str(tmp_path / "nope")})
    with pytest.raises(ClusterError, match="kubeconfig"):
        missing.list_nodes()
    with FakeKubeApi(nodes=1) as api:
        path = api.write_kubeconfig(tmp_path / "kc")
    gone = KubernetesBackend({"kubeconfig": str(path)})  # the server stopped
    with pytest.raises(ClusterError, match="out of reach") as e:
        gone.list_nodes()
    assert e.value.transient


def test_the_fake_answers_errors_as_the_real_api_does(kube: FakeKubeApi, tmp_path: Path) -> None:
    api = kubernetes.config.new_client_from_config(config_file=str(kube.write_kubeconfig(tmp_path / "kc")))
    core = kubernetes.client.CoreV1Api(api)

    def status(call: Callable[[], object]) -> dict[str, Any]:
        with pytest.raises(kubernetes.client.ApiException) as e:
            call()
        body: dict[str, Any] = json.loads(e.value.body)
        assert (body["kind"], body["apiVersion"], body["status"], body["code"]) == (
            "Status",
            "v1",
            "Failure",
            e.value.status,
        )
        return body

    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    missing = status(lambda: core.create_namespaced_pod("nope", pod))
    assert (missing["reason"], missing["message"]) == ("NotFound", 'namespaces "nope" not found')
    core.create_namespace({"metadata": {"name": "ns"}})
    again = status(lambda: core.create_namespace({"metadata": {"name": "ns"}}))
    assert (again["reason"], again["details"]) == ("AlreadyExists", {"name": "ns", "kind": "namespaces"})
    no_image = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    invalid = status(lambda: core.create_namespaced_pod("ns", no_image))
    assert invalid["reason"] == "Invalid" and "spec.containers[0].image" in invalid["message"]
    assert status(lambda: core.read_namespaced_pod("p", "ns"))["message"] == 'pods "p" not found'
    created = core.create_namespaced_pod("ns", pod)
    assert created.metadata.uid and created.metadata.resource_version and created.status.phase == "Pending"
    unauthorized = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(kube.write_kubeconfig(tmp_path / "bad", token="x")))
    )
    assert status(lambda: unauthorized.list_node())["reason"] == "Unauthorized"
