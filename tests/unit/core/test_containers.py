"""core.containers: image, user, mount and size parsing, and the admin's mount policy, as tables of named cases."""

from __future__ import annotations

import pytest

from corral.core.containers import (
    ContainerSpec,
    Mount,
    check_image,
    check_mounts_allowed,
    check_user,
    compute_shm_mib,
    container_from_dict,
    container_to_dict,
    parse_allowed_mounts,
    parse_mount,
    parse_size_mib,
)
from corral.core.errors import ValidationError


@pytest.mark.parametrize(
    "image", ["busybox", "corral-test/busybox:1", "127.0.0.1:5055/team/busybox:1", "nvcr.io/nvidia/pytorch:24.05-py3"]
)
def test_image_references_accepted(image: str) -> None:
    assert check_image(image) == image


@pytest.mark.parametrize("image", ["", "Busybox", "busybox:", "a b", "--privileged", "x" * 300, "busybox;rm"])
def test_image_references_refused(image: str) -> None:
    with pytest.raises(ValidationError) as e:
        check_image(image)
    assert e.value.field == "image"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/data/a:/data", Mount("/data/a", "/data")),
        ("/data/a/:/in:ro", Mount("/data/a", "/in", True)),
        ("/data//a:/in:rw", Mount("/data/a", "/in", False)),
    ],
)
def test_mounts_parsed(text: str, expected: Mount) -> None:
    assert parse_mount(text) == expected


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("relative source", "data:/data"),
        ("relative target", "/data:data"),
        ("dot-dot escapes", "/data/../etc:/etc"),
        ("over the root", "/data:/"),
        ("over /proc", "/data:/proc/1"),
        ("over /dev", "/data:/dev"),
        ("unknown option", "/data:/d:rshared"),
        ("no target", "/data"),
        ("comma smuggles options", "/data,readonly=false:/d"),
    ],
)
def test_mounts_refused(name: str, text: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_mount(text)
    assert e.value.field == "mounts", name


@pytest.mark.parametrize(
    ("name", "source", "prefixes", "allowed"),
    [
        ("none allowed by default", "/data/a", (), False),
        ("under a prefix", "/data/a", ("/data",), True),
        ("the prefix itself", "/data", ("/data",), True),
        ("a sibling with the prefix's name as its start", "/database", ("/data",), False),
        ("outside", "/etc", ("/data", "/scratch"), False),
        ("under the second prefix", "/scratch/x/y", ("/data", "/scratch"), True),
    ],
)
def test_mount_policy(name: str, source: str, prefixes: tuple[str, ...], allowed: bool) -> None:
    mounts = [Mount(source, "/in")]
    if allowed:
        check_mounts_allowed(mounts, prefixes)
        return
    with pytest.raises(ValidationError) as e:
        check_mounts_allowed(mounts, prefixes)
    assert e.value.field == "mounts" and source in e.value.problem, name


def test_allowed_mounts_setting() -> None:
    assert parse_allowed_mounts("") == ()
    assert parse_allowed_mounts(" /data/, /scratch ") == ("/data", "/scratch")
    with pytest.raises(ValidationError):
        parse_allowed_mounts("data")


@pytest.mark.parametrize(("text", "mib"), [("512m", 512), ("2g", 2048), ("1GiB", 1024), ("1048576", 1), ("100k", 1)])
def test_sizes(text: str, mib: int) -> None:
    assert parse_size_mib(text) == mib


@pytest.mark.parametrize("text", ["", "lots", "1x", "-1g"])
def test_sizes_refused(text: str) -> None:
    with pytest.raises(ValidationError):
        parse_size_mib(text)


@pytest.mark.parametrize(
    ("user", "ok"), [("1000", True), ("1000:100", True), ("0", False), ("1000:0", False), ("bob", False)]
)
def test_container_user(user: str, ok: bool) -> None:
    if ok:
        assert check_user(user) == user
    else:
        with pytest.raises(ValidationError):
            check_user(user)


def test_shm_default_is_a_gib_or_a_quarter_of_the_memory() -> None:
    spec = ContainerSpec("busybox")
    assert compute_shm_mib(spec, 0) == 1024
    assert compute_shm_mib(spec, 64 * 1024) == 1024
    assert compute_shm_mib(spec, 2048) == 512
    assert compute_shm_mib(ContainerSpec("busybox", shm_size_mib=8192), 2048) == 8192


def test_stored_shape_round_trips() -> None:
    spec = ContainerSpec("reg:5000/a/b:1", (Mount("/data", "/in", True),), 2048, "1000:1000")
    assert container_from_dict(container_to_dict(spec)) == spec
    assert container_from_dict(None) is None
