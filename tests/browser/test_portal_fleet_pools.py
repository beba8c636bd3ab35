"""The fleet page groups the nodes by pool, in a real browser: one section per pool (static first, then the others by
name), each headed by its name, its kind (a slurm pool's nodes named as an existing cluster's), its node count and
GPUs free / total, with its nodes under it as the node list shows them; a declared pool with no node yet says so.
Names from clusters and node labels are shown as text, never as markup. A member reads the same sections and the
page asks for no pool's settings (the pool list answers a member without them, and no pool's own page is asked).

The cluster pool's nodes are written into the server's store the way its cluster bridge writes them (labels pool and
source): no Slurm runs here, and the bridge's failing reads of the missing cluster leave them as they are."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest

from corral.core.resources import GpuInfo
from corral.store.sql import open_store
from e2e.conftest import wait_for

from .conftest import Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]
Tabs = Callable[[], Tab]

HOSTILE_NODE = "hpc.<img src=x onerror=document.title='pwned-node'>"  # a cluster's own node name, as it gave it
HOSTILE_POOL = "<img src=x onerror=document.title='pwned-pool'>"  # a node's pool label: labels are free text
HPC_SETTINGS = {"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": "/srv/corral-fleet-pools-logs"}
EMPTY = "burst"  # a cloud pool that starts no node (no demand)


def _gpus(n: int, model: str = "A100-80GB") -> list[GpuInfo]:
    return [
        GpuInfo(index=i, uuid=f"fleet-pools-{uuid.uuid4().hex[:8]}-{i}", model=model, memory_mib=81920)
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def seeded(cluster: Cluster) -> Iterator[Cluster]:
    """Pools `hpc` (slurm: two nodes, one with a hostile name) and `burst` (cloud, no node), and a node whose pool
    label is hostile markup (no such pool declared)."""
    r = cluster.api("POST", "/pools", json={"name": "hpc", "kind": "slurm", "settings": HPC_SETTINGS})
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "slurm"
    r = cluster.api(
        "POST",
        "/pools",
        json={"name": EMPTY, "provider": "local", "max_nodes": 1, "instance_types": [{"name": "g1", "gpus": 1}]},
    )
    assert r.status_code == 201, r.text
    store = open_store(f"sqlite:///{cluster.data_dir / 'corral.db'}")  # the server's own store (corral up: SQLite)
    try:
        now = datetime.now(UTC)
        slurm = {"pool": "hpc", "source": "slurm"}
        store.upsert_node("hpc.gpu-01", "gpu-01", "slurm", 32000, 256000, slurm, _gpus(4), now)
        store.upsert_node(HOSTILE_NODE, "gpu-02", "slurm", 16000, 128000, slurm, _gpus(2), now)
        store.upsert_node("odd-1", "odd-1", "simulated", 8000, 64000, {"pool": HOSTILE_POOL}, _gpus(1), now)
    finally:
        store.close()
    wait_for(lambda: len(cluster.api("GET", "/nodes").json()) == 5, 10, "the seeded nodes listed")
    return cluster


def _member(cluster: Cluster) -> tuple[str, str, str]:
    """A member of a tenant of its own: (name, password, API token)."""
    tenant = f"fp-{uuid.uuid4().hex[:4]}"
    assert cluster.api("POST", "/tenants", json={"name": tenant}).status_code == 201
    user, password = f"{tenant}-member", "pw-" + uuid.uuid4().hex[:8]
    r = cluster.api("POST", "/users", json={"name": user, "role": "member", "tenant": tenant, "password": password})
    assert r.status_code == 201, r.text
    r = cluster.api("POST", "/login", json={"username": user, "password": password})
    assert r.status_code == 200, r.text
    return user, password, str(r.json()["token"])


SECTIONS_JS = """() => [...document.querySelectorAll('#pools [data-pool-section]')].map((s) => ({
  section: s.dataset.poolSection,
  name: s.querySelector('[data-pool-name]').textContent,
  link: s.querySelector('a[data-pool-name]') ? s.querySelector('a[data-pool-name]').getAttribute('href') : null,
  kind: s.querySelector('[data-pool-kind]').textContent,
  nodes: s.querySelector('[data-pool-nodes]').textContent,
  gpus: s.querySelector('[data-pool-gpus]').textContent,
  members: [...s.querySelectorAll('a[data-node]')].map((a) => a.textContent),
  empty: s.querySelector('[data-no-nodes]') ? s.querySelector('[data-no-nodes]').textContent : null,
}))"""

EXPECTED = [
    {
        "section": "static",
        "name": "static",
        "link": "/pools/static",
        "kind": "static · Corral agents",
        "nodes": "2 nodes",
        "gpus": "12 / 12",
        "members": ["node-a", "node-b"],
        "empty": None,
    },
    {  # '<' sorts before letters: the hostile pool comes next, its name as text, no link (no such pool)
        "section": HOSTILE_POOL,
        "name": HOSTILE_POOL,
        "link": None,
        "kind": "not a declared pool",
        "nodes": "1 node",
        "gpus": "1 / 1",
        "members": ["odd-1"],
        "empty": None,
    },
    {
        "section": EMPTY,
        "name": EMPTY,
        "link": f"/pools/{EMPTY}",
        "kind": "cloud · autoscaled",
        "nodes": "0 nodes",
        "gpus": "0 / 0",
        "members": [],
        "empty": "no nodes yet",
    },
    {
        "section": "hpc",
        "name": "hpc",
        "link": "/pools/hpc",
        "kind": "slurm · an existing Slurm cluster's nodes",
        "nodes": "2 nodes",
        "gpus": "6 / 6",
        "members": [HOSTILE_NODE, "hpc.gpu-01"],  # the node list's order (by name)
        "empty": None,
    },
]


def _sections(tab: Tab) -> list[dict[str, Any]]:
    tab.page.locator("#pools [data-pool-section]").first.wait_for()
    got: list[dict[str, Any]] = []

    def read() -> bool:
        got[:] = tab.page.evaluate(SECTIONS_JS)
        return got == EXPECTED

    try:
        wait_for(read, 15, "the fleet's pool sections")
    except AssertionError:
        pass  # the caller's assert shows what was there against what was expected
    return got


def _no_markup_injected(tab: Tab) -> None:
    page = tab.page
    expect(page.locator("#pools img, #by-pool img")).to_have_count(0)
    assert "pwned" not in page.title()
    # Every hostile string reads as itself where it is shown.
    expect(page.locator("#pools a[data-node]").filter(has_text=HOSTILE_NODE)).to_have_text(HOSTILE_NODE)
    expect(page.locator("#pools [data-pool-name]").filter(has_text=HOSTILE_POOL)).to_have_text(HOSTILE_POOL)
    expect(page.locator("#by-pool")).to_contain_text(HOSTILE_POOL)


def test_the_fleet_shows_one_section_per_pool_static_first_with_its_kind_counts_and_nodes(
    admin_tab: Tab, seeded: Cluster
) -> None:
    seeded.require_api("/api/v1/nodes", "/api/v1/pools")
    page = admin_tab.page
    admin_tab.goto("/")
    assert _sections(admin_tab) == EXPECTED
    # What the fleet showed before is all still there: totals, GPUs by model, GPUs by pool, the queue.
    expect(page.locator("[data-stat=GPUs] .stat")).to_contain_text("19")
    expect(page.locator("#by-model")).to_contain_text("H100-80GB")
    expect(page.locator("#by-pool-wrap")).to_be_visible()
    expect(page.locator("#by-pool")).to_contain_text("hpc")
    expect(page.locator("#queue [data-queue-length]")).to_have_text("0")
    # A node is a link to its page, as on the node list; the hostile one's link names it, encoded.
    hostile = page.locator("#pools a[data-node]").filter(has_text=HOSTILE_NODE)
    assert hostile.get_attribute("href") == "/nodes/" + quote(HOSTILE_NODE, safe="-_.!~*'()")  # encodeURIComponent
    _no_markup_injected(admin_tab)
    # The admin's pool list carries the settings; the fleet shows none of them.
    assert {p["name"]: p["settings"] for p in seeded.api("GET", "/pools").json()}["hpc"] == HPC_SETTINGS
    content = page.locator("main").inner_text()
    assert all(v not in content for v in HPC_SETTINGS.values())
    admin_tab.shot("fleet-pools")

    # The pool's name opens its page.
    page.locator("[data-pool-section=hpc] a[data-pool-name]").click()
    page.wait_for_url(re.compile(r"/pools/hpc$"))
    expect(page.locator("main h1")).to_contain_text("hpc")


def test_a_member_sees_the_same_sections_and_the_page_asks_for_no_pool_settings(tabs: Tabs, seeded: Cluster) -> None:
    user, password, token = _member(seeded)
    # The API hides a pool's settings from a member, in the list the fleet reads and on the pool's own page.
    assert all(p["settings"] is None for p in seeded.api("GET", "/pools", token=token).json())
    assert seeded.api("GET", "/pools/hpc", token=token).json()["settings"] is None

    t = tabs()
    asked: list[str] = []
    answers: list[Any] = []
    t.page.on("request", lambda r: asked.append(r.url) if "/api/v1/pools" in r.url else None)
    t.page.on(
        "response",
        lambda r: answers.append(r.json()) if r.url.split("?")[0].endswith("/api/v1/pools") and r.ok else None,
    )
    t.login_with_password(user, password)
    t.goto("/")
    assert _sections(t) == EXPECTED
    _no_markup_injected(t)
    content = t.page.locator("main").inner_text()
    assert all(v not in content for v in HPC_SETTINGS.values())
    wait_for(lambda: answers, 10, "the fleet's pool list answered")
    paths = {u.removeprefix(seeded.url).split("?")[0] for u in asked}
    assert paths == {"/api/v1/pools"}, paths  # the list only: no pool's own page (its settings and events)
    assert all(p["settings"] is None and p.get("events") is None for answer in answers for p in answer)
    t.shot("fleet-pools-member")
