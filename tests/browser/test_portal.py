"""The portal in a real browser: login, fleet, submit and watch a job, cancel, nodes/GPUs, admin, tenancy, errors."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from e2e.conftest import wait_for

from .conftest import EXPECTED_404, Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]
Tabs = Callable[[], Tab]


def _state(tab: Tab) -> str:
    return tab.page.inner_text("#state").strip()


def test_login_rejects_a_bad_token_inline_then_logs_in_and_out(tabs: Tabs, cluster: Cluster) -> None:
    t = tabs()
    t.goto("/jobs")
    t.page.wait_for_url(re.compile(r"/login\?next=%2Fjobs"))
    t.shot("login")
    t.allowed.append(re.compile(r"status of 401"))  # the failed login answers 401, which chromium logs
    t.page.fill("#token-login input[name=token]", "crl_not-a-real-token")
    t.page.click("#token-login button[type=submit]")
    expect(t.page.locator("#token-login .field-error[data-for=token], #token-login .form-error")).to_contain_text(
        ["invalid or revoked token"]
    )
    t.page.fill("#token-login input[name=token]", cluster.admin_token)
    t.page.click("#token-login button[type=submit]")
    t.page.wait_for_url(re.compile(r"/jobs$"))  # back where the user wanted to go
    expect(t.page.locator("#who")).to_contain_text("admin")
    t.page.click("#logout")
    t.page.wait_for_url(re.compile(r"/login"))
    t.goto("/")
    t.page.wait_for_url(re.compile(r"/login\?next="))  # the session is gone, not just hidden


def test_fleet_shows_both_nodes_gpus_by_model(admin_tab: Tab) -> None:
    page = admin_tab.page
    admin_tab.goto("/")
    expect(page.locator("[data-stat=GPUs] .stat")).to_contain_text("12")
    table = page.locator("#by-model")
    expect(table).to_contain_text("H100-80GB")
    expect(table).to_contain_text("A100-80GB")
    expect(page.locator("[data-stat=Free] .stat")).to_contain_text(re.compile(r"\d"))
    admin_tab.shot("fleet")


def test_submit_from_form_pending_running_succeeded_with_streaming_logs_and_cancel_another(
    admin_tab: Tab, cluster: Cluster
) -> None:
    page = admin_tab.page
    gate = cluster.shared / f"go-{uuid.uuid4().hex[:8]}"  # where the job (its own user) can see it
    # A blocker holds all 8 H100s, so the job from the form must wait: PENDING is observable, not a race.
    blocker = cluster.api(
        "POST", "/jobs", json={"command": ["sleep", "300"], "gpus": 8, "gpu_model": "H100", "name": "blocker"}
    ).json()["id"]
    wait_for(lambda: cluster.api("GET", f"/jobs/{blocker}").json()["state"] == "RUNNING", 30, "blocker running")

    admin_tab.goto("/submit")
    page.fill(
        "input[name=command]", f"sh -c 'echo first-line; while [ ! -e {gate} ]; do sleep 0.2; done; echo second-line'"
    )
    page.fill("input[name=name]", "from-the-form")
    page.fill("input[name=gpus]", "2")
    page.fill("input[name=gpu_model]", "H100")
    page.fill("textarea[name=env]", "GREETING=hello")
    page.fill("input[name=time_limit_s]", "600")
    admin_tab.shot("submit")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator("#state")).to_have_text("PENDING")
    expect(page.locator("#info")).to_contain_text("2 × H100")

    # The queue view lists it with a position and a reason.
    queue = admin_tab.sibling()
    queue.goto("/jobs")
    row = queue.page.locator("#list tr", has=queue.page.locator(f"a[href='/jobs/{job_id}']"))
    expect(row).to_contain_text("from-the-form")
    queue.shot("jobs")

    # Cancel the blocker from its own page; the form's job then runs.
    queue.goto(f"/jobs/{blocker}")
    expect(queue.page.locator("#state")).to_have_text("RUNNING")
    queue.page.click("#cancel")
    expect(queue.page.locator("#state")).to_have_text("CANCELLED", timeout=30_000)

    expect(page.locator("#state")).to_have_text("RUNNING", timeout=30_000)
    expect(page.locator("#logs")).to_contain_text("first-line", timeout=30_000)
    assert "second-line" not in page.inner_text("#logs")  # it cannot have been printed yet: the gate is closed
    expect(page.locator("#gpus a")).to_have_count(2)
    admin_tab.shot("job")
    gate.touch()
    expect(page.locator("#state")).to_have_text("SUCCEEDED", timeout=30_000)
    expect(page.locator("#logs")).to_contain_text("second-line", timeout=30_000)
    expect(page.locator("#timeline li")).not_to_have_count(0)
    expect(page.locator("#cancel")).to_be_disabled()
    job = cluster.api("GET", f"/jobs/{job_id}").json()
    assert job["env"] == {"GREETING": "hello"} and job["time_limit_s"] == 600 and job["gpu_count"] == 2


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("gpus", "64", "largest node has 8"),  # only the API knows the fleet: checked there, shown here
        ("queue", "no-such-queue", "no queue 'no-such-queue'"),
        ("gpu_model", "B200", "no node has"),
    ],
)
def test_api_field_errors_show_inline(admin_tab: Tab, field: str, value: str, message: str) -> None:
    page = admin_tab.page
    admin_tab.allowed.append(re.compile(r"status of 400"))
    admin_tab.goto("/submit")
    page.fill("input[name=command]", "true")
    page.fill(f"[name={field}]", value)
    if field == "gpu_model":
        page.fill("input[name=gpus]", "1")
    page.click("#submit-form button[type=submit]")
    expect(page.locator(f".field-error[data-for={field}]")).to_contain_text(message)
    expect(page.locator(f"[name={field}]")).to_have_attribute("aria-invalid", "true")
    assert page.url.endswith("/submit")


def test_form_checks_like_the_api_before_sending(admin_tab: Tab) -> None:
    page = admin_tab.page
    admin_tab.goto("/submit")
    page.fill("input[name=workdir]", "relative/path")
    page.fill("input[name=priority]", "5000")
    page.fill("textarea[name=env]", "1BAD=x")
    page.click("#submit-form button[type=submit]")
    expect(page.locator(".field-error[data-for=command]")).to_contain_text("required")
    expect(page.locator(".field-error[data-for=workdir]")).to_contain_text("absolute")
    expect(page.locator(".field-error[data-for=priority]")).to_contain_text("1000")
    expect(page.locator(".field-error[data-for=env]")).to_contain_text("1BAD")


def test_expired_session_goes_to_login_and_keeps_the_draft(admin_tab: Tab, cluster: Cluster) -> None:
    page = admin_tab.page
    admin_tab.allowed.append(re.compile(r"status of 401"))
    admin_tab.goto("/submit")
    page.fill("input[name=command]", "python train.py --epochs 3")
    page.fill("input[name=name]", "draft-kept")
    page.fill("input[name=gpus]", "1")
    admin_tab.context.clear_cookies()  # the session is gone, as after expiry
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r"/login\?next=%2Fsubmit"))
    page.fill("#token-login input[name=token]", cluster.admin_token)
    page.click("#token-login button[type=submit]")
    page.wait_for_url(re.compile(r"/submit$"))
    expect(page.locator("input[name=command]")).to_have_value("python train.py --epochs 3")
    expect(page.locator("input[name=name]")).to_have_value("draft-kept")
    expect(page.locator("input[name=gpus]")).to_have_value("1")


def test_node_page_gpu_cards_topology_and_gpu_page(admin_tab: Tab) -> None:
    page = admin_tab.page
    admin_tab.goto("/nodes")
    expect(page.locator("#nodes tbody tr")).to_have_count(2)
    admin_tab.shot("nodes")
    page.click("a[href='/nodes/node-b']")
    page.wait_for_url(re.compile(r"/nodes/node-b$"))
    expect(page.locator("#gpus .gpu-card")).to_have_count(4)
    expect(page.locator("table[data-topology] tbody tr")).to_have_count(4)
    expect(page.locator("table[data-topology] td.X")).to_have_count(4)
    admin_tab.shot("node")
    page.click("#gpus a[href='/gpus/node-b/2']")
    page.wait_for_url(re.compile(r"/gpus/node-b/2$"))
    expect(page.locator("#info")).to_contain_text("A100-80GB")
    expect(page.locator("[data-chart=util]")).to_be_visible()
    admin_tab.shot("gpu")


def test_node_and_gpu_graphs_have_data(admin_tab: Tab, cluster: Cluster) -> None:
    cluster.require_api("/api/v1/metrics/series")
    page = admin_tab.page
    admin_tab.goto("/nodes/node-a")
    for chart in ("cpu", "mem"):
        wait_for(
            lambda: int(page.get_attribute(f"[data-chart={chart}] svg", "data-points") or 0) > 0,
            60,
            f"{chart} graph has points",
        )
    admin_tab.goto("/gpus/node-a/0")
    wait_for(
        lambda: int(page.get_attribute("[data-chart=util] svg", "data-points") or 0) > 0, 60, "GPU graph has points"
    )
    page.hover("[data-chart=util] svg")
    expect(page.locator("[data-chart=util] .tip")).to_contain_text("%")
    # Drag across the graph to zoom into that stretch; double-click to go back to the rolling range.
    box = page.locator("[data-chart=util] svg").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    expect(page.locator(".range [data-reset]")).to_be_visible()
    expect(page.locator(".range [data-label]")).to_contain_text("–")
    page.dblclick("[data-chart=util] svg")
    expect(page.locator(".range [data-reset]")).to_be_hidden()
    page.click(".range button[data-s='900']")
    expect(page.locator(".range button.on")).to_have_text("15m")


def test_admin_cordons_and_enables_a_node(admin_tab: Tab, cluster: Cluster) -> None:
    cluster.require_api("/api/v1/nodes/{name}/cordon")
    page = admin_tab.page
    admin_tab.goto("/nodes/node-b")
    page.click("#actions button[data-action=cordon]")
    expect(page.locator("[data-cordoned]")).to_be_visible()
    assert cluster.api("GET", "/nodes/node-b").json()["cordoned"] is True
    page.click("#actions button[data-action=uncordon]")
    expect(page.locator("[data-cordoned]")).to_have_count(0)
    assert cluster.api("GET", "/nodes/node-b").json()["cordoned"] is False


def test_admin_creates_tenant_user_quota_and_the_user_sees_only_its_tenant(tabs: Tabs, cluster: Cluster) -> None:
    admin = tabs()
    admin.login_with_token(cluster.admin_token)
    page = admin.page
    admin.goto("/admin")
    page.fill("#tenant-form input[name=name]", "vision")
    page.click("#tenant-form button[type=submit]")
    expect(page.locator("#tenants")).to_contain_text("vision")
    page.fill("#user-form input[name=name]", "alice")
    page.select_option("#user-form select[name=role]", "member")
    page.select_option("#user-form select[name=tenant]", "vision")
    page.fill("#user-form input[name=password]", "correct horse")
    page.click("#user-form button[type=submit]")
    expect(page.locator("#users")).to_contain_text("alice")
    page.select_option("#quota-form select[name=tenant]", "vision")
    page.fill("#quota-form input[name=gpu_model]", "H100")
    page.fill("#quota-form input[name=guaranteed_gpus]", "2")
    page.fill("#quota-form input[name=max_gpus]", "4")
    page.click("#quota-form button[type=submit]")
    expect(page.locator("#quotas")).to_contain_text("vision")
    cluster.require_api("/api/v1/audit")  # the trail lists what the admin just did, live
    for action in ("tenant.create", "user.create", "quota.set"):
        expect(page.locator("#audit")).to_contain_text(action, timeout=15_000)
    admin.shot("admin")
    quotas = cluster.api("GET", "/quotas", params={"tenant": "vision"}).json()
    assert quotas == [{"tenant": "vision", "gpu_model": "H100", "guaranteed_gpus": 2, "max_gpus": 4}]

    theirs = cluster.api("POST", "/jobs", json={"command": ["true"], "name": "admins-job"}).json()["id"]
    alice = tabs()
    alice.login_with_password("alice", "correct horse")
    alice.goto("/submit")
    alice.page.fill("input[name=command]", "echo from-alice")
    alice.page.fill("input[name=name]", "alices-job")
    alice.page.click("#submit-form button[type=submit]")
    alice.page.wait_for_url(re.compile(r"/jobs/\d+$"))
    mine = int(alice.page.url.rsplit("/", 1)[1])
    alice.goto("/jobs")
    alice.page.click(".tabs button[data-tab=history]")
    expect(alice.page.locator("#list")).to_contain_text("alices-job")
    expect(alice.page.locator(f"#list a[href='/jobs/{mine}']")).to_have_count(1)
    rows = alice.page.locator("#list tbody tr")
    assert all("vision" in r for r in rows.all_inner_texts()), rows.all_inner_texts()
    expect(alice.page.locator(f"#list a[href='/jobs/{theirs}']")).to_have_count(0)
    expect(alice.page.locator("#nav a[data-nav=admin]")).to_be_hidden()

    # Guessing the admin's job URL gives the 404 page, not the job.
    alice.allowed.append(EXPECTED_404)
    alice.goto(f"/jobs/{theirs}")
    expect(alice.page.locator(".notfound h1")).to_have_text("404")
    assert "admins-job" not in alice.page.inner_text("main")
    alice.shot("not-found")


def test_alert_rule_created_in_the_ui_fires_and_shows(admin_tab: Tab, cluster: Cluster) -> None:
    cluster.require_api("/api/v1/alert-rules", "/api/v1/alerts")
    page = admin_tab.page
    admin_tab.goto("/alerts")
    page.fill("#rule-form input[name=name]", "browser-test-hot")
    page.fill("#rule-form input[name=metric]", "gpu_temperature_c")
    page.select_option("#rule-form select[name=op]", ">")
    page.fill("#rule-form input[name=threshold]", "-1000")
    page.fill("#rule-form input[name=for_s]", "0")
    page.click("#rule-form button[type=submit]")
    expect(page.locator("#rules")).to_contain_text("browser-test-hot")
    expect(page.locator("#firing")).to_contain_text("browser-test-hot", timeout=90_000)
    page.fill("#silence-form input[name=matchers]", '{"node": "node-b"}')
    page.fill("#silence-form input[name=comment]", "maintenance window")
    admin_tab.allowed.append(re.compile(r"status of 400"))
    page.fill("#silence-form input[name=until]", "2099-01-01T00:00:00Z")  # longer than the API allows
    page.click("#silence-form button[type=submit]")
    expect(page.locator("#silence-form .field-error[data-for=until]")).to_contain_text("at most")
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    page.fill("#silence-form input[name=until]", tomorrow)
    page.click("#silence-form button[type=submit]")
    expect(page.locator("#silences")).to_contain_text("maintenance window")
    admin_tab.shot("alerts")
    admin_tab.goto("/")
    expect(page.locator("#alerts")).to_contain_text("browser-test-hot")


def test_reports_page(admin_tab: Tab, cluster: Cluster) -> None:
    cluster.require_api("/api/v1/reports/usage")
    page = admin_tab.page
    admin_tab.goto("/reports")
    page.select_option("#report-form select[name=group_by]", "tenant")
    page.click("#report-form button[type=submit]")
    expect(page.locator("#table")).to_contain_text("default")
    assert "format=csv" in (page.get_attribute("#csv", "href") or "")
    admin_tab.shot("reports")


def test_every_page_renders_without_console_errors(admin_tab: Tab) -> None:
    pages = {
        "/": "#by-model table",
        "/nodes": "#nodes table",
        "/nodes/node-a": "#gpus .gpu-card",
        "/gpus/node-a/0": "#info table",
        "/jobs": "#list table",
        "/submit": "#submit-form",
        "/alerts": "h1",
        "/admin": "#tokens table",
        "/reports": "h1",
        "/schedules": "#list table",
    }
    for path, ready in pages.items():
        admin_tab.goto(path)
        expect(admin_tab.page.locator(ready).first).to_be_visible()
        expect(admin_tab.page.locator(".page-error")).to_have_count(0)
        admin_tab.shot("page" + (path.replace("/", "-") if path != "/" else "-fleet"))


# ---- the pages' pure helpers, run in the browser as the pages run them -----------------------------------
SPLIT_CASES = [
    ("plain words", "python train.py --epochs 3", ["python", "train.py", "--epochs", "3"]),
    ("single quotes group", "sh -c 'echo a b'", ["sh", "-c", "echo a b"]),
    ("double quotes and escapes", 'echo "say \\"hi\\"" x\\ y', ["echo", 'say "hi"', "x y"]),
    ("empty quotes are a word", "prog '' end", ["prog", "", "end"]),
    ("surrounding blanks", "  a   b  ", ["a", "b"]),
]


@pytest.mark.parametrize("name,text,argv", SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
def test_submit_form_splits_commands_like_a_shell(admin_tab: Tab, name: str, text: str, argv: list[str]) -> None:
    admin_tab.goto("/submit")
    got = admin_tab.page.evaluate("async (t) => (await import('/static/pages/submit.js')).splitCommand(t)", text)
    assert got == argv, name


BODY_CASES = [
    ("defaults left to the API", {"command": "true"}, {"command": ["true"], "env": {}}, []),
    (
        "numbers parsed",
        {"command": "x", "gpus": "2", "priority": "-3"},
        {"command": ["x"], "gpus": 2, "priority": -3, "env": {}},
        [],
    ),
    ("env lines", {"command": "x", "env": "A=1\nB=x=y\n"}, {"command": ["x"], "env": {"A": "1", "B": "x=y"}}, []),
    ("gpus out of range", {"command": "x", "gpus": "2000"}, None, ["gpus"]),
    ("fraction out of range", {"command": "x", "gpu_milli": "0"}, None, ["gpu_milli"]),
    ("not a whole number", {"command": "x", "memory_mib": "1.5"}, None, ["memory_mib"]),
    ("relative workdir", {"command": "x", "workdir": "data"}, None, ["workdir"]),
    ("bad env name", {"command": "x", "env": "9X=1"}, None, ["env"]),
    ("env line without =", {"command": "x", "env": "JUSTTEXT"}, None, ["env"]),
    ("missing command", {"command": "  "}, None, ["command"]),
    ("unterminated quote", {"command": "echo 'oops"}, None, ["command"]),
]


@pytest.mark.parametrize("name,values,body,fields", BODY_CASES, ids=[c[0] for c in BODY_CASES])
def test_submit_form_checks_fields_like_the_api(
    admin_tab: Tab, name: str, values: dict[str, str], body: dict[str, Any] | None, fields: list[str]
) -> None:
    admin_tab.goto("/submit")
    got = admin_tab.page.evaluate("async (v) => (await import('/static/pages/submit.js')).buildBody(v)", values)
    assert [f for f, _ in got["errors"]] == fields, name
    if body is not None:
        assert got["body"] == body, name


def test_topology_matrix_cells(admin_tab: Tab) -> None:
    admin_tab.goto("/nodes")
    gpus = [
        {"index": 0, "nvlink_peers": [1], "numa_node": 0, "pci_bus_id": "a"},
        {"index": 1, "nvlink_peers": [0], "numa_node": 0, "pci_bus_id": "b"},
        {"index": 2, "nvlink_peers": [], "numa_node": 0, "pci_bus_id": "c"},
        {"index": 3, "nvlink_peers": [], "numa_node": 1, "pci_bus_id": "d"},
    ]
    cells = admin_tab.page.evaluate(
        """async (gpus) => {
        const div = document.createElement('div');
        div.innerHTML = (await import('/static/pages/nodes.js')).topology(gpus);
        return [...div.querySelectorAll('tbody tr')].map((tr) => [...tr.querySelectorAll('td')].slice(0, 4).map((td) => td.textContent));
    }""",
        gpus,
    )
    assert cells == [
        ["X", "NV", "NODE", "SYS"],
        ["NV", "X", "NODE", "SYS"],
        ["NODE", "NODE", "X", "SYS"],
        ["SYS", "SYS", "SYS", "X"],
    ]
