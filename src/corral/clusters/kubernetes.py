"""A Kubernetes cluster as a pool, through the official client (`pip install corral[kubernetes]`) and the pool's
kubeconfig.

Corral admits a job (quotas, fair share, budgets, priorities); the backend makes it a Pod (restartPolicy Never) in
its tenant's namespace (`<namespace_prefix><tenant>`, made when missing), asking for its GPUs as the device
plugin's resource (`nvidia.com/gpu`) and its model through GPU feature discovery's label; Kubernetes places it and
runs it. The Pods are followed by one watch (a list, then a watch from its resourceVersion, a relist when that
version has expired): `list_jobs` reads what the watch keeps. A Pod that cannot start and would retry for ever
(its image cannot be pulled) is reported FAILED with the reason and deleted. Corral's labels on every Pod
(`app.kubernetes.io/managed-by: corral`, `corral.job-id`, ...) are how a restarted server finds them again.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from corral.clusters.base import (
    CANCELLED,
    FAILED,
    ClusterError,
    ClusterJob,
    ClusterNode,
    RegistryLogin,
    Submission,
    parse_job_name,
)
from corral.clusters.kube_objects import (
    CALL_TIMEOUT_S,
    CONTAINER,
    DEFAULTS,
    DELETE_GRACE_S,
    FORGET_AFTER_S,
    LABEL_VALUE,
    MANAGED,
    STUCK_REASONS,
    WATCH_TIMEOUT_S,
    check_settings,
    compute_job,
    compute_label_value,
    compute_namespace,
    compute_node,
    compute_toleration,
    parse_quantity,
    short_hash,
)
from corral.core.pools import compute_model_memory

log = logging.getLogger("corral.clusters.kubernetes")


def _client() -> Any:
    try:
        return importlib.import_module("kubernetes")
    except ImportError as e:
        raise ClusterError("the kubernetes client is not installed: pip install 'corral[kubernetes]'") from e


def _status_message(e: Any) -> str:
    try:
        return str(json.loads(e.body).get("message") or e.reason)
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)


class KubernetesBackend:
    """One kubernetes pool's cluster (its settings checked by check_settings)."""

    kind = "kubernetes"

    def __init__(self, settings: Mapping[str, str]) -> None:
        s = {**DEFAULTS, **check_settings(settings)}
        self.kubeconfig, self.context = s["kubeconfig"], s.get("context") or None
        self.prefix, self.gpu_resource = s["namespace_prefix"], s["gpu_resource"]
        self.model_label, self.memory_label = s["model_label"], s["memory_label"]
        self.watch_timeout_s = WATCH_TIMEOUT_S
        self._k: Any = None  # the kubernetes package, once imported
        self._api: Any = None  # its ApiClient
        self._core: Any = None  # CoreV1Api
        self._lock = threading.Lock()
        self._pods: dict[str, Any] = {}  # external id -> the latest V1Pod the watch saw
        self._gone: dict[str, tuple[float, ClusterJob]] = {}  # Pods deleted: what they ended as, and when
        self._namespaces: set[str] = set()
        self._models: dict[str, str] = {}  # Corral's name of a GPU model -> the node label's value
        self._rv: str | None = None
        self._watching = False  # a watch is up and the cache follows it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None

    # ---- the client ----
    def _core_api(self) -> Any:
        if self._core is None:
            k = _client()
            try:
                api = k.config.new_client_from_config(config_file=self.kubeconfig, context=self.context)
            except (k.config.ConfigException, OSError, ValueError) as e:
                raise ClusterError(f"kubeconfig {self.kubeconfig}: {e}") from e
            self._k, self._api, self._core = k, api, k.client.CoreV1Api(api)
        return self._core

    def _call(self, what: str, method: str, *args: Any, ok: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """One API call; ClusterError (one line why) on failure, None for a status in `ok`."""
        core = self._core_api()
        urllib3 = importlib.import_module("urllib3")
        try:
            return getattr(core, method)(*args, _request_timeout=CALL_TIMEOUT_S, **kwargs)
        except self._k.client.ApiException as e:
            if e.status in ok:
                return None
            if e.status in (401, 403):
                raise ClusterError(
                    f"the Kubernetes API refused the pool's credentials ({e.status} {e.reason}) to {what}: "
                    f"check the kubeconfig's user and its RBAC rights ({_status_message(e)})"
                ) from e
            transient = e.status == 0 or e.status >= 500 or e.status == 429
            raise ClusterError(f"{what}: {e.status} {_status_message(e)}", transient=transient) from e
        except (OSError, urllib3.exceptions.HTTPError) as e:
            raise ClusterError(f"{what}: the Kubernetes API is out of reach: {e}", transient=True) from e

    # ---- inventory ----
    def list_nodes(self) -> list[ClusterNode]:
        nodes = self._call("list nodes", "list_node").items
        out = [compute_node(n, self.gpu_resource, self.model_label, self.memory_label) for n in nodes]
        self._models = {compute_model_memory(n.gpu_model, n.gpu_memory_mib)[0]: n.gpu_model for n in out if n.gpu_model}
        return out

    # ---- submit ----
    def submit(self, sub: Submission) -> str:
        if sub.nodes > 1:
            raise ClusterError("multi-node jobs are not supported on kubernetes pools (one Pod per job)")
        if not sub.image:
            raise ClusterError("a kubernetes pool runs containers only: give the job an image")
        namespace = compute_namespace(self.prefix, sub.tenant)
        self._ensure_namespace(namespace, sub.tenant)
        pull_secret = self._apply_pull_secret(namespace, sub.registry_login) if sub.registry_login else None
        body = self.compute_pod(sub, pull_secret)
        self._call(f"create Pod {namespace}/{sub.name}", "create_namespaced_pod", namespace, body, ok=(409,))
        return f"{namespace}/{sub.name}"  # created, or there already (409): submit is idempotent by name

    def compute_pod(self, sub: Submission, pull_secret: str | None = None) -> dict[str, Any]:
        """The Pod that runs `sub` (a body for the API)."""
        limits: dict[str, str] = {}
        if sub.gpus > 0:
            limits[self.gpu_resource] = str(sub.gpus)
        if sub.cpus > 0:
            limits["cpu"] = str(sub.cpus)
        if sub.memory_mib > 0:
            limits["memory"] = f"{sub.memory_mib}Mi"
        container: dict[str, Any] = {"name": CONTAINER, "image": sub.image, "resources": {"limits": limits}}
        if sub.command:
            container["command"] = list(sub.command)
        if sub.env:
            container["env"] = [{"name": k, "value": v} for k, v in sub.env.items()]
        if sub.workdir:
            container["workingDir"] = sub.workdir
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [container],
            "enableServiceLinks": False,  # nothing of the cluster's services in the job's environment
            "automountServiceAccountToken": False,  # a job gets no credentials to the cluster's API
        }
        if sub.gpu_model:
            model = self._models.get(sub.gpu_model, sub.gpu_model)
            if not LABEL_VALUE.fullmatch(model):
                raise ClusterError(f"GPU model {sub.gpu_model!r} is not a node label value")
            spec["nodeSelector"] = {self.model_label: model}
        if sub.tolerations:
            spec["tolerations"] = [compute_toleration(t) for t in sub.tolerations]
        security = {"runAsUser": sub.uid} if sub.uid is not None else {}
        if sub.gid is not None:
            security["runAsGroup"] = sub.gid
        if security:
            spec["securityContext"] = security
        if sub.time_limit_s:
            spec["activeDeadlineSeconds"] = int(sub.time_limit_s)
        if pull_secret:
            spec["imagePullSecrets"] = [{"name": pull_secret}]
        labels = {k: compute_label_value(v) for k, v in sub.labels.items()} | dict([MANAGED])
        meta = {"name": sub.name, "labels": labels, "annotations": {"corral.tenant": sub.tenant}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def _ensure_namespace(self, namespace: str, tenant: str) -> None:
        if namespace in self._namespaces:
            return
        if self._call(f"read namespace {namespace}", "read_namespace", namespace, ok=(404,)) is None:
            labels = {"corral.tenant": compute_label_value(tenant), MANAGED[0]: MANAGED[1]}
            body = {"metadata": {"name": namespace, "labels": labels, "annotations": {"corral.tenant": tenant}}}
            self._call(f"create namespace {namespace}", "create_namespace", body, ok=(409,))
        self._namespaces.add(namespace)

    def _apply_pull_secret(self, namespace: str, login: RegistryLogin) -> str:
        """The image pull secret for `login` in `namespace`, made or replaced; returns its name."""
        name = f"corral-registry-{short_hash(login.host + chr(0) + login.username, 16)}"
        auth = base64.b64encode(f"{login.username}:{login.password}".encode()).decode()
        config = {"auths": {login.host: {"username": login.username, "password": login.password, "auth": auth}}}
        body = {
            "metadata": {"name": name, "labels": dict([MANAGED])},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
        }
        what = f"store the registry login for {login.host} in {namespace}"
        if self._call(what, "create_namespaced_secret", namespace, body, ok=(409,)) is None:
            self._call(what, "replace_namespaced_secret", name, namespace, body)
        return name

    # ---- following jobs ----
    def list_jobs(self) -> list[ClusterJob]:
        if self._thread is None:
            self._relist()  # raises when the cluster cannot be read: nothing is started then
            self._thread = threading.Thread(target=self._follow, name="corral-kube-watch", daemon=True)
            self._thread.start()
        with self._lock:
            pods = list(self._pods.values()) if self._watching else None
        if pods is None:  # the watch is down (being renewed, or failing): read the cluster directly
            pods = self._call("list Pods", "list_pod_for_all_namespaces", label_selector="=".join(MANAGED)).items
        return self._jobs(pods)

    def _jobs(self, pods: list[Any]) -> list[ClusterJob]:
        now = time.monotonic()
        out: dict[str, ClusterJob] = {}
        for pod in pods:
            if not (pod.metadata.namespace or "").startswith(self.prefix):
                continue
            job = compute_job(pod)
            if job is None:
                continue
            if job.state == FAILED and job.detail.partition(":")[0] in STUCK_REASONS:
                self._stop_stuck(job)
            out[job.external_id] = job
        with self._lock:
            for ext, (at, job) in list(self._gone.items()):
                if now - at > FORGET_AFTER_S:
                    del self._gone[ext]
                elif ext not in out or out[ext].ended:  # gone, or ended by Corral's delete: as it was reported
                    out[ext] = job
        return list(out.values())

    def _stop_stuck(self, job: ClusterJob) -> None:
        """A Pod that would wait for ever (its image cannot be pulled) is deleted; it is reported as it failed."""
        with self._lock:
            if job.external_id in self._gone:
                return
        self._forget(job.external_id, job)
        try:
            self.cancel(job.external_id)
        except ClusterError as e:
            log.info("kubernetes: cannot delete %s yet: %s", job.external_id, e)
            with self._lock:
                self._gone.pop(job.external_id, None)

    def _forget(self, external_id: str, job: ClusterJob) -> None:
        with self._lock:
            self._gone.setdefault(external_id, (time.monotonic(), job))

    def _relist(self) -> None:
        pods = self._call("list Pods", "list_pod_for_all_namespaces", label_selector="=".join(MANAGED))
        fresh = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in pods.items}
        with self._lock:
            vanished = [self._pods[k] for k in set(self._pods) - set(fresh)]
            self._pods, self._rv, self._watching = fresh, pods.metadata.resource_version, True
        for pod in vanished:  # deleted while no watch saw it
            self._deleted(pod)

    def _deleted(self, pod: Any) -> None:
        """A Pod is gone: what it was when it ended, else cancelled (deleted by Corral's cancel, or in the cluster)."""
        job = compute_job(pod)
        if job is not None:
            gone = job if job.ended else dataclasses.replace(job, state=CANCELLED, detail="the Pod was deleted")
            self._forget(job.external_id, gone)

    def _follow(self) -> None:
        """The watch thread: follows Pods from the last resourceVersion; relists when it has expired (410)."""
        backoff_s = 0.5
        while not self._stop.is_set():
            try:
                if self._rv is None:
                    self._relist()
                self._watch_once()  # ends when the server ends it (timeoutSeconds): taken up from where it was
                backoff_s = 0.5
                continue
            except ClusterError as e:
                log.info("kubernetes watch: %s", e)
            except self._k.client.ApiException as e:
                if e.status == 410:  # the resourceVersion has expired (compacted): list again, then watch from there
                    log.info("kubernetes watch: resourceVersion %s expired: listing again", self._rv)
                    self._rv = None
                    continue
                log.info("kubernetes watch refused (%s %s): again in %.1f s", e.status, e.reason, backoff_s)
            except Exception as e:  # anything else breaks this watch only (a dropped connection): taken again
                if self._stop.is_set():
                    return
                log.info("kubernetes watch broke (%s): again in %.1f s", e, backoff_s)
            with self._lock:
                self._watching = False
            self._stop.wait(backoff_s)
            backoff_s = min(backoff_s * 2, 30.0)
            self._rv = None  # after a failure: list again (the cache may have missed a deletion)

    def _watch_once(self) -> None:
        w = self._k.watch.Watch()
        self._watch = w
        stream = w.stream(
            self._core.list_pod_for_all_namespaces,
            label_selector="=".join(MANAGED),
            resource_version=self._rv,
            timeout_seconds=self.watch_timeout_s,
            _request_timeout=self.watch_timeout_s + 10,
        )
        for event in stream:
            if self._stop.is_set():
                w.stop()
                return
            pod = event["object"]
            if event["type"] not in ("ADDED", "MODIFIED", "DELETED") or not hasattr(pod, "metadata"):
                continue  # BOOKMARK
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            with self._lock:
                if event["type"] == "DELETED":
                    self._pods.pop(key, None)
                else:
                    self._pods[key] = pod
                self._rv = pod.metadata.resource_version
            if event["type"] == "DELETED":
                self._deleted(pod)
        if w.resource_version:
            self._rv = w.resource_version

    # ---- cancel, logs ----
    def cancel(self, external_id: str) -> None:
        namespace, _, name = external_id.partition("/")
        ids = parse_job_name(name)
        with self._lock:
            known = self._pods.get(external_id)
        if ids is not None and not (known is not None and (job := compute_job(known)) is not None and job.ended):
            self._forget(external_id, ClusterJob(external_id, ids[0], ids[1], CANCELLED, detail="cancelled by Corral"))
        body = {"gracePeriodSeconds": DELETE_GRACE_S, "propagationPolicy": "Background"}
        self._call(f"delete Pod {external_id}", "delete_namespaced_pod", name, namespace, body=body, ok=(404,))

    def read_log(self, external_id: str, offset: int, limit: int) -> bytes:
        namespace, _, name = external_id.partition("/")
        resp = self._call(
            f"read the log of {external_id}",
            "read_namespaced_pod_log",
            name,
            namespace,
            container=CONTAINER,
            limit_bytes=offset + limit,
            _preload_content=False,
            ok=(400, 404),  # 400: its container is waiting to start; 404: the Pod is gone
        )
        if resp is None:
            return b""
        data: bytes = resp.data
        return data[offset : offset + limit]

    def runs_as(self, uid: int | None) -> int | None:
        """Pods carry no account Corral could check (they live in Corral's own namespaces)."""
        return None

    def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._api is not None:
            self._api.close()


__all__ = ["KubernetesBackend", "check_settings", "compute_job", "compute_namespace", "parse_quantity"]
