"""The real Docker Engine the container tests use (`make docker-deps` installs and starts it), or a loud skip
(a failure under CI=true) naming how to get it."""

from __future__ import annotations

import os

import docker
from docker.errors import DockerException, ImageNotFound
from requests.exceptions import RequestException

from realparts import missing_real_part

TEST_IMAGE = "corral-test/busybox:1"
DOCKER_HOST = os.environ.get("CORRAL_DOCKER_HOST", "unix:///var/run/docker.sock")
HOW = "run `make docker-deps` (as root or with sudo: Debian's docker.io, dockerd, the local test image)"


def require_engine() -> docker.DockerClient:
    """A client of the engine with the test image present."""
    try:
        client = docker.DockerClient(base_url=DOCKER_HOST, timeout=60)
        client.ping()
    except (DockerException, RequestException) as e:
        missing_real_part(f"a Docker Engine at {DOCKER_HOST} ({e})", HOW)
    try:
        client.images.get(TEST_IMAGE)
    except ImageNotFound:
        missing_real_part(f"the local test image {TEST_IMAGE}", HOW)
    return client


def remove_node_containers(client: docker.DockerClient, node: str) -> None:
    for c in client.containers.list(all=True, filters={"label": f"io.corral.node={node}"}):
        c.remove(force=True)
