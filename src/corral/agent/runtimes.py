"""Which runtimes this node has: processes always; containers when a Docker Engine (or Podman's Docker-compatible
socket) answers at CORRAL_DOCKER_HOST. Found once at start: an engine that comes later needs an agent restart."""

from __future__ import annotations

import logging
from pathlib import Path

import docker
from docker.errors import DockerException
from requests.exceptions import RequestException

from corral.core.containers import parse_allowed_mounts
from corral.executors.container import ContainerExecutor
from corral.executors.image_cache import ImageCache, parse_cache_gb

log = logging.getLogger("corral.agent")
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
ENGINE_TIMEOUT_S = 60  # one API call's limit (a pull of a large image streams, and each read resets it)


def connect_engine(docker_host: str) -> docker.DockerClient | None:
    """A client of the engine at `docker_host` when it answers a ping, else None ("" or "none": not looked for)."""
    if docker_host.strip().lower() in ("", "none"):
        return None
    try:
        client = docker.DockerClient(base_url=docker_host, timeout=ENGINE_TIMEOUT_S, max_pool_size=64)
        client.ping()
        return client
    except (DockerException, RequestException) as e:
        log.info("no container engine at %s (%s): jobs with an image are not placed on this node", docker_host, e)
        return None


def load_container_executor(
    docker_host: str, state_dir: Path, node: str, allowed_mounts: str, nvidia: bool, image_cache_gb: str = ""
) -> ContainerExecutor | None:
    """The node's container executor, or None when no engine answers (the node then runs processes only).
    Its image cache keeps what it pulled within `image_cache_gb` (CORRAL_IMAGE_CACHE_GB)."""
    client = connect_engine(docker_host)
    if client is None:
        return None
    socket = docker_host.removeprefix("unix://") if docker_host.startswith("unix://") else ""
    executor = ContainerExecutor(
        client,
        state_dir,
        node,
        allowed_mounts=parse_allowed_mounts(allowed_mounts),
        nvidia=nvidia,
        engine_socket=socket,
        image_cache=ImageCache(client, state_dir.parent / "images", parse_cache_gb(image_cache_gb)),
    )
    version = client.version().get("Version", "?")
    log.info(
        "container engine %s at %s: this node runs jobs with an image (GPUs %s)",
        version,
        docker_host,
        "by NVIDIA device request" if nvidia else "by environment only",
    )
    return executor
