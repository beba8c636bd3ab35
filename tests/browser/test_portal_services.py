"""The portal's services pages in a real browser: a service made through the API is listed, its page shows its
replicas (placed by the real scheduler on the simulated nodes) and its rollout, a member scales it from the page,
a viewer of its tenant reads it without the buttons, and a viewer of another tenant never sees it."""

from __future__ import annotations

import re
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.conftest import wait_for

from .conftest import EXPECTED_404, Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
Tabs = Callable[[], Tab]
# The system's python: a job may run as a user of its own, who cannot reach the test's virtual environment.
PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]

ROUTES = (
    "/api/v1/services",
    "/api/v1/services/{name}",
    "/api/v1/services/{name}/scale",
    "/api/v1/services/{name}/rollback",
    "/api/v1/services/{name}/metrics",
)


def _user_token(cluster: Cluster, tenant: str, role: str) -> tuple[str, str, str]:
    """A user of `tenant` with `role` (the tenant made when missing): (name, password, API token)."""
    if tenant not in {t["name"] for t in cluster.api("GET", "/tenants").json()}:
        assert cluster.api("POST", "/tenants", json={"name": tenant}).status_code == 201
    user, password = f"{tenant}-{role}-{uuid.uuid4().hex[:4]}", "pw-" + uuid.uuid4().hex[:8]
    r = cluster.api("POST", "/users", json={"name": user, "role": role, "tenant": tenant, "password": password})
    assert r.status_code == 201, r.text
    r = cluster.api("POST", "/login", json={"username": user, "password": password})
    assert r.status_code == 200, r.text
    return user, password, str(r.json()["token"])


@pytest.fixture
def services(cluster: Cluster) -> Iterator[list[str]]:
    """Services to delete after the test, so their replicas leave the nodes to the next test."""
    names: list[str] = []
    yield names
    for name in names:
        cluster.api("DELETE", f"/services/{name}")
    for name in names:
        _wait_gone(cluster, name)


def _wait_gone(cluster: Cluster, name: str) -> None:
    wait_for(lambda: cluster.api("GET", f"/services/{name}").status_code == 404, 60, f"service {name} gone")


def _create(cluster: Cluster, token: str, names: list[str], **spec: object) -> dict[str, object]:
    name = f"svc-{uuid.uuid4().hex[:6]}"
    # A replica that runs but never answers its health path: placed on a node, never ready (no traffic needed).
    body = {"name": name, "command": ["sleep", "3600"], "port": 8080, "health_path": "/healthz", "gpus": 1, **spec}
    r = cluster.api("POST", "/services", token=token, json=body)
    assert r.status_code == 201, r.text
    names.append(name)
    return dict(r.json())


def _open_services(tab: Tab) -> None:
    """To the list through the navigation, as a user gets there."""
    tab.goto("/")
    tab.page.click("#nav a[data-nav=services]")
    tab.page.wait_for_url(re.compile(r"/services$"))
    expect(tab.page.locator("main h1").first).to_have_text("Services")
    expect(tab.page.locator("#nav a[data-nav=services]")).to_have_attribute("aria-current", "page")


def test_a_service_is_listed_shows_its_replicas_and_rollout_and_scales_from_its_page(
    tabs: Tabs, cluster: Cluster, services: list[str]
) -> None:
    cluster.require_api(*ROUTES)
    tenant = f"svc-{uuid.uuid4().hex[:4]}"
    member, member_pw, token = _user_token(cluster, tenant, "member")
    svc = _create(cluster, token, services)
    name = str(svc["name"])
    assert svc["url"] == f"/services/{name}/"
    # The scheduler places the replica on a simulated node (it never gets ready: `sleep` answers no health check).
    wait_for(
        lambda: any(r["node"] for r in cluster.api("GET", f"/services/{name}").json()["replicas"]),
        60,
        "the replica was placed on a node",
    )

    t = tabs()
    t.login_with_password(member, member_pw)
    _open_services(t)
    page = t.page
    row = page.locator("#list tr", has=page.locator(f"a[data-service='{name}']"))
    expect(row).to_contain_text(tenant)
    expect(row).to_contain_text(f"/services/{name}/")
    if svc.get("endpoint"):  # the full gateway URL, opened in a tab of its own
        expect(row.locator("a[data-endpoint]")).to_have_attribute("href", str(svc["endpoint"]))
    expect(row.locator("[data-ready]")).to_have_text("0 / 1")
    expect(row.locator("[data-rollout]")).to_have_text(re.compile(r"^(progressing|stalled)$"))
    t.shot("services")

    row.locator(f"a[data-service='{name}']").click()
    page.wait_for_url(re.compile(rf"/services/{name}$"))
    expect(page.locator("main h1")).to_contain_text(name)
    expect(page.locator("#rollout-state [data-rollout]")).to_have_text(re.compile(r"^(progressing|stalled)$"))
    expect(page.locator("#rollout")).to_contain_text("revision 1")
    replicas = page.locator("#replicas tbody tr")
    expect(replicas).to_have_count(1)
    job = cluster.api("GET", f"/services/{name}").json()["replicas"][0]
    expect(replicas.first.locator(f"a[href='/jobs/{job['job_id']}']")).to_have_count(1)
    expect(replicas.first).to_contain_text(re.compile(r"node-[ab]"))
    expect(replicas.first).to_contain_text("not ready")
    expect(page.locator("#revisions tbody tr")).to_have_count(1)
    expect(page.locator("#revisions")).to_contain_text("sleep 3600")
    expect(page.locator("#events tbody tr").first).not_to_contain_text("no events")
    expect(page.locator("[data-chart=svc-replicas]")).to_be_visible()
    expect(page.locator("[data-chart=svc-latency] h3")).to_have_text("Latency")
    expect(page.locator("#rollback")).to_be_disabled()  # one revision: nowhere to roll back to
    t.shot("service")

    page.fill("#scale-form input[name=replicas]", "2")
    page.click("#scale-form button[type=submit]")
    expect(page.locator("#toast")).to_contain_text("scaled to 2")
    wait_for(lambda: cluster.api("GET", f"/services/{name}").json()["desired"] == 2, 10, "desired is 2")
    expect(page.locator("#summary [data-ready]")).to_have_text("0 / 2")
    expect(replicas).to_have_count(2, timeout=30_000)  # the controller starts the second replica, live

    # The job link goes to the replica's job page.
    replicas.first.locator(f"a[href='/jobs/{job['job_id']}']").click()
    page.wait_for_url(re.compile(rf"/jobs/{job['job_id']}$"))
    expect(page.locator("main h1")).to_contain_text(f"#{job['job_id']}")


def test_viewers_read_their_tenants_service_without_buttons_and_others_never_see_it(
    tabs: Tabs, cluster: Cluster, services: list[str]
) -> None:
    cluster.require_api(*ROUTES)
    tenant = f"svc-{uuid.uuid4().hex[:4]}"
    _, _, token = _user_token(cluster, tenant, "member")
    name = str(_create(cluster, token, services)["name"])

    viewer, viewer_pw, _ = _user_token(cluster, tenant, "viewer")
    t = tabs()
    t.login_with_password(viewer, viewer_pw)
    _open_services(t)
    t.page.locator(f"a[data-service='{name}']").click()
    t.page.wait_for_url(re.compile(rf"/services/{name}$"))
    expect(t.page.locator("#rollout-state [data-rollout]")).to_be_visible()
    expect(t.page.locator("#replicas table")).to_be_visible()
    expect(t.page.locator("#scale-form")).to_have_count(0)
    expect(t.page.locator("#rollback")).to_have_count(0)
    expect(t.page.locator("#delete")).to_have_count(0)

    other_viewer, other_pw, other_token = _user_token(cluster, f"oth-{uuid.uuid4().hex[:4]}", "viewer")
    assert cluster.api("GET", f"/services/{name}", token=other_token).status_code == 404
    o = tabs()
    o.login_with_password(other_viewer, other_pw)
    _open_services(o)
    expect(o.page.locator("#list")).to_contain_text("no services yet")
    expect(o.page.locator(f"a[data-service='{name}']")).to_have_count(0)
    o.allowed.append(EXPECTED_404)
    o.goto(f"/services/{name}")  # guessing the URL gives the 404 page, not the service
    expect(o.page.locator(".notfound h1")).to_have_text("404")
    expect(o.page.locator("#replicas")).to_have_count(0)


def test_a_stalled_rollout_shows_as_a_warning_is_rolled_back_and_the_service_deleted(
    admin_tab: Tab, cluster: Cluster, services: list[str]
) -> None:
    cluster.require_api(*ROUTES)
    # Revision 1 serves (a real HTTP server on its $PORT answers the health path) and completes its rollout.
    serve = ["sh", "-c", f"exec {PYTHON} -m http.server $PORT --bind 0.0.0.0"]
    name = str(_create(cluster, cluster.admin_token, services, command=serve, health_path="/", gpus=0)["name"])

    def shown() -> dict[str, Any]:
        return dict(cluster.api("GET", f"/services/{name}").json())

    wait_for(lambda: shown()["rollout"]["state"] == "complete" and shown()["ready"] == 1, 90, "revision 1 rolled out")
    page = admin_tab.page
    admin_tab.goto("/")
    page.click("#nav a[data-nav=services]")
    page.locator(f"a[data-service='{name}']").click()
    page.wait_for_url(re.compile(rf"/services/{name}$"))
    expect(page.locator("#rollout-state [data-rollout]")).to_have_text("complete")
    expect(page.locator("#summary [data-ready]")).to_have_text("1 / 1")
    expect(page.locator("#replicas tbody tr").first).to_contain_text("ready")
    expect(page.locator("#rollback")).to_be_disabled()

    # Revision 2 never gets ready: after its progress deadline the rollout stalls and revision 1 keeps serving.
    r = cluster.api("PATCH", f"/services/{name}", json={"command": ["sleep", "3600"], "progress_deadline_s": 1})
    assert r.status_code == 200, r.text
    expect(page.locator("#rollout-state [data-rollout]")).to_have_text("stalled", timeout=60_000)
    expect(page.locator("#rollout")).to_have_class(re.compile(r"\bstalled\b"))
    expect(page.locator("#rollout [data-rollout-message]")).to_contain_text("not ready")
    assert page.locator("#rollout").evaluate("el => getComputedStyle(el).borderLeftColor") == "rgb(178, 92, 0)"
    expect(page.locator("#revisions tbody tr")).to_have_count(2)
    admin_tab.shot("service-stalled")

    page.once("dialog", lambda d: d.accept())
    page.click("#rollback")
    expect(page.locator("#toast")).to_contain_text("rolling back to revision 1")
    wait_for(lambda: shown()["revision"] == 1, 10, "rolled back to revision 1")
    expect(page.locator("#rollout-state [data-rollout]")).to_have_text(re.compile(r"^(progressing|complete)$"))

    page.once("dialog", lambda d: d.accept())
    page.click("#delete")
    page.wait_for_url(re.compile(r"/services$"))
    _wait_gone(cluster, name)
    expect(page.locator(f"a[data-service='{name}']")).to_have_count(0, timeout=10_000)
