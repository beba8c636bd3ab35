"""A fake Kubernetes API server for the kubernetes pool's tests: the part of the core/v1 API that Corral's backend
calls (nodes list/watch; namespaces create/get/list; pods create/get/list/watch/delete/log; secrets
create/get/replace/delete), served over plain HTTP on 127.0.0.1 with a bearer token, answering as the real one
does (Status bodies for errors, one resourceVersion counter, chunked watch streams, 410 for a resourceVersion
too old), with a scheduler and kubelet inside (kubelet.py) that run each Pod's command as a local process.

    with FakeKubeApi(nodes=2, gpus=4) as api:
        api.write_kubeconfig(path)       # for kubernetes.config.new_client_from_config(config_file=path)

or as a process: `python -m tests.kube_api.server --port 0 --kubeconfig PATH --nodes 2 --gpus 4` prints its URL.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import select
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .kubelet import GPU, Kubelet
from .store import ApiError, Obj, ObjectStore, invalid, match_labels, not_found

DEFAULT_WATCH_S = 60.0
MODEL_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
_ROUTES = [
    (re.compile(r"^/api/v1/(?P<resource>nodes|namespaces|pods|secrets)$"), "collection"),
    (re.compile(r"^/api/v1/(?P<resource>nodes|namespaces)/(?P<name>[^/]+)$"), "item"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<resource>pods|secrets)$"), "collection"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<resource>pods|secrets)/(?P<name>[^/]+)$"), "item"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$"), "log"),
]


def make_node(
    name: str, gpus: int, model: str = "", memory_mib: int = 81559, cpu: str = "16", memory: str = "64Gi"
) -> Obj:
    labels = {"kubernetes.io/hostname": name} | ({MODEL_LABEL: model, MEMORY_LABEL: str(memory_mib)} if model else {})
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus)}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable), "conditions": [ready]},
    }


class FakeKubeApi:
    """The server and its kubelet, started on enter (or `start()`), stopped on exit. `token`: what a client must
    send; `url`: where it listens."""

    def __init__(self, nodes: int = 2, gpus: int = 4, model: str = "NVIDIA-H100-80GB-HBM3", port: int = 0) -> None:
        self.store = ObjectStore()
        self.kubelet = Kubelet(self.store)
        self.token = secrets.token_hex(16)
        self.watches_open = 0
        self.expired_watches = 0  # watches answered 410 Gone (their resourceVersion too old)
        self._drop_watches = 0  # bumped by drop_watches(): every open watch ends
        self._http = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._http.daemon_threads = True
        self._http.api = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._http.serve_forever, name="fake-kube-api", daemon=True)
        self.stopping = False
        for i in range(nodes):
            self.store.create("nodes", "", make_node(f"gpu-node-{i}", gpus, model))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def start(self) -> FakeKubeApi:
        self.kubelet.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        with self.store.changed:
            self.store.changed.notify_all()
        self._http.shutdown()
        self._http.server_close()
        self.kubelet.stop()

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path | str, token: str | None = None, context: str = "fake") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "corral", "user": {"token": token or self.token}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "corral"}}],
            "current-context": context,
        }
        Path(path).write_text(json.dumps(config, indent=2))  # JSON is YAML
        return Path(path)

    # ---- what tests do to the cluster ----
    def pod(self, namespace: str, name: str) -> Obj:
        return self.store.get("pods", namespace, name)

    def evict(self, namespace: str, name: str, message: str = "The node was low on resource: memory.") -> None:
        self.kubelet.evict(namespace, name, message)

    def oom_kill(self, namespace: str, name: str) -> None:
        if not self.kubelet.kill(namespace, name, "OOMKilled"):
            raise not_found("pods", name)

    def set_node(
        self,
        name: str,
        gpus: int | None = None,
        ready: bool | None = None,
        unschedulable: bool | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[str] = (),
        allocatable: Mapping[str, str] | None = None,
    ) -> Obj:
        """Change a node; `taints` ("key=value:Effect") replace its taints when given."""

        def change(node: Obj) -> None:
            status = node["status"]
            if gpus is not None:
                status["allocatable"][GPU] = str(gpus)
            status["allocatable"].update(allocatable or {})
            if ready is not None:
                status["conditions"] = [{"type": "Ready", "status": "True" if ready else "Unknown"}]
            if unschedulable is not None:
                node["spec"]["unschedulable"] = unschedulable
            node["metadata"]["labels"].update(labels or {})
            if taints:
                node["spec"]["taints"] = [_taint(t) for t in taints]

        return self.store.update("nodes", "", name, change)

    def restart(self) -> None:
        """As an API server restart with etcd compacted: open watches end, and a watch from any resourceVersion
        given so far gets 410 Gone."""
        self.store.compact()
        self.drop_watches()

    def drop_watches(self) -> None:
        with self.store.changed:
            self._drop_watches += 1
            self.store.changed.notify_all()


def _taint(text: str) -> Obj:
    kv, _, effect = text.partition(":")
    key, _, value = kv.partition("=")
    return {"key": key, "effect": effect or "NoSchedule"} | ({"value": value} if value else {})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked watch streams, as the client expects

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def api(self) -> FakeKubeApi:
        return self.server.api  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if self.headers.get("Authorization") != f"Bearer {self.api.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            for pattern, what in _ROUTES:
                m = pattern.match(url.path)
                if m:
                    body = json.loads(raw) if raw else {}
                    self._route(method, what, m.groupdict(), query, body)
                    return
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        except ApiError as e:
            self._send(e.code, e.status())
        except json.JSONDecodeError as e:
            self._send(400, ApiError(400, "BadRequest", f"json: {e}").status())

    def _route(self, method: str, what: str, p: dict[str, str], query: dict[str, str], body: Obj) -> None:
        store, resource, ns, name = self.api.store, p.get("resource", "pods"), p.get("ns"), p.get("name")
        if what == "log" and method == "GET":
            self._log(ns or "", name or "", query)
        elif what == "collection" and method == "GET" and query.get("watch", "").lower() in ("true", "1"):
            self._watch(resource, ns, query)
        elif what == "collection" and method == "GET":
            items, rv = store.list(resource, ns, query.get("labelSelector", ""))
            kind = {"nodes": "NodeList", "namespaces": "NamespaceList", "pods": "PodList", "secrets": "SecretList"}
            self._send(
                200,
                {"kind": kind[resource], "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}, "items": items},
            )
        elif what == "collection" and method == "POST" and resource in ("namespaces", "pods", "secrets"):
            self._check_create(resource, ns or "", body)
            self._send(201, store.create(resource, ns or "", body))
        elif what == "item" and method == "GET":
            self._send(200, store.get(resource, ns or "", name or ""))
        elif what == "item" and method == "PUT" and resource == "secrets":
            self._check_create(resource, ns or "", body)
            self._send(200, store.replace(resource, ns or "", name or "", body))
        elif what == "item" and method == "DELETE" and resource == "pods":
            self._send(200, self._delete_pod(ns or "", name or "", body, query))
        elif what == "item" and method == "DELETE" and resource == "secrets":
            store.delete(resource, ns or "", name or "")
            self._send(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {"name": name, "kind": resource},
                },
            )
        else:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _check_create(self, resource: str, ns: str, body: Obj) -> None:
        name = (body.get("metadata") or {}).get("name", "")
        if resource == "pods":
            containers = (body.get("spec") or {}).get("containers") or []
            if not containers:
                raise invalid("Pod", name, "spec.containers", "Required value")
            for i, c in enumerate(containers):
                if not c.get("image"):
                    raise invalid("Pod", name, f"spec.containers[{i}].image", "Required value")
                if not c.get("name"):
                    raise invalid("Pod", name, f"spec.containers[{i}].name", "Required value")
            body["spec"].setdefault("restartPolicy", "Always")
            body["spec"].setdefault("schedulerName", "default-scheduler")
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        if resource == "secrets" and body.get("type") == "kubernetes.io/dockerconfigjson":
            import base64

            try:
                json.loads(base64.b64decode((body.get("data") or {})[".dockerconfigjson"]))
            except (KeyError, ValueError) as e:
                raise invalid("Secret", name, "data[.dockerconfigjson]", f"Invalid value: {e}") from e

    def _delete_pod(self, ns: str, name: str, body: Obj, query: dict[str, str]) -> Obj:
        store, kubelet = self.api.store, self.api.kubelet
        grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds", 30))
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod = store.update(
            "pods",
            ns,
            name,
            lambda p: p["metadata"].update(deletionTimestamp=stamp, deletionGracePeriodSeconds=int(grace)),
        )
        if not kubelet.kill(ns, name, "deleted", grace_s=float(grace)):
            store.delete("pods", ns, name)
        return pod

    def _log(self, ns: str, name: str, query: dict[str, str]) -> None:
        pod = self.api.store.get("pods", ns, name)
        c = pod["spec"]["containers"][0]
        if query.get("container", c["name"]) != c["name"]:
            raise ApiError(400, "BadRequest", f"container {query['container']} is not valid for pod {name}")
        state = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state") or {}
        path = self.api.kubelet.log_path(ns, name)
        if "waiting" in state or not state or not path.exists():
            why = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise ApiError(400, "BadRequest", f'container "{c["name"]}" in pod "{name}" is waiting to start: {why}')
        data = path.read_bytes()
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"])]
        self._send(200, data, "text/plain")

    def _watch(self, resource: str, ns: str | None, query: dict[str, str]) -> None:
        store, api = self.api.store, self.api
        selector, rv_text = query.get("labelSelector", ""), query.get("resourceVersion", "")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or DEFAULT_WATCH_S)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        api.watches_open += 1
        try:
            with store.changed:
                drops = api._drop_watches
                if rv_text in ("", "0"):  # from now, after the current objects as ADDED (as the real one starts)
                    items, rv = store.list(resource, ns, selector)
                    pending: list[tuple[str, Obj]] = [("ADDED", o) for o in items]
                else:
                    rv = int(rv_text)
                    pending = [(t, o) for _, t, o in store.events_after(resource, rv)]  # 410 when too old
                    rv = store.rv
            while True:  # written outside the store's lock: a slow reader holds up nobody
                for kind, obj in pending:
                    if (ns is None or obj["metadata"].get("namespace") == ns) and _selected(selector, obj):
                        self._chunk({"type": kind, "object": obj})
                with store.changed:
                    if time.monotonic() >= deadline or api.stopping or api._drop_watches != drops:
                        return
                    if self._client_gone():
                        self.close_connection = True
                        return
                    store.changed.wait(min(deadline - time.monotonic(), 0.5))
                    if rv < store.oldest:  # compacted under it (a restart): the stream ends, as a real one would
                        return
                    pending = [(t, o) for _, t, o in store.events_after(resource, rv)]
                    rv = store.rv
        except ApiError as e:
            api.expired_watches += e.code == 410
            self._chunk({"type": "ERROR", "object": e.status()})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            api.watches_open -= 1
            self._end_chunks()

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        return bool(readable)  # a watch client sends nothing more: readable means it closed (or broke) the stream

    def _chunk(self, event: Obj) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_chunks(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _send(self, code: int, body: Obj | bytes, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _selected(selector: str, obj: Obj) -> bool:
    return match_labels(selector, obj["metadata"].get("labels") or {})


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--model", default="NVIDIA-H100-80GB-HBM3")
    args = ap.parse_args(argv)
    api = FakeKubeApi(nodes=args.nodes, gpus=args.gpus, model=args.model, port=args.port).start()
    api.write_kubeconfig(args.kubeconfig)
    print(api.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    api.stop()


if __name__ == "__main__":
    main()
