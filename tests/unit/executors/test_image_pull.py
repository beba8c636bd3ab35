"""A pull's progress as the job shows it ("pulling 43%"), from the engine's stream as Docker sends it, and the
reason a failed pull gives (the image, its registry, whose login, the registry's answer; never a password)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.core.containers import registry_host, same_registry
from corral.executors.base import RegistryLogin
from corral.executors.image_pull import PullProgress, describe_failure


def _feed(progress: PullProgress, *items: dict[str, Any]) -> str:
    for item in items:
        progress.feed(item)
    return progress.phase


def test_progress_is_bytes_downloaded_over_bytes_to_download_across_layers() -> None:
    p = PullProgress()
    assert _feed(p, {"status": "Pulling from team/trainer", "id": "3"}) == "pulling"  # the tag is no layer
    assert _feed(p, {"status": "Pulling fs layer", "id": "a1"}, {"status": "Waiting", "id": "b2"}) == "pulling"
    down = {"status": "Downloading", "id": "a1", "progressDetail": {"current": 30, "total": 100}}
    assert _feed(p, down) == "pulling 30%"  # of the sizes known (never 100% while one is not)
    both = {"status": "Downloading", "id": "b2", "progressDetail": {"current": 50, "total": 300}}
    assert _feed(p, both) == "pulling 20%"  # (30 + 50) / 400
    assert _feed(p, {"status": "Download complete", "id": "a1"}) == "pulling 37%"  # (100 + 50) / 400
    assert _feed(p, {"status": "Pull complete", "id": "b2"}, {"status": "Pull complete", "id": "a1"}) == "pulling 100%"
    assert _feed(p, {"status": "Digest: sha256:" + "ab" * 32}, {"status": "Status: Downloaded newer image"}) == (
        "pulling 100%"
    )


def test_layers_the_node_has_already_count_as_done() -> None:
    p = PullProgress()
    _feed(p, {"status": "Already exists", "id": "base"})
    down = {"status": "Downloading", "id": "top", "progressDetail": {"current": 10, "total": 40}}
    assert _feed(p, down) == "pulling 25%"  # the layer it has adds no bytes to fetch


@pytest.mark.parametrize(
    ("image", "host"),
    [
        ("python:3.12", "docker.io"),
        ("pytorch/pytorch:2.4", "docker.io"),
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io"),
        ("127.0.0.1:5055/team/busybox:1", "127.0.0.1:5055"),
        ("localhost/team/x", "localhost"),
        ("Registry.Example.com/a/b@sha256:" + "cd" * 32, "registry.example.com"),
    ],
)
def test_the_registry_of_an_image_is_read_as_docker_reads_it(image: str, host: str) -> None:
    assert registry_host(image) == host


def test_a_login_serves_images_of_its_own_registry_only() -> None:
    assert same_registry("https://index.docker.io/", "python:3")  # Docker Hub answers to several names
    assert same_registry("127.0.0.1:5055", "127.0.0.1:5055/team/busybox:1")
    assert not same_registry("127.0.0.1:5055", "127.0.0.1:5056/team/busybox:1")
    assert not same_registry("evil.example.com", "nvcr.io/nvidia/pytorch:24.05-py3")


def test_a_failed_pull_says_which_image_where_as_whom_and_what_the_registry_said() -> None:
    login = RegistryLogin("reg.example.com", "ann", "hunter2")
    reason = describe_failure("reg.example.com/team/x:1", "unauthorized: authentication required\n", login)
    assert reason == (
        "cannot pull image reg.example.com/team/x:1 from reg.example.com as ann: unauthorized: authentication required"
    )
    assert "hunter2" not in reason and "hunter2" not in repr(login)
    anonymous = describe_failure("team/x:1", "pull access denied", None)
    assert (
        anonymous
        == "cannot pull image team/x:1 from docker.io without a login (no --registry-secret): pull access denied"
    )
