"""Container jobs through the API, on SQLite and PostgreSQL: the image and its options are validated with errors
naming the field, host mounts are refused unless under the admin's prefixes (hostile tenants try /etc, `..`, a
chosen UID with a mount), the job and its hand-over to the agent carry them, a node shows its runtimes, and the
image digest an agent reports shows on the job."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.api.schemas import AgentSync, RunRef
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.keyring import Keyring, load_keyring
from corral.server.services.agents import apply_reports, compute_assignments
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

IMAGE = "corral-test/busybox:1"


class Api:
    def __init__(self, client: TestClient, admin_token: str, store: SqlStore) -> None:
        self.client = client
        self.auth = {"Authorization": f"Bearer {admin_token}"}
        self.store = store
        self.keyring: Callable[[], Keyring] = lambda: None  # type: ignore[assignment,return-value]

    def submit(self, **body: Any) -> Any:
        return self.client.post("/api/v1/jobs", headers=self.auth, json={"command": ["sh", "-c", "true"], **body})

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.client.post(f"/api/v1{path}", headers=self.auth, json=body)

    def get(self, path: str) -> Any:
        r = self.client.get(f"/api/v1{path}", headers=self.auth)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
def make_api(database_url: str, tmp_path: Path) -> Iterator[Callable[..., Api]]:
    clients: list[TestClient] = []

    def make(allowed_mounts: str = "") -> Api:
        store = open_store(database_url)
        creds = ensure_credentials(store, tmp_path)
        gpu = GpuInfo(index=0, uuid="GPU-0", model="H100-80GB", memory_mib=81920)
        now = datetime.now(UTC)
        store.upsert_node("plain", "plain", "simulated", 8000, 65536, {}, [gpu], now)
        store.upsert_node("boxy", "boxy", "simulated", 8000, 65536, {}, [gpu], now, runtimes=("process", "docker"))
        settings = Settings(data_dir=tmp_path, database_url=database_url, allowed_mounts=allowed_mounts)
        client = TestClient(create_app(settings, store))
        client.__enter__()
        clients.append(client)
        api = Api(client, creds.admin_token, store)
        api.keyring = lambda: load_keyring(settings.effective_secrets_key_file, store.secret_key_ids())
        return api

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def _field_error(r: Any) -> str:
    """A refusal: 422 from the schema, 400 from the submit checks; both name the field."""
    assert r.status_code in (400, 422), r.text
    return str(r.json())


MALFORMED = [
    ("a bad image reference", {"image": "--privileged"}, "image"),
    ("mounts without an image", {"mounts": ["/data:/data"]}, "mounts"),
    ("a user without an image", {"container_user": "1000"}, "container_user"),
    ("shm without an image", {"shm_size_mib": 512}, "shm_size_mib"),
    ("root in the container", {"image": IMAGE, "container_user": "0:0"}, "container_user"),
    ("a dot-dot mount", {"image": IMAGE, "mounts": ["/data/../etc:/etc"]}, "mounts"),
    ("a relative mount", {"image": IMAGE, "mounts": ["data:/data"]}, "mounts"),
    (
        "a chosen UID with a mount",
        {"image": IMAGE, "mounts": ["/data/a:/a"], "container_user": "1000"},
        "container_user",
    ),
    ("too many mounts", {"image": IMAGE, "mounts": [f"/data/{i}:/m{i}" for i in range(17)]}, "mounts"),
    ("a huge shm", {"image": IMAGE, "shm_size_mib": 1 << 21}, "shm_size_mib"),
]


def test_malformed_container_options_are_refused_naming_the_field(make_api: Callable[..., Api]) -> None:
    api = make_api("/data")
    for name, body, field in MALFORMED:
        assert field in _field_error(api.submit(**body)), name


def test_host_mounts_are_refused_unless_the_admin_allows_their_prefix(make_api: Callable[..., Api]) -> None:
    closed = make_api()  # the default: no host mounts at all
    error = _field_error(closed.submit(image=IMAGE, mounts=["/data/a:/a"]))
    assert "mounts" in error and "CORRAL_ALLOWED_MOUNTS" in error
    api = make_api("/data, /scratch/shared")
    for outside in ("/etc:/host-etc", "/var/run/docker.sock:/var/run/docker.sock", "/datastore:/d", "/:/host"):
        assert "mounts" in _field_error(api.submit(image=IMAGE, mounts=[outside])), outside
    r = api.submit(image=IMAGE, mounts=["/data/a:/a:ro", "/scratch/shared:/s"], shm_size_mib=2048)
    assert r.status_code == 201, r.text
    job = api.get(f"/jobs/{r.json()['id']}")
    assert job["image"] == IMAGE and job["mounts"] == ["/data/a:/a:ro", "/scratch/shared:/s"]
    assert job["shm_size_mib"] == 2048 and job["image_digest"] is None


def test_a_process_job_is_as_before(make_api: Callable[..., Api]) -> None:
    r = make_api().submit(gpus=1)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["image"] is None and job["mounts"] == [] and job["image_digest"] is None


def test_nodes_show_their_runtimes(make_api: Callable[..., Api]) -> None:
    nodes = {n["name"]: n["runtimes"] for n in make_api().get("/nodes")}
    assert nodes == {"plain": ["process"], "boxy": ["process", "docker"]}


def test_hand_over_carries_the_container_and_the_reported_digest_shows(make_api: Callable[..., Api]) -> None:
    api = make_api()
    r = api.submit(image=IMAGE, gpus=1, cpu_milli=1500, memory_mib=2048, container_user="1234:1234")
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    store = api.store
    now = datetime.now(UTC)
    store.touch_node("boxy", now)
    if api.get(f"/jobs/{job_id}")["state"] == "PENDING":  # or the scheduler thread placed it already
        store.assign_job(job_id, "boxy", [0], now)
    job = api.get(f"/jobs/{job_id}")
    assert job["node"] == "boxy"  # never `plain`: it has no docker runtime
    node = store.get_node("boxy")
    assert node is not None
    assignments, _ = compute_assignments(store, node, set())
    a = next(a for a in assignments if a.job_id == job_id)
    assert a.container == {
        "image": IMAGE,
        "mounts": [],
        "shm_size_mib": None,
        "user": "1234:1234",
        "registry_secret": None,
    }
    assert a.registry_auth is None
    assert (a.cpu_milli, a.memory_mib) == (1500, 2048)
    run = RunRef(job_id=job_id, attempt=job["attempt"])
    digest = "corral-test/busybox@sha256:" + "ab" * 32
    apply_reports(store, "boxy", AgentSync(running=[run], image_digests={run.key: digest}))
    assert api.get(f"/jobs/{job_id}")["image_digest"] == digest
    stale = RunRef(job_id=job_id, attempt=job["attempt"] + 1)  # another attempt's report changes nothing
    apply_reports(store, "boxy", AgentSync(running=[run], image_digests={stale.key: "sha256:" + "cd" * 32}))
    assert api.get(f"/jobs/{job_id}")["image_digest"] == digest


REGISTRY = "registry.example.com:5000"
PRIVATE = f"{REGISTRY}/team/trainer:3"


def _placed(api: Api, job_id: int) -> Any:
    now = datetime.now(UTC)
    api.store.touch_node("boxy", now)
    if api.get(f"/jobs/{job_id}")["state"] == "PENDING":  # or the scheduler thread placed it already
        api.store.assign_job(job_id, "boxy", [0], now)
    return api.get(f"/jobs/{job_id}")


def test_a_registry_secret_is_checked_at_submit_and_opened_only_for_the_agent(make_api: Callable[..., Api]) -> None:
    api = make_api()
    login = {"name": "team-login", "value": "pa55", "kind": "registry", "host": REGISTRY, "username": "ann"}
    assert api.post("/secrets", login).status_code == 201
    assert api.post("/secrets", {"name": "plain", "value": "x"}).status_code == 201
    for body, words in (
        ({"image": PRIVATE, "registry_secret": "nope"}, "no secret 'nope' in this tenant"),
        ({"image": PRIVATE, "registry_secret": "plain"}, "is not a registry login"),
        ({"image": "docker.io/library/python:3", "registry_secret": "team-login"}, f"logs in to {REGISTRY}"),
        ({"image": "python:3", "registry_secret": "team-login"}, "comes from docker.io"),
        ({"registry_secret": "team-login"}, "only a job with an image"),
        ({"image": PRIVATE, "registry_secret": "../x"}, "not a secret name"),
    ):
        error = _field_error(api.submit(**body))
        assert "registry_secret" in error and words in error, (body, error)
    r = api.submit(image=PRIVATE, registry_secret="team-login", gpus=1)
    assert r.status_code == 201, r.text
    job = _placed(api, r.json()["id"])
    assert job["registry_secret"] == "team-login" and "pa55" not in str(job)
    node = api.store.get_node("boxy")
    assert node is not None
    assignments, _ = compute_assignments(api.store, node, set(), api.keyring())
    auth = next(a for a in assignments if a.job_id == job["id"]).registry_auth
    assert auth is not None and (auth.host, auth.username, auth.password) == (REGISTRY, "ann", "pa55")
    assert "pa55" not in repr(auth)  # never in a log line


def test_a_job_whose_registry_secret_is_gone_fails_naming_it_instead_of_starting(make_api: Callable[..., Api]) -> None:
    api = make_api()
    login = {"name": "gone", "value": "pa55", "kind": "registry", "host": REGISTRY, "username": "ann"}
    assert api.post("/secrets", login).status_code == 201
    r = api.submit(image=PRIVATE, registry_secret="gone", gpus=1)
    assert r.status_code == 201, r.text
    assert api.client.delete("/api/v1/secrets/gone", headers=api.auth).status_code == 204
    job = _placed(api, r.json()["id"])
    node = api.store.get_node("boxy")
    assert node is not None
    assignments, _ = compute_assignments(api.store, node, set(), api.keyring())
    assert all(a.job_id != job["id"] for a in assignments)
    failed = api.get(f"/jobs/{job['id']}")
    assert failed["state"] == "FAILED" and "registry secret 'gone' no longer exists" in failed["reason"]


def test_the_pull_phase_shows_while_it_lasts_and_the_node_reports_its_images(make_api: Callable[..., Api]) -> None:
    api = make_api()
    r = api.submit(image=IMAGE, gpus=1)
    assert r.status_code == 201, r.text
    job = _placed(api, r.json()["id"])
    run = RunRef(job_id=job["id"], attempt=job["attempt"])
    assert job["phase"] is None
    apply_reports(api.store, "boxy", AgentSync(phases={run.key: "pulling 43%"}, images=[IMAGE]))
    shown = api.get(f"/jobs/{job['id']}")
    assert (shown["state"], shown["phase"]) == ("RUNNING", "pulling 43%")  # its GPUs are held meanwhile
    assert api.get("/nodes/boxy")["images"] == [IMAGE]
    stale = RunRef(job_id=job["id"], attempt=job["attempt"] + 1)  # another attempt's phase changes nothing
    apply_reports(api.store, "boxy", AgentSync(phases={stale.key: "pulling 1%", run.key: "pulling 43%"}))
    assert api.get(f"/jobs/{job['id']}")["phase"] == "pulling 43%"
    apply_reports(api.store, "boxy", AgentSync(running=[run]))  # its command runs: no phase any more
    assert api.get(f"/jobs/{job['id']}")["phase"] is None
    apply_reports(api.store, "boxy", AgentSync(running=[run], phases={run.key: "pulling 99%"}))
    api.store.finish_job(job["id"], JobState.CANCELLED, 143, "cancelled", datetime.now(UTC))
    assert api.get(f"/jobs/{job['id']}")["phase"] is None  # an ended job has none, whatever was last reported
    assert api.get("/nodes/boxy")["images"] == [IMAGE]  # an unchanged list is not sent (None), and kept
