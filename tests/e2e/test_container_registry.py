"""Private images end to end: a real `corral up` whose agent reaches the real Docker Engine, the private registry of
`make docker-deps` (password auth), two tenants and the real CLI.

A tenant stores its registry login (`corral secrets create NAME --registry HOST --username U --password-stdin`) and
its job pulls the private image with it; another tenant's job cannot have that image: not from the registry without
a login, not from the node's cached copy, not with a wrong login, and it cannot name the first tenant's secret. A
failed pull ends the job FAILED with the image and the registry's answer, and its GPUs are free at once. The node's
image cache keeps to CORRAL_IMAGE_CACHE_GB, removing the least recently used image, never one a job runs."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from container_engine import (
    DOCKER_HOST,
    PRIVATE_IMAGES,
    REGISTRY_PASSWORD,
    REGISTRY_USER,
    TEST_IMAGE,
    engine_node,
    remove_images,
    remove_node_containers,
    require_engine,
    require_registry,
)

from .conftest import CORRAL, Corral, wait_for

# One test at a time on the container engine (its images, containers and node names are the machine's): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.xdist_group("container-engine")]
NODE = engine_node("e2e-registry")
ONE, TWO = PRIVATE_IMAGES


def _user(c: Corral, name: str, tenant: str) -> dict[str, str]:
    assert c.cli("users", "create", name, "--tenant", tenant).returncode == 0
    token = c.cli("tokens", "create", "--user", name).stdout.strip()
    return dict(c.env, CORRAL_URL=c.url, CORRAL_TOKEN=token)


def _registry_secret(c: Corral, env: dict[str, str], name: str, registry: str, password: str) -> None:
    r = subprocess.run(
        [CORRAL, "secrets", "create", name, "--registry", registry, "--username", REGISTRY_USER, "--password-stdin"],
        input=password + "\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


def _submit(c: Corral, env: dict[str, str], *args: str) -> int:
    r = c.cli("submit", *args, env=env)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def _ended(c: Corral, job: int) -> dict[str, Any]:
    wait_for(lambda: c.job(job)["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), 90, f"job {job} ended")
    return c.job(job)


def _free_gpus(c: Corral) -> int:
    return int(next(n["gpus_free"] for n in c.cli_json("nodes") if n["name"] == NODE))


def test_private_images_with_tenant_registry_secrets(corral_factory: Any) -> None:
    engine = require_engine()
    registry = require_registry()
    remove_node_containers(engine, NODE)
    remove_images(engine, *PRIVATE_IMAGES)
    c: Corral = corral_factory(gpus="sim:2xH100-80GB", node=NODE)
    c.env["CORRAL_DOCKER_HOST"] = DOCKER_HOST
    c.env["CORRAL_IMAGE_CACHE_GB"] = "0.001"  # 1 MB: less than one test image, so every pull evicts what it may
    c.start()
    try:
        _run(c, engine, registry)
    finally:
        remove_node_containers(engine, NODE)
        remove_images(engine, *PRIVATE_IMAGES)


def _run(c: Corral, engine: Any, registry: str) -> None:
    for tenant in ("vision", "nlp"):
        assert c.cli("tenants", "create", tenant).returncode == 0
    ann, bob = _user(c, "ann", "vision"), _user(c, "bob", "nlp")
    _registry_secret(c, ann, "team-login", registry, REGISTRY_PASSWORD)
    _registry_secret(c, bob, "my-login", registry, "not-the-password")
    listed = c.cli_json_as(ann, "secrets")
    assert [(s["name"], s["kind"], s["host"], s["username"]) for s in listed] == [
        ("team-login", "registry", registry, REGISTRY_USER)
    ]
    assert REGISTRY_PASSWORD not in c.cli("secrets", "--json", env=ann).stdout  # never shown back

    # The tenant's job pulls the private image with its secret; the container sees its GPU.
    first = _submit(
        c, ann, "--image", ONE, "--registry-secret", "team-login", "--gpus", "1", "--", "sh", "-c",
        "echo CUDA=$CUDA_VISIBLE_DEVICES",
    )  # fmt: skip
    done = _ended(c, first)
    assert (done["state"], done["exit_code"], done["registry_secret"]) == ("SUCCEEDED", 0, "team-login"), done
    assert done["image_digest"].startswith(f"{registry}/team/busybox@sha256:")
    assert f"CUDA={done['gpus'][0]}" in c.cli("logs", str(first), env=ann).stdout
    assert "RUNNING" not in c.cli("show", str(first), env=ann).stdout  # no phase is left on an ended job

    # Another tenant cannot have it: not without a login, although the node has the image cached...
    stolen = _submit(c, bob, "--image", ONE, "--gpus", "2", "--", "sh", "-c", "echo got it")
    failed = _ended(c, stolen)
    assert failed["state"] == "FAILED", failed
    assert f"cannot pull image {ONE} from {registry} without a login" in failed["reason"]
    assert (
        "no basic auth credentials" in failed["reason"] or "authentication required" in failed["reason"]
    )  # the registry's own answer
    assert "got it" not in c.cli("logs", str(stolen), env=bob).stdout
    assert _free_gpus(c) == 2  # its GPUs were freed at once
    # ...not with a wrong login of its own...
    wrong = _ended(c, _submit(c, bob, "--image", ONE, "--registry-secret", "my-login", "--", "true"))
    assert wrong["state"] == "FAILED" and f"as {REGISTRY_USER}" in wrong["reason"]
    assert "unauthorized" in wrong["reason"], wrong["reason"]
    # ...and not with the other tenant's secret, which for it does not exist (refused at submit, naming the flag).
    r = c.cli("submit", "--image", ONE, "--registry-secret", "team-login", "--", "true", env=bob)
    assert r.returncode != 0 and "--registry-secret" in r.stderr and "no secret 'team-login'" in r.stderr
    # A login for another registry is refused at submit too.
    r = c.cli(
        "submit", "--image", "docker.io/library/busybox:1", "--registry-secret", "team-login", "--", "true", env=ann
    )
    assert r.returncode != 0 and f"logs in to {registry}" in r.stderr, r.stderr
    # The flag needs an image.
    r = c.cli("submit", "--registry-secret", "team-login", "--", "true", env=ann)
    assert r.returncode != 0 and "--registry-secret" in r.stderr

    # The image cache (1 MB) keeps an image a running job uses, and evicts the least recently used one otherwise.
    holder = _submit(c, ann, "--image", ONE, "--registry-secret", "team-login", "--", "sleep", "600")
    wait_for(lambda: c.job(holder)["state"] == "RUNNING" and c.job(holder)["image_digest"], 60, "holder running")
    second = _ended(c, _submit(c, ann, "--image", TWO, "--registry-secret", "team-login", "--", "true"))
    assert second["state"] == "SUCCEEDED", second
    tags = lambda: {t for i in engine.api.images() for t in i.get("RepoTags") or ()}  # noqa: E731 (one call: no race)
    assert ONE in tags()  # over the limit, but a running container uses it
    assert c.cli("cancel", str(holder), env=ann).returncode == 0
    wait_for(lambda: c.job(holder)["state"] == "CANCELLED", 60, "holder cancelled")
    third = _ended(c, _submit(c, ann, "--image", TWO, "--registry-secret", "team-login", "--", "true"))
    assert third["state"] == "SUCCEEDED", third
    wait_for(lambda: ONE not in tags(), 30, f"{ONE} evicted (least recently used, no longer in use)")
    assert TWO in tags()
    # The node reports the images it keeps for placement (to admins), never a private one: where a tenant's job lands
    # must not tell it where another tenant's private image is. A public image it ran is reported.
    public = _ended(c, _submit(c, ann, "--image", TEST_IMAGE, "--", "true"))
    assert public["state"] == "SUCCEEDED", public
    wait_for(lambda: next(n for n in c.cli_json("nodes") if n["name"] == NODE)["images"] == [TEST_IMAGE], 30, "images")
    assert all(n.get("images") is None for n in c.cli_json_as(bob, "nodes"))

    # Another tenant naming the private image by its digest (shown on ann's job) gets no further than by its tag.
    by_digest = _ended(c, _submit(c, bob, "--image", third["image_digest"], "--", "true"))
    assert by_digest["state"] == "FAILED" and (
        "no basic auth credentials" in by_digest["reason"] or "authentication required" in by_digest["reason"]
    ), by_digest
    r = c.cli("submit", "--image", third["image_digest"].rpartition("@")[2], "--", "true", env=bob)
    assert r.returncode != 0 and "looks like an image id" in r.stderr  # an id names whatever a node holds
