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
from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.services.agents import apply_reports, compute_assignments
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

IMAGE = "corral-test/busybox:1"


class Api:
    def __init__(self, client: TestClient, admin_token: str, store: SqlStore) -> None:
        self.client = client
        self.auth = {"Authorization": f"Bearer {admin_token}"}
        self.store = store

    def submit(self, **body: Any) -> Any:
        return self.client.post("/api/v1/jobs", headers=self.auth, json={"command": ["sh", "-c", "true"], **body})

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
        return Api(client, creds.admin_token, store)

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
    assert a.container == {"image": IMAGE, "mounts": [], "shm_size_mib": None, "user": "1234:1234"}
    assert (a.cpu_milli, a.memory_mib) == (1500, 2048)
    run = RunRef(job_id=job_id, attempt=job["attempt"])
    digest = "corral-test/busybox@sha256:" + "ab" * 32
    apply_reports(store, "boxy", AgentSync(running=[run], image_digests={run.key: digest}))
    assert api.get(f"/jobs/{job_id}")["image_digest"] == digest
    stale = RunRef(job_id=job_id, attempt=job["attempt"] + 1)  # another attempt's report changes nothing
    apply_reports(store, "boxy", AgentSync(running=[run], image_digests={stale.key: "sha256:" + "cd" * 32}))
    assert api.get(f"/jobs/{job_id}")["image_digest"] == digest
