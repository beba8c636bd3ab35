"""The real Docker Engine the container tests use (`make docker-deps` installs and starts it), or a loud skip
(a failure under CI=true) naming how to get it."""

from __future__ import annotations

import os
import uuid
from typing import Any

import docker
import httpx
from docker.errors import DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from realparts import missing_real_part

TEST_IMAGE = "corral-test/busybox:1"
DOCKER_HOST = os.environ.get("CORRAL_DOCKER_HOST", "unix:///var/run/docker.sock")
HOW = "run `make docker-deps` (as root or with sudo: Debian's docker.io, dockerd, the local test image)"
# The private registry `make docker-deps` runs (tests/docker_deps.sh): password auth, two images only a login pulls.
REGISTRY = f"127.0.0.1:{os.environ.get('CORRAL_TEST_REGISTRY_PORT', '5055')}"
REGISTRY_USER, REGISTRY_PASSWORD = "alice", "s3cret"
PRIVATE_IMAGES = (f"{REGISTRY}/team/busybox:1", f"{REGISTRY}/team/busybox:2")
# The container tests name and label their containers by node (corral-NODE-RUN, io.corral.node=NODE) and remove
# their node's containers before and after: a node name of this process's own keeps another run on the same engine
# at the same time (another developer's, or a second checkout's) from removing them mid-test. Within one run the
# tests that use the engine share the "container-engine" xdist group (docs/testing.md).
RUN_ID = uuid.uuid4().hex[:8]


def engine_node(name: str) -> str:
    """`name` made unique to this test process (a valid node name: at most 63 characters)."""
    return f"{name}-{RUN_ID}"


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


def require_registry() -> str:
    """The test registry's address, once it answers and asks for a login."""
    try:
        status = httpx.get(f"http://{REGISTRY}/v2/", timeout=5).status_code
    except httpx.HTTPError as e:
        missing_real_part(f"the private test registry at {REGISTRY} ({e})", HOW)
    if status != 401:
        missing_real_part(f"a password-protected registry at {REGISTRY} (it answered {status})", HOW)
    return REGISTRY


def remove_images(client: docker.DockerClient, *images: str) -> None:
    """Take images off the engine (a pull then fetches them again); absent ones are fine."""
    for image in images:
        try:
            client.images.remove(image, force=True)
        except NotFound:  # Podman: a plain 404
            pass


def list_labelled(client: docker.DockerClient, *labels: str) -> list[Any]:
    """The engine's containers (running or not) with all these labels. docker-py lists ids and then inspects each:
    one removed in between (the agent cleaning up) is a 404, so the listing is taken again."""
    for _ in range(20):
        try:
            return list(client.containers.list(all=True, filters={"label": list(labels)}))
        except NotFound:
            continue
    raise AssertionError(f"containers labelled {labels} kept vanishing while being listed")


def remove_node_containers(client: docker.DockerClient, node: str) -> None:
    for c in list_labelled(client, f"io.corral.node={node}"):
        try:
            c.remove(force=True)
        except NotFound:  # removed meanwhile
            pass
