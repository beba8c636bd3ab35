"""A hostile tenant against private images (issue 16): tenant `nlp` (mallory) tries to use, read or learn about
tenant `vision`'s (alice's) registry login, private images and jobs, and to harm the server or a node.

Each test asserts the SAFE behaviour. Those that pass confirm a defence; those that fail are holes found by the
review (each names the hole in its docstring, with the fix proposed in the review's report):

- an image reference whose first component has an uppercase letter (`EVIL/x`) is a registry host to Docker but
  Docker Hub to `registry_host`, so a Docker Hub login is accepted for it and sent to that other host;
- a private image cached on a node runs for a job without a login when the job names it another way than the one
  it was pulled by (its digest `repo@sha256:...`, its image id `sha256:...`, a short id prefix of 2-3 hex
  characters, guessable): the cache marks privacy per reference string, the engine resolves all of them to the same
  image; the job's `image_digest` then names the other tenant's private repository;
- image-aware placement tells a tenant which node caches an image it names, another tenant's private one too;
- a registry host or username may hold control characters (stored and shown back);
- a registry login can be read back as a plain `secret_env` variable by any member of the tenant;
- a registry's answer holding a NUL byte, carried into the job's reason by the agent, breaks the node's sync on
  PostgreSQL (every sync re-sends the unacknowledged exit).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.api.schemas import AgentSync, Assignment, ExitReport, RunRef
from corral.core.containers import check_image, registry_host, same_registry
from corral.core.resources import GpuInfo, NodeInfo
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.agents import apply_reports, compute_assignments
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

PASSWORD = "rEg-Pa55-Zq7-3141592653"  # distinctive: any leak of it is found by a plain search
MALLORY_PASSWORD = "mallory-own-pa55-2718281828"
REGISTRY = "registry.example.com:5000"
PRIVATE = f"{REGISTRY}/vision/trainer:3"


class Api:
    def __init__(self, client: TestClient, admin_token: str) -> None:
        self.client = client
        self.admin = {"Authorization": f"Bearer {admin_token}"}

    @property
    def store(self) -> SqlStore:
        store: SqlStore = self.client.app.state.ctx.store  # type: ignore[attr-defined]
        return store

    def call(self, method: str, path: str, auth: dict[str, str] | None = None, **kw: Any) -> Any:
        return self.client.request(method, f"/api/v1{path}", headers=auth if auth is not None else self.admin, **kw)

    def user(self, name: str, role: str, tenant: str) -> dict[str, str]:
        r = self.call(
            "POST", "/users", json={"name": name, "role": role, "tenant": tenant, "password": "correct horse"}
        )
        assert r.status_code == 201, r.text
        r = self.call("POST", "/login", auth={}, json={"username": name, "password": "correct horse"})
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def login_secret(self, auth: dict[str, str], name: str, value: str, host: str = REGISTRY) -> None:
        body = {"name": name, "value": value, "kind": "registry", "host": host, "username": "ann"}
        r = self.call("POST", "/secrets", auth=auth, json=body)
        assert r.status_code == 201, r.text

    def submit(self, auth: dict[str, str], **body: Any) -> Any:
        return self.call("POST", "/jobs", auth=auth, json={"command": ["sh", "-c", "true"], **body})

    def hand_over(self, job_id: int) -> Assignment | None:
        """What the agent of node `boxy` receives for this job, or None when the job is not handed out."""
        now = datetime.now(UTC)
        self.store.touch_node("boxy", now)  # a heartbeat: never LOST however slow the test runs
        self.store.assign_job(job_id, "boxy", [], now)  # or the scheduler thread did already
        node = self.store.get_node("boxy")
        assert node is not None
        assignments, _ = compute_assignments(self.store, node, set(), keyring=self.client.app.state.ctx.keyring)  # type: ignore[attr-defined]
        return next((a for a in assignments if a.job_id == job_id), None)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    store = open_store(database_url)
    creds = ensure_credentials(store, tmp_path)
    gpu = GpuInfo(index=0, uuid="GPU-0", model="H100-80GB", memory_mib=81920)
    store.upsert_node(
        "boxy", "boxy", "simulated", 8000, 65536, {}, [gpu], datetime.now(UTC), runtimes=("process", "docker")
    )
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=database_url), store)) as client:
        a = Api(client, creds.admin_token)
        for name in ("vision", "nlp"):
            assert a.call("POST", "/tenants", json={"name": name}).status_code == 201
        yield a


def _refused(r: Any, *fields: str) -> None:
    assert r.status_code in (400, 404, 422), r.text
    assert any(f in r.text for f in fields), r.text


# ----- another tenant's login: never usable, whatever the path -----


def test_another_tenants_registry_secret_is_unusable_by_every_submit_path(api: Api) -> None:
    """Safe: by name, with ?tenant=, in a batch, as an array, in a schedule (created, patched, run now)."""
    alice = api.user("alice", "member", "vision")
    mallory = api.user("mallory", "member", "nlp")
    api.login_secret(alice, "team-login", PASSWORD)
    job = {"command": ["sh", "-c", "true"], "image": PRIVATE, "registry_secret": "team-login"}
    _refused(api.call("POST", "/jobs", auth=mallory, json=job), "registry_secret")
    r = api.call("POST", "/jobs?tenant=vision", auth=mallory, json=job)
    assert r.status_code != 201, r.text  # a tenant query parameter never moves a submission to another tenant
    _refused(api.call("POST", "/jobs/batch", auth=mallory, json={"jobs": [job, job]}), "registry_secret")
    _refused(api.call("POST", "/jobs", auth=mallory, json={**job, "array": "0-3"}), "registry_secret")
    _refused(
        api.call("POST", "/schedules", auth=mallory, json={"schedule": "@daily", "job": job}), "job.registry_secret"
    )
    own = api.call("POST", "/schedules", auth=mallory, json={"schedule": "@daily", "job": {**job, "image": "x:1"}})
    assert own.status_code in (400, 422), own.text  # ("x:1" with the login: refused too, the login is not hers)
    plain = {"command": ["true"], "image": "busybox:1"}
    own = api.call("POST", "/schedules", auth=mallory, json={"schedule": "@daily", "paused": True, "job": plain})
    assert own.status_code == 201, own.text
    patched = api.call("PATCH", f"/schedules/{own.json()['id']}", auth=mallory, json={"job": job})
    _refused(patched, "job.registry_secret")
    assert api.call("GET", "/secrets?tenant=vision", auth=mallory).status_code == 404


def test_a_name_recreated_in_another_tenant_never_reaches_a_pending_job(api: Api) -> None:
    """Safe: alice's pending job whose login she deleted does not pick up mallory's login of the same name, nor
    does mallory's job ever get alice's."""
    alice = api.user("alice", "member", "vision")
    mallory = api.user("mallory", "member", "nlp")
    api.login_secret(alice, "team-login", PASSWORD)
    victim = api.submit(alice, image=PRIVATE, registry_secret="team-login")
    assert victim.status_code == 201, victim.text
    assert api.call("DELETE", "/secrets/team-login", auth=alice).status_code == 204
    api.login_secret(mallory, "team-login", MALLORY_PASSWORD)
    assert api.hand_over(victim.json()["id"]) is None
    failed = api.call("GET", f"/jobs/{victim.json()['id']}", auth=alice).json()
    assert failed["state"] == "FAILED" and "team-login" in failed["reason"]
    api.login_secret(alice, "team-login", PASSWORD)  # alice's again: mallory's job still gets only her own
    mine = api.submit(mallory, image=PRIVATE, registry_secret="team-login")
    assert mine.status_code == 201, mine.text
    a = api.hand_over(mine.json()["id"])
    assert a is not None and a.registry_auth is not None and a.registry_auth.password == MALLORY_PASSWORD


def test_the_password_is_in_no_response_and_no_repr(api: Api) -> None:
    """Safe: the secret, the job, the job list, the job's events, the audit trail and the hand-over's repr."""
    alice = api.user("alice", "member", "vision")
    api.login_secret(alice, "team-login", PASSWORD)
    job = api.submit(alice, image=PRIVATE, registry_secret="team-login")
    assert job.status_code == 201, job.text
    a = api.hand_over(job.json()["id"])
    assert a is not None and a.registry_auth is not None and a.registry_auth.password == PASSWORD
    assert PASSWORD not in repr(a) and PASSWORD not in str(a) and PASSWORD not in repr(a.registry_auth)
    for path in (
        "/secrets",
        "/secrets/team-login",
        f"/jobs/{job.json()['id']}",
        "/jobs?all=true",
        f"/jobs/{job.json()['id']}/events",
        "/audit",
    ):
        for who in (alice, api.admin):
            r = api.call("GET", path, auth=who)
            assert PASSWORD not in r.text, (path, r.status_code)


def test_another_tenants_container_job_is_invisible(api: Api) -> None:
    """Safe: mallory sees neither alice's job (image, digest, login name, phase) nor its events, nor the metrics."""
    alice = api.user("alice", "member", "vision")
    mallory = api.user("mallory", "member", "nlp")
    api.login_secret(alice, "team-login", PASSWORD)
    job = api.submit(alice, image=PRIVATE, registry_secret="team-login")
    assert job.status_code == 201, job.text
    a = api.hand_over(job.json()["id"])
    assert a is not None
    run = RunRef(job_id=a.job_id, attempt=a.attempt)
    digest = f"{REGISTRY}/vision/trainer@sha256:" + "ab" * 32
    apply_reports(api.store, "boxy", AgentSync(phases={run.key: "pulling 43%"}, image_digests={run.key: digest}))
    for path in (f"/jobs/{a.job_id}", f"/jobs/{a.job_id}/events", f"/jobs/{a.job_id}/logs"):
        assert api.call("GET", path, auth=mallory).status_code == 404, path
    for path in ("/jobs?all=true", "/jobs?all=true&tenant=vision", "/jobs?all=true&node=boxy", "/schedules"):
        r = api.call("GET", path, auth=mallory)
        assert "vision/trainer" not in r.text and "team-login" not in r.text, (path, r.text)
    metrics = api.client.get("/metrics", headers=mallory)
    assert "vision/trainer" not in metrics.text and "team-login" not in metrics.text


def test_members_never_see_which_images_a_node_keeps(api: Api) -> None:
    """Safe: node images are for admins only (a tenant admin of one tenant is no cluster admin)."""
    apply_reports(api.store, "boxy", AgentSync(images=[PRIVATE]))
    for who in (api.user("mallory", "member", "nlp"), api.user("trent", "tenant-admin", "nlp")):
        for path in ("/nodes", "/nodes/boxy"):
            r = api.call("GET", path, auth=who)
            assert r.status_code == 200 and "vision/trainer" not in r.text, (path, r.text)
    assert api.call("GET", "/nodes/boxy").json()["images"] == [PRIVATE]


# ----- the login's host: the registry Docker will send it to -----


@pytest.mark.parametrize("image", ["EVIL/team/x:1", "Evil/x", "Localhost/x:1", "MyRegistry/team/trainer:3"])
def test_a_docker_hub_login_is_refused_for_an_image_docker_pulls_from_another_host(api: Api, image: str) -> None:
    """HOLE: Docker (distribution/reference splitDockerDomain) reads a first component with an uppercase letter as
    a registry host, so `EVIL/team/x:1` is pulled from the host `EVIL` (resolved through the node's DNS search
    domains); `registry_host` says docker.io, so the tenant's Docker Hub login is accepted at submit and sent by the
    engine to `EVIL`."""
    alice = api.user("alice", "member", "vision")
    api.login_secret(alice, "hub", PASSWORD, host="docker.io")
    assert check_image(image) == image  # the schema takes it
    r = api.submit(alice, image=image, registry_secret="hub")
    assert r.status_code != 201, f"{image}: a Docker Hub login accepted for an image Docker pulls from another host"
    _refused(r, "registry_secret", "image")
    assert not same_registry("docker.io", image)
    assert registry_host(image) == image.split("/")[0].lower()  # as Docker reads it: a host


def test_the_login_goes_only_to_its_own_host(api: Api) -> None:
    """Safe: port, scheme, case, Hub aliases and look-alike hosts are matched as Docker would."""
    alice = api.user("alice", "member", "vision")
    api.login_secret(alice, "evil443", PASSWORD, host="evil.example.com:443")
    api.login_secret(alice, "reg", PASSWORD, host="https://Registry.Example.com:5000/")
    for image, secret in (
        ("evil.example.com/x:1", "evil443"),  # no port is not :443 to Corral (refused, the safe side)
        ("registry.example.com:5000.evil.com/x:1", "reg"),
        ("registry.example.com/x:1", "reg"),
        ("registry.example.com:5001/x:1", "reg"),
        ("localhost:5000/x:1", "reg"),
    ):
        _refused(api.submit(alice, image=image, registry_secret=secret), "registry_secret", "image")
    assert api.submit(alice, image="registry.example.com:5000/x:1", registry_secret="reg").status_code == 201
    assert api.submit(alice, image="REGISTRY.example.com:5000/x:1", registry_secret="reg").status_code == 201


def test_a_registry_login_is_not_readable_as_a_plain_secret_variable(api: Api) -> None:
    """HOLE (low; within a tenant): a registry login is `never shown back`, but any member may name it in
    `secret_env` and read its password in the job's environment (and so its log)."""
    alice = api.user("alice", "member", "vision")
    bob = api.user("bob", "member", "vision")
    api.login_secret(alice, "team-login", PASSWORD)
    r = api.call("POST", "/jobs", auth=bob, json={"command": ["env"], "secret_env": {"REG": "team-login"}})
    if r.status_code == 201:
        a = api.hand_over(r.json()["id"])
        assert a is None or PASSWORD not in a.secret_env.values(), "the registry password reached the job's env"
    else:
        _refused(r, "secret_env")


# ----- bounds: what a registry or an agent sends back -----


def test_a_registry_answer_with_a_nul_byte_does_not_break_the_nodes_sync(api: Api) -> None:
    """HOLE (PostgreSQL): the agent puts the registry's own answer in a failed pull's reason (`describe_failure`,
    up to 400 characters, unfiltered). A registry the tenant runs answers with a NUL byte; ExitReport.reason takes
    any string; PostgreSQL refuses a NUL in text, so the sync fails, and every later sync re-sends the exit: the
    node's reports stop (its heartbeat goes on, but no exit is recorded and no job is handed out). On SQLite the
    NUL and terminal escapes are stored and shown back."""
    alice = api.user("alice", "member", "vision")
    job = api.submit(alice, image="evil.example.com/x:1")
    assert job.status_code == 201, job.text
    a = api.hand_over(job.json()["id"])
    assert a is not None
    reason = "cannot pull image evil.example.com/x:1 from evil.example.com without a login: denied\x00\x1b[2J"
    exit_ = ExitReport(job_id=a.job_id, attempt=a.attempt, exit_code=125, reason=reason)
    apply_reports(api.store, "boxy", AgentSync(exits=[exit_]))  # must not raise
    shown = api.call("GET", f"/jobs/{a.job_id}", auth=alice).json()
    assert shown["state"] == "FAILED" and "\x00" not in shown["reason"]


@pytest.mark.parametrize(
    "meta",
    [
        {"host": "reg.example.com\x00evil"},
        {"username": "ann\x00"},
        {"username": "ann\x1b]0;owned\x07\x1b[2J"},
        {"host": "reg.example.com\n"},
    ],
)
def test_a_registry_host_or_username_with_nul_or_control_characters_is_refused(api: Api, meta: dict[str, str]) -> None:
    """HOLE (low) for control characters: `SecretIn.host`/`username` are any text up to 255 characters; escapes
    and newlines are stored and shown back in listings (an admin listing every tenant's secrets gets the terminal
    escapes; a newline in a host never matches an image). A NUL is refused already (safe). The safe behaviour: 422
    naming the field, as other text fields (api/bounds.py)."""
    alice = api.user("alice", "member", "vision")
    body = {"name": "odd", "value": "pw", "kind": "registry", "host": "reg.example.com", "username": "ann", **meta}
    r = api.call("POST", "/secrets", auth=alice, json=body)
    assert r.status_code == 422, (r.status_code, r.text)


def test_agent_reports_of_phases_and_images_are_bounded(api: Api) -> None:
    """Safe: the schema bounds every field of the new reports (sizes, counts)."""
    from pydantic import ValidationError

    for body in (
        {"images": ["x" * 256]},
        {"images": [f"i{n}" for n in range(201)]},
        {"phases": {"1.1": "p" * 65}},
        {"phases": {f"{n}.1": "pulling" for n in range(4097)}},
        {"image_digests": {"1.1": "d" * 256}},
    ):
        with pytest.raises(ValidationError):
            AgentSync(**body)


# ----- learning another tenant's image names -----


def _node(name: str, *images: str) -> NodeInfo:
    gpus = tuple(GpuInfo(i, f"{name}-{i}", "A100-80GB", 81920) for i in range(8))
    return NodeInfo(name, gpus, 64_000, 262_144, runtimes=("process", "docker"), images=frozenset(images))


def test_placement_does_not_tell_a_tenant_where_another_tenants_private_image_is_cached(tmp_path: Path) -> None:
    """Was a hole (low): the pending reason hid where an image is cached, but placement showed it (on idle equal
    nodes a job naming a guessed image landed on the node that had it). Fixed where the node reports its images: a
    node never reports an image pulled with a registry login, so a private image steers no placement; a public one
    still does (the placement engine's own tests cover the preference)."""
    from container_engine import TEST_IMAGE, require_engine
    from corral.executors.image_cache import ImageCache

    engine = require_engine()
    private, public = "hostile-review/private:1", "hostile-review/public:1"
    for ref in (private, public):
        engine.images.get(TEST_IMAGE).tag(ref)
    try:
        cache = ImageCache(engine, tmp_path / "images", None)
        cache.record_pull(private, private=True)
        cache.record_pull(public, private=False)
        assert cache.cached() == [public]
        assert cache.is_private(private) and cache.is_private(public)  # the same image id: private either way
    finally:
        for ref in (private, public):
            engine.images.remove(ref)


# ----- another tenant's private image, cached on the node (the real Docker Engine and the test registry) -----


def _wait_exit(executor: Any, key: str) -> Any:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for ex in executor.collect_exits():
            if ex.job_id == key:
                return ex
        time.sleep(0.1)
    raise AssertionError(f"run {key} did not end within 60 s")


@pytest.mark.xdist_group("container-engine")  # the engine and the private registry's images: docs/testing.md
def test_a_cached_private_image_is_not_run_under_another_name_without_a_login(tmp_path: Path) -> None:
    """Was a hole (fixed by image id, and ids refused at submit): the agent kept "pulled with a login" per reference string (`ImageCache.is_private(image)`), but asks
    the engine whether it has the image under any name (`has` -> `images.get`). Alice's job pulls
    127.0.0.1:5055/team/busybox:1 with her login; mallory's job without a login names the same image by its
    registry digest (`repo@sha256:...`, shown as alice's job's `image_digest`, or known for a published image), by
    its image id (`sha256:...`), or by a short id prefix (a few hex characters: a guess among 16^n): each passes
    `check_image` at submit, is found by the engine, is not marked private, and runs without asking the registry.
    The safe behaviour: the registry is asked (no login: refused), so the launch ends 125."""
    import docker as docker_sdk

    from container_engine import PRIVATE_IMAGES, REGISTRY_PASSWORD, REGISTRY_USER, require_engine, require_registry
    from corral.core.containers import ContainerSpec
    from corral.core.errors import ValidationError as CorralValidationError
    from corral.core.unix_identity import JobIdentity
    from corral.executors.base import LaunchSpec, RegistryLogin
    from corral.executors.container import ContainerExecutor
    from corral.executors.image_cache import ImageCache
    from corral.executors.image_pull import PullFailed

    engine: docker_sdk.DockerClient = require_engine()
    registry = require_registry()
    node = "hostile-review-node"
    private = PRIVATE_IMAGES[0]
    executor = ContainerExecutor(
        engine, tmp_path / "state", node, image_cache=ImageCache(engine, tmp_path / "images", None)
    )
    identity = JobIdentity(200_123, 200_123, "alice")

    def spec(key: str, image: str, login: RegistryLogin | None) -> LaunchSpec:
        return LaunchSpec(
            job_id=key,
            command=("true",),
            env={},
            workdir=None,
            gpu_indices=(),
            gpu_uuids=(),
            log_path=tmp_path / "logs" / f"{key}.log",
            identity=identity,
            container=ContainerSpec(image),
            registry_login=login,
        )

    try:
        alice = RegistryLogin(registry, REGISTRY_USER, REGISTRY_PASSWORD)
        executor.launch(spec("1.1", private, alice))
        assert _wait_exit(executor, "1.1").exit_code == 0  # alice's job pulled and ran it
        img = engine.images.get(private)
        digest = next(d for d in img.attrs["RepoDigests"] if d.startswith(f"{registry}/team/busybox@"))
        ids = [str(i.id).removeprefix("sha256:") for i in engine.images.list(all=True)]
        own = img.id.removeprefix("sha256:")
        short = next(own[:n] for n in range(2, 13) if sum(i.startswith(own[:n]) for i in ids) == 1)
        aliases = [digest, img.id, own[:12], short]  # `short`: 2-3 hex characters, 256-4096 guesses cover them all
        for alias in aliases[1:]:  # an image id, whole or any prefix of it, is refused at submit...
            with pytest.raises(CorralValidationError):
                check_image(alias)
        assert check_image(digest) == digest  # ...a digest names the image (the node asks the registry again)
        executor.launch(spec("2.1", private, None))  # mallory, same name, no login: refused (a passing guard)
        assert _wait_exit(executor, "2.1").exit_code == 125
        ran: list[str] = []
        for n, alias in enumerate(aliases, start=3):
            executor.launch(spec(f"{n}.1", alias, None))
            if _wait_exit(executor, f"{n}.1").exit_code != 125:
                # what mallory's job then shows as its image_digest: alice's private repository, by name
                ran.append(f"{alias} (reported digest {executor.image_digests().get(f'{n}.1')})")
        assert not ran, f"another tenant ran alice's private image without a login, named {ran}"
        with pytest.raises(PullFailed):  # the same, one level down
            executor._ensure_image(_new_run(tmp_path), digest, None)
    finally:
        executor.close()
        from container_engine import remove_node_containers

        remove_node_containers(engine, node)


def _new_run(tmp_path: Path) -> Any:
    from corral.executors.container import _Run

    return _Run("99.1", tmp_path / "r", tmp_path / "r.log", starting=True)
