"""The fake API server's scheduler and kubelet: binds each Pending Pod to a node with room for its GPUs (node
selector, taints, readiness and cordons as the real scheduler reads them), then runs its container's command as
a local process (the image is not pulled: one named `missing/...` fails to pull and never runs), writes the
Pod's status as a kubelet would (Running, Succeeded/Failed with the container's exit code, DeadlineExceeded) and
keeps its output as the Pod's log."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .store import ApiError, Obj, ObjectStore, now_rfc3339

TICK_S = 0.02
GPU = "nvidia.com/gpu"
_HARD = ("NoSchedule", "NoExecute")


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    started: float
    kill_reason: str = ""  # set when the kubelet kills it: DeadlineExceeded, Evicted, OOMKilled, deleted
    kill_message: str = ""
    kill_at: float = 0.0
    grace_s: float = 0.0


def _container(pod: Obj) -> Obj:
    return dict(pod["spec"]["containers"][0])


def _gpus(pod: Obj, resource: str) -> int:
    limits = (_container(pod).get("resources") or {}).get("limits") or {}
    return int(limits.get(resource, 0))


def tolerates(pod: Obj, taint: Obj) -> bool:
    for t in pod["spec"].get("tolerations") or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _ready(node: Obj) -> bool:
    conds = node.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


class Kubelet:
    """One thread for every node: schedules, starts, follows and stops Pods. `log_dir` holds each Pod's output."""

    def __init__(self, store: ObjectStore, gpu_resource: str = GPU) -> None:
        self.store = store
        self.gpu_resource = gpu_resource
        self.log_dir = Path(tempfile.mkdtemp(prefix="kube-api-logs-"))
        self.running: dict[tuple[str, str], Running] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for run in list(self.running.values()):
            if run.proc.poll() is None:
                os.killpg(run.proc.pid, signal.SIGKILL)  # the whole group: a shell's children too
                run.proc.wait()

    def log_path(self, namespace: str, name: str) -> Path:
        return self.log_dir / f"{namespace}_{name}.log"

    def kill(self, namespace: str, name: str, reason: str, message: str = "", grace_s: float = 0.0) -> bool:
        """Stop a Pod's process (SIGTERM when deleted with a grace period, then SIGKILL; else SIGKILL); its status
        is written on the next tick. False when none runs."""
        run = self.running.get((namespace, name))
        if run is None or run.proc.poll() is not None:
            return False
        run.kill_reason, run.kill_message = reason, message
        run.kill_at, run.grace_s = time.monotonic(), grace_s
        os.killpg(run.proc.pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        return True

    def evict(self, namespace: str, name: str, message: str) -> None:
        """The node-pressure eviction: the Pod fails with reason Evicted (its process killed if it runs)."""
        if not self.kill(namespace, name, "Evicted", message):
            self._write(
                (namespace, name), lambda p: p["status"].update(phase="Failed", reason="Evicted", message=message)
            )

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except ApiError:  # an object deleted between the read and the write: next tick sees it
                pass
            self._stop.wait(TICK_S)

    def tick(self) -> None:
        pods, _ = self.store.list("pods", None)
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
            key = (meta["namespace"], meta["name"])
            if meta.get("deletionTimestamp"):
                self._finish_delete(key)
            elif status.get("phase") != "Pending":
                self._follow(pod, key)
            elif not spec.get("nodeName"):
                self._schedule(pod, pods)
            elif key not in self.running:
                self._start(pod, key)

    # ---- scheduling ----
    def _schedule(self, pod: Obj, pods: list[Obj]) -> None:
        nodes, _ = self.store.list("nodes", None)
        want = _gpus(pod, self.gpu_resource)
        used: dict[str, int] = {}
        for other in pods:
            phase = (other.get("status") or {}).get("phase")
            if other["spec"].get("nodeName") and phase in ("Pending", "Running"):
                used[other["spec"]["nodeName"]] = used.get(other["spec"]["nodeName"], 0) + _gpus(
                    other, self.gpu_resource
                )
        reasons: dict[str, int] = {}
        for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
            why = self._misfit(pod, node, want, used.get(node["metadata"]["name"], 0))
            if not why:
                self._bind(pod, node["metadata"]["name"])
                return
            reasons[why] = reasons.get(why, 0) + 1
        said = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
        message = f"0/{len(nodes)} nodes are available: {said}."
        self._set_condition(pod, "PodScheduled", "False", "Unschedulable", message)

    def _misfit(self, pod: Obj, node: Obj, want: int, used: int) -> str:
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
            return "node(s) didn't match Pod's node affinity/selector"
        if node.get("spec", {}).get("unschedulable"):
            return "node(s) were unschedulable"
        if not _ready(node):
            return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        for taint in node.get("spec", {}).get("taints") or []:
            if taint.get("effect") in _HARD and not tolerates(pod, taint):
                return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        free = int(node["status"].get("allocatable", {}).get(self.gpu_resource, 0)) - used
        return f"Insufficient {self.gpu_resource}" if want > free else ""

    def _bind(self, pod: Obj, node: str) -> None:
        def bind(p: Obj) -> None:
            p["spec"]["nodeName"] = node
            status = p.setdefault("status", {})
            status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}]
            status["startTime"] = now_rfc3339()
            c = _container(p)
            waiting = {"reason": "ContainerCreating"}
            status["containerStatuses"] = [_status(c, {"waiting": waiting})]

        self.store.update("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], bind)

    def _set_condition(self, pod: Obj, kind: str, value: str, reason: str, message: str) -> None:
        conds = (pod.get("status") or {}).get("conditions") or []
        if any(c["type"] == kind and c.get("message") == message for c in conds):
            return

        def put(p: Obj) -> None:
            cond = {"type": kind, "status": value, "reason": reason, "message": message}
            p.setdefault("status", {})["conditions"] = [cond | {"lastTransitionTime": now_rfc3339()}]

        self.store.update("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], put)

    # ---- running ----
    def _start(self, pod: Obj, key: tuple[str, str]) -> None:
        c = _container(pod)
        state = pod["status"]["containerStatuses"][0]["state"]
        if c["image"].startswith("missing/"):
            if state.get("waiting", {}).get("reason") == "ContainerCreating":
                message = f'rpc error: code = NotFound desc = failed to pull and unpack image "{c["image"]}": not found'
                self._write(key, lambda p: _set_state(p, {"waiting": {"reason": "ErrImagePull", "message": message}}))
            elif state.get("waiting", {}).get("reason") == "ErrImagePull":
                message = f'Back-off pulling image "{c["image"]}"'
                waiting = {"reason": "ImagePullBackOff", "message": message}
                self._write(key, lambda p: _set_state(p, {"waiting": waiting}))
            return
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOSTNAME": key[1]}
        env.update({e["name"]: e.get("value", "") for e in c.get("env") or []})
        workdir = c.get("workingDir")
        cwd = workdir if workdir and os.path.isdir(workdir) else str(self.log_dir)
        out = self.log_path(*key).open("wb")
        try:
            proc = subprocess.Popen(
                c.get("command") or ["true"],
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:  # the command is not there: as a runtime says it
            message = f'exec: "{(c.get("command") or ["?"])[0]}": {e.strerror}'
            self._write(key, lambda p: _end(p, 128, "StartError", message))
            return
        finally:
            out.close()
        self.running[key] = Running(proc, time.monotonic())
        started = {"running": {"startedAt": now_rfc3339()}}
        self._write(key, lambda p: (_set_state(p, started), p["status"].update(phase="Running")))

    def _follow(self, pod: Obj, key: tuple[str, str]) -> None:
        run = self.running.get(key)
        if run is None or (pod.get("status") or {}).get("phase") != "Running":
            return
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline is not None and time.monotonic() - run.started > int(deadline) and not run.kill_reason:
            self.kill(*key, "DeadlineExceeded")
        code = run.proc.poll()
        if code is None:
            return
        self.running.pop(key)
        reason = run.kill_reason
        if reason == "DeadlineExceeded":
            message = "Pod was active on the node longer than the specified deadline"
            self._write(key, lambda p: _end(p, 137, "Error", "", (reason, message)))
        elif reason == "Evicted":
            self._write(key, lambda p: _end(p, 137, "Error", "", ("Evicted", run.kill_message)))
        elif reason == "OOMKilled":
            self._write(key, lambda p: _end(p, 137, "OOMKilled"))
        elif code < 0:  # killed by a signal: exit code 128 + signal, as a container runtime reports it
            self._write(key, lambda p: _end(p, 128 - code, "Error"))
        else:
            self._write(key, lambda p: _end(p, code, "Completed" if code == 0 else "Error"))

    def _finish_delete(self, key: tuple[str, str]) -> None:
        run = self.running.get(key)
        if run is not None and run.proc.poll() is None:
            if time.monotonic() - run.kill_at > run.grace_s:  # the grace period is over
                os.killpg(run.proc.pid, signal.SIGKILL)
            return
        self.running.pop(key, None)
        try:
            self.store.delete("pods", *key)
        except ApiError:
            pass

    def _write(self, key: tuple[str, str], change: Callable[[Obj], Any]) -> None:
        self.store.update("pods", key[0], key[1], change)


def _status(container: Obj, state: Obj) -> Obj:
    image_id = "" if "waiting" in state else f"docker.io/library/{container['image']}@sha256:{'0' * 64}"
    ready = "running" in state
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": image_id,
        "ready": ready,
        "restartCount": 0,
        "started": ready,
        "state": state,
    }


def _set_state(pod: Obj, state: Obj) -> None:
    pod["status"]["containerStatuses"] = [_status(_container(pod), state)]


def _end(pod: Obj, code: int, reason: str, message: str = "", pod_reason: tuple[str, str] | None = None) -> None:
    term = {"exitCode": code, "reason": reason, "finishedAt": now_rfc3339()} | ({"message": message} if message else {})
    _set_state(pod, {"terminated": term})
    pod["status"]["phase"] = "Succeeded" if code == 0 and not pod_reason else "Failed"
    if pod_reason:
        pod["status"]["reason"], pod["status"]["message"] = pod_reason
