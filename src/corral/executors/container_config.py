"""What a job's container is created with (pure): image, command, environment, GPUs, limits and the safety
settings every container of a shared cluster gets, whatever its job asks.

Safety: never privileged; its own network (bridge: only a web UI's one port is published), PID and IPC namespaces; Docker's default capabilities less
those a training job does not need (NET_RAW first: no raw sockets to spoof the node's network);
no-new-privileges (setuid binaries in the image gain nothing); host paths only as the agent's mount check
allowed them (the engine socket never among them).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from typing import Any

from docker.types import DeviceRequest, LogConfig, Mount

from corral.core.containers import ContainerSpec, compute_shm_mib, is_under
from corral.executors.base import LaunchSpec, PublishedPort

LABEL_RUN = "io.corral.run"  # the executor's id of the run: <job>.<attempt>[.<rank>]
LABEL_JOB = "io.corral.job"
LABEL_ATTEMPT = "io.corral.attempt"
LABEL_NODE = "io.corral.node"
# Docker's default set is CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP SETPCAP
# NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE; a job keeps the file and process ones and loses these.
DROPPED_CAPABILITIES = ("NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SETPCAP", "SYS_CHROOT")
ENGINE_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock")
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


CONTAINER_STAGE_DIR = "/corral/stage"  # where a container job finds its stage dir (CORRAL_STAGE_DIR)


def compute_container_name(node: str, run_key: str) -> str:
    """Unique per engine (several agents may share one): corral-<node>-<run>."""
    return _NAME_UNSAFE.sub("-", f"corral-{node}-{run_key}")[:200]


def compute_labels(node: str, run_key: str) -> dict[str, str]:
    parts = run_key.split(".")
    return {
        LABEL_RUN: run_key,
        LABEL_JOB: parts[0],
        LABEL_ATTEMPT: parts[1] if len(parts) > 1 else "1",
        LABEL_NODE: node,
    }


def compute_user(container: ContainerSpec, spec: LaunchSpec, own: tuple[int, int]) -> str:
    """Whom the container runs as: the UID[:GID] it asked for, else the job's Unix identity (as a process job
    would), else the agent's own user (single-user mode)."""
    if container.user:
        return container.user
    if spec.identity is not None:
        return f"{spec.identity.uid}:{spec.identity.gid}"
    return f"{own[0]}:{own[1]}"


def compute_env(spec: LaunchSpec, container: ContainerSpec, nvidia: bool) -> dict[str, str]:
    """The job's env and secrets, then Corral's per-job variables (which the job's env cannot override). With the
    NVIDIA runtime the container sees only its GPUs, numbered from 0; on simulated GPUs the node's indices. A web UI
    reads its port inside the container in PORT and CORRAL_JOB_PORT (the image's port when it names one)."""
    env = {**spec.secret_env, **spec.env}
    indices = range(len(spec.gpu_indices)) if nvidia else spec.gpu_indices
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in indices)
    env["NVIDIA_VISIBLE_DEVICES"] = ",".join(spec.gpu_uuids) if spec.gpu_uuids else "void"
    env["CORRAL_JOB_ID"] = spec.job_id
    if spec.web_port is not None and container.port is not None:  # inside, the web UI listens on its own port
        env["CORRAL_JOB_PORT"] = env["PORT"] = str(container.port)
    if spec.stage_dir is not None:
        env["CORRAL_STAGE_DIR"] = CONTAINER_STAGE_DIR
    return env


def compute_published_port(spec: LaunchSpec, container: ContainerSpec) -> tuple[int, int] | None:
    """(port inside, node port) of the job's web UI: the image's port, else the node port itself; None without one."""
    if spec.web_port is None:
        return None
    return (container.port or spec.web_port), spec.web_port


def find_mount_refusal(container: ContainerSpec, allowed: Sequence[str], engine_socket: str) -> str:
    """Why a mount may not be made on this node ("" when all may): its source with links resolved must lie under
    an allowed prefix, exist, and neither be nor hold the engine's socket."""
    sockets = {os.path.realpath(p) for p in (*ENGINE_SOCKETS, engine_socket) if p}
    for m in container.mounts:
        real = os.path.realpath(m.source)
        if not allowed or not is_under(real, allowed):
            return f"refused: mount {m.source} (resolves to {real}) is not under an allowed prefix"
        try:
            st = os.stat(real)
        except OSError as e:
            return f"refused: mount {m.source}: {e.strerror}"
        if stat.S_ISSOCK(st.st_mode) or any(s == real or s.startswith(real.rstrip("/") + "/") for s in sockets):
            return f"refused: mount {m.source} would expose the container engine's socket"
    return ""


def compute_create_kwargs(
    spec: LaunchSpec,
    container: ContainerSpec,
    *,
    node: str,
    user: str,
    nvidia: bool,
    cpu_milli: int,
    memory_mib: int,
    bind_host: str = "",
) -> dict[str, Any]:
    """Arguments of docker-py's containers.create for this run. A job with a web UI gets its node port published
    (on `bind_host`; "": every address of the node, as a process job may listen) to its port inside."""
    kwargs: dict[str, Any] = {
        "image": container.image,
        "command": list(spec.command),
        "name": compute_container_name(node, spec.job_id),
        "labels": compute_labels(node, spec.job_id),
        "environment": compute_env(spec, container, nvidia),
        "user": user,
        "detach": True,
        "stdin_open": False,
        "tty": False,
        # safety: the same for every job, whatever it asked for
        "privileged": False,
        "network_mode": "bridge",
        "ipc_mode": "private",
        "cap_drop": list(DROPPED_CAPABILITIES),
        "security_opt": ["no-new-privileges"],
        "mounts": [
            Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only) for m in container.mounts
        ]
        + (
            [Mount(target=CONTAINER_STAGE_DIR, source=str(spec.stage_dir), type="bind")]
            if spec.stage_dir is not None
            else []
        ),
        "shm_size": f"{compute_shm_mib(container, memory_mib)}m",
        "log_config": LogConfig(type="json-file", config={"max-size": "256m", "max-file": "2"}),
        "hostname": compute_container_name(node, spec.job_id)[:63],
    }
    if spec.workdir:
        kwargs["working_dir"] = spec.workdir
    if cpu_milli:
        kwargs["nano_cpus"] = cpu_milli * 1_000_000
    if memory_mib:
        kwargs["mem_limit"] = kwargs["memswap_limit"] = f"{memory_mib}m"  # no swap beyond the limit
    if (published := compute_published_port(spec, container)) is not None:
        inner, outer = published
        kwargs["ports"] = {f"{inner}/tcp": (bind_host, outer) if bind_host else outer}
    if nvidia and spec.gpu_uuids:
        kwargs["device_requests"] = [
            DeviceRequest(driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])
        ]
    return kwargs


def compute_published(attrs: dict[str, Any], run_key: str) -> PublishedPort | None:
    """The web port a container publishes, from the engine's inspect of it (Docker's and Podman's shape): only for
    the container of run `run_key` while it runs, and only when it publishes exactly one node port (Corral publishes
    nothing else); None otherwise."""
    state = attrs.get("State") or {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    if labels.get(LABEL_RUN) != run_key or not state.get("Running") or state.get("Paused"):
        return None
    network = attrs.get("NetworkSettings") or {}
    pairs = {
        (int(inner.split("/")[0]), int(b["HostPort"]))
        for inner, bindings in (network.get("Ports") or {}).items()
        if inner.endswith("/tcp")
        for b in bindings or ()
        if str(b.get("HostPort", "")).isdigit()
    }
    if len(pairs) != 1:
        return None
    (inner, outer), ips = next(iter(pairs)), {network.get("IPAddress") or ""}
    for net in (network.get("Networks") or {}).values():
        ips |= {(net or {}).get("IPAddress") or "", (net or {}).get("GlobalIPv6Address") or ""}
    pid = state.get("Pid")
    return PublishedPort(
        host_port=outer,
        container_port=inner,
        container_id=str(attrs.get("Id", "")),
        container_ips=tuple(sorted(ip for ip in ips if ip)),
        pid=pid if isinstance(pid, int) and pid > 0 else 0,
    )
