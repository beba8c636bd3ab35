"""The portal in a real browser, second part: usage reports and CSV, a job's web UI through the proxy, GPU
disable/enable and node drain by an admin, the scheduler's queue position and ETA, the fleet's server-side
averages and GPU counts."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.conftest import wait_for

from .conftest import Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]


def _needs(cluster: Cluster, *paths: str) -> None:
    cluster.require_api(*paths)  # a shipped route missing from the OpenAPI fails, never skips


@pytest.fixture
def cleanup(cluster: Cluster) -> Iterator[list[int]]:
    """Jobs to cancel after the test, whatever happened, so the next test finds the GPUs free."""
    jobs: list[int] = []
    yield jobs
    for job in jobs:
        cluster.api("POST", f"/jobs/{job}/cancel")
    cluster.wait_ended(*jobs, timeout_s=30)


def _tenant_member_token(cluster: Cluster, tenant: str) -> str:
    assert cluster.api("POST", "/tenants", json={"name": tenant}).status_code == 201
    user = f"{tenant}-user"
    r = cluster.api(
        "POST", "/users", json={"name": user, "role": "member", "tenant": tenant, "password": "pw-" + tenant}
    )
    assert r.status_code == 201, r.text
    r = cluster.api("POST", "/login", json={"username": user, "password": "pw-" + tenant})
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def test_reports_chart_table_and_csv_export_for_a_job_that_ran(admin_tab: Tab, cluster: Cluster) -> None:
    _needs(cluster, "/api/v1/reports/usage")
    # A tenant of its own, so its row holds exactly this one job whatever else the server ran.
    tenant = f"rep-{uuid.uuid4().hex[:6]}"
    token = _tenant_member_token(cluster, tenant)
    job = cluster.submit_job(token, command=["sleep", "2"], gpus=2, gpu_model="H100", name="reported")
    wait_for(lambda: cluster.job_state(job) == "SUCCEEDED", 60, "the reported job ran")

    page = admin_tab.page
    admin_tab.goto("/reports")
    page.select_option("#report-form select[name=group_by]", "tenant")
    row = page.locator("#table tbody tr", has=page.locator(f"[data-key='{tenant}']"))
    expect(row).to_have_count(1)
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == tenant and cells[2] == "1", cells  # one job
    assert float(cells[1]) > 0, cells  # GPU-hours of 2 GPUs for ~2 s: small, but not zero
    chart = page.locator("#hours svg")
    expect(chart.locator("rect title", has_text=f"{tenant}:")).to_have_count(1)
    assert int(chart.get_attribute("data-points") or 0) == page.locator("#table tbody tr").count()  # a bar per row
    expect(page.locator("#util svg")).to_be_visible()
    admin_tab.shot("reports-tenant")

    # Export follows the chosen grouping; the browser downloads it with the session cookie.
    for group, key in (("tenant", tenant), ("user", f"{tenant}-user")):
        page.select_option("#report-form select[name=group_by]", group)
        expect(page.locator("#table thead th").first).to_have_text(group)
        expect(page.locator(f"#table [data-key='{key}']")).to_have_count(1)
        with page.expect_download() as download:
            page.click("#csv")
        lines = Path(download.value.path()).read_text().splitlines()
        assert lines[0] == f"{group},gpu_hours,jobs,avg_util_pct,cost", lines[:2]
        mine = [line.split(",") for line in lines[1:] if line.split(",")[0] == key]
        assert len(mine) == 1 and mine[0][2] == "1" and float(mine[0][1]) > 0, lines
    admin_tab.shot("reports-user")


def test_job_web_ui_opens_through_the_proxy_with_the_session(
    admin_tab: Tab, cluster: Cluster, tmp_path: Path, cleanup: list[int]
) -> None:
    _needs(cluster, "/api/v1/jobs")
    marker = f"served by job {uuid.uuid4().hex[:8]}"
    site = cluster.shared / f"site-{uuid.uuid4().hex[:8]}"  # the job runs as its user: not in root's tmp_path
    site.mkdir(mode=0o755)
    (site / "index.html").write_text(f'<!doctype html><link rel="icon" href="data:,"><h1 id="hello">{marker}</h1>')
    job = cluster.submit_job(
        command=["sh", "-c", "exec python3 -m http.server $CORRAL_JOB_PORT --bind 127.0.0.1"],
        web_ui=True,
        workdir=str(site),
        name="web-ui",
    )
    cleanup.append(job)

    page = admin_tab.page
    admin_tab.goto(f"/jobs/{job}")
    link = page.locator("#open-webui")
    expect(link).to_have_attribute("href", f"{cluster.ui_url}/proxy/jobs/{job}/", timeout=30_000)
    # The link shows as soon as the job runs; its server may take a moment more to listen (the proxy says 409).
    wait_for(
        lambda: admin_tab.context.request.get(f"{cluster.ui_url}/proxy/jobs/{job}/").status == 200,
        30,
        "the job's server answers through the proxy",
    )
    with admin_tab.context.expect_page() as opened:
        link.click()
    web = opened.value
    web.on("console", lambda m: admin_tab.errors.append(f"{web.url}: {m.text}") if m.type == "error" else None)
    expect(web.locator("#hello")).to_have_text(marker)
    assert web.url == f"{cluster.ui_url}/proxy/jobs/{job}/"  # the session cookie carried over to its own origin
    admin_tab.shot("job-web-ui")

    # Once the job stops, the page no longer offers the link.
    page.click("#cancel")
    expect(page.locator("#state")).to_have_text("CANCELLED", timeout=30_000)
    expect(page.locator("#open-webui")).to_have_count(0)


def test_admin_disables_and_enables_a_gpu(admin_tab: Tab, cluster: Cluster) -> None:
    _needs(cluster, "/api/v1/gpus/{node}/{index}/disable", "/api/v1/gpus/{node}/{index}/enable")
    page = admin_tab.page

    def health() -> str:
        gpus = cluster.api("GET", "/gpus", params={"node": "node-b"}).json()
        return str(next(g for g in gpus if g["index"] == 3)["health"])

    admin_tab.goto("/gpus/node-b/3")
    expect(page.locator("#info [data-health]")).to_have_attribute("data-health", "HEALTHY")
    expect(page.locator("#actions button[data-action=enable]")).to_be_disabled()
    try:
        page.click("#actions button[data-action=disable]")
        expect(page.locator("#info [data-health]")).to_have_attribute("data-health", "DISABLED")
        assert health() == "DISABLED"
        expect(page.locator("#actions button[data-action=disable]")).to_be_disabled()
        expect(page.locator("#events")).to_contain_text("disabled")
        admin_tab.goto("/nodes/node-b")  # the node's card says so too
        expect(page.locator("#gpus .gpu-card[data-gpu='3']")).to_contain_text("disabled")
        admin_tab.goto("/gpus/node-b/3")
        page.click("#actions button[data-action=enable]")
        expect(page.locator("#info [data-health]")).to_have_attribute("data-health", "HEALTHY")
        assert health() == "HEALTHY"
    finally:
        cluster.api("POST", "/gpus/node-b/3/enable")


def test_admin_drains_a_node_its_job_is_requeued_then_enables_it(
    admin_tab: Tab, cluster: Cluster, cleanup: list[int]
) -> None:
    _needs(cluster, "/api/v1/nodes/{name}/drain", "/api/v1/nodes/{name}/uncordon")
    job = cluster.submit_job(command=["sleep", "300"], gpus=1, gpu_model="A100", name="to-drain")
    cleanup.append(job)
    wait_for(lambda: cluster.job_state(job) == "RUNNING", 30, "the job runs on node-b")

    page = admin_tab.page
    admin_tab.goto("/nodes/node-b")
    expect(page.locator("#jobs")).to_contain_text(f"#{job}")
    try:
        page.once("dialog", lambda d: d.accept())  # drain asks first
        page.click("#actions button[data-action=drain]")
        expect(page.locator("[data-cordoned]")).to_be_visible()
        expect(page.locator("#actions button[data-action=cordon]")).to_be_disabled()
        expect(page.locator("#events")).to_contain_text("drained")
        expect(page.locator("#jobs")).not_to_contain_text(f"#{job}", timeout=30_000)
        assert cluster.api("GET", "/nodes/node-b").json()["cordoned"] is True
        assert cluster.job_state(job) == "PENDING"  # back in the queue; node-b is the only A100 node
        admin_tab.shot("node-drained")
        page.click("#actions button[data-action=uncordon]")
        expect(page.locator("[data-cordoned]")).to_have_count(0)
        expect(page.locator("#actions button[data-action=uncordon]")).to_be_disabled()
        assert cluster.api("GET", "/nodes/node-b").json()["cordoned"] is False
    finally:
        cluster.api("POST", "/nodes/node-b/uncordon")  # restored for the next tests, even after a failure


def test_declining_the_drain_question_changes_nothing(admin_tab: Tab, cluster: Cluster) -> None:
    _needs(cluster, "/api/v1/nodes/{name}/drain")
    page = admin_tab.page
    admin_tab.goto("/nodes/node-b")
    expect(page.locator("#summary")).to_contain_text("GPUs free")
    page.once("dialog", lambda d: d.dismiss())
    page.click("#actions button[data-action=drain]")
    expect(page.locator("[data-cordoned]")).to_have_count(0)
    assert cluster.api("GET", "/nodes/node-b").json()["cordoned"] is False


def test_queue_shows_the_schedulers_position_and_eta(admin_tab: Tab, cluster: Cluster, cleanup: list[int]) -> None:
    # All four A100s held for at most 10 minutes: the waiting job's ETA is when that time limit runs out.
    holder = cluster.submit_job(command=["sleep", "600"], gpus=4, gpu_model="A100", time_limit_s=600, name="holder")
    cleanup.append(holder)
    wait_for(lambda: cluster.job_state(holder) == "RUNNING", 30, "the holder runs")
    waiting = cluster.submit_job(command=["true"], gpus=4, gpu_model="A100", name="waits-for-a100")
    cleanup.append(waiting)
    shown = wait_for(
        lambda: (j := cluster.api("GET", f"/jobs/{waiting}").json())["eta"] and j,
        30,
        "the scheduler gave the waiting job an ETA",
    )

    page = admin_tab.page
    admin_tab.goto("/jobs")
    row = page.locator("#list tr", has=page.locator(f"a[href='/jobs/{waiting}']"))
    expect(row.locator("[data-position]")).to_have_attribute("data-position", str(shown["queue_position"]))
    expect(row.locator("[data-position]")).to_have_text(str(shown["queue_position"] + 1))
    expect(row.locator("[data-eta]")).to_have_attribute("data-eta", re.compile(re.escape(shown["eta"][:19])))
    expect(row.locator("[data-eta]")).to_have_text(re.compile(r"^~(9|10)m"))  # 600 s limit, just started
    # The scheduler's one plain sentence, shown as it comes: how many GPUs, none free, what frees the next ones.
    reason = shown["pending_reason"]
    assert reason.startswith("waiting for 4 free A100") and f"when job {holder} reaches its time limit" in reason
    expect(row).to_contain_text(reason)
    admin_tab.shot("jobs-queue-eta")

    admin_tab.goto(f"/jobs/{waiting}")
    expect(page.locator("#info")).to_contain_text(f"#{shown['queue_position'] + 1}, starts in ~")


def test_fleet_counts_models_from_the_nodes_and_mixed_nodes_gpu_by_gpu(admin_tab: Tab) -> None:
    admin_tab.goto("/nodes")
    node = lambda name, pool, models, total, free, bad: {  # noqa: E731
        "name": name,
        "labels": {"pool": pool} if pool else {},
        "gpu_models": models,
        "gpus_total": total,
        "gpus_free": free,
        "gpus_unhealthy": bad,
    }
    nodes = [
        node("a", "p1", ["H100"], 8, 5, 1),
        node("b", "p1", ["H100"], 8, 8, 0),
        node("m", None, ["A100", "V100"], 3, 1, 1),
    ]
    gpu = lambda n, model, healthy, job: {"node": n, "model": model, "healthy": healthy, "job_id": job, "used_milli": 0}  # noqa: E731
    gpus = [
        gpu("m", "A100", True, 7),
        gpu("m", "A100", False, None),
        gpu("m", "V100", True, None),
        gpu("a", "H100", True, None),
    ]  # a single-model node's GPUs are not counted twice
    got = admin_tab.page.evaluate(
        """async ([nodes, gpus]) =>
        Object.fromEntries((await import('/static/pages/fleet.js')).summarise(nodes, gpus))""",
        [nodes, gpus],
    )
    assert got == {
        "pool:p1": {"total": 16, "used": 2, "free": 13, "unhealthy": 1},
        "model:H100": {"total": 16, "used": 2, "free": 13, "unhealthy": 1},
        "pool:—": {"total": 3, "used": 1, "free": 1, "unhealthy": 1},
        "model:A100": {"total": 2, "used": 1, "free": 0, "unhealthy": 1},
        "model:V100": {"total": 1, "used": 0, "free": 1, "unhealthy": 0},
    }


def test_fleet_utilisation_is_one_series_averaged_by_the_server(admin_tab: Tab, cluster: Cluster) -> None:
    _needs(cluster, "/api/v1/metrics/series")
    page = admin_tab.page
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/metrics/series" in r.url else None)
    admin_tab.goto("/")
    chart = "[data-chart=fleet-util] svg"
    wait_for(lambda: int(page.get_attribute(chart, "data-points") or 0) > 0, 60, "the fleet graph has points")
    assert asked and all("agg=avg" in u and "node=" not in u and "gpu=" not in u for u in asked), asked
    page.hover(chart)
    expect(page.locator("[data-chart=fleet-util] .tip")).to_contain_text("%")
