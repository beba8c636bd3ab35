"""The portal reads at a glance (issue 14): the jobs page's selected tab stands out and its history has GPUs,
duration and a server-side filter; the submit form's hints never read as values; alert rules and silences are made
from fields, not JSON, and a pending alert of a job that ended leaves no row; an unknown URL is the portal's 404
page; the navigation hides while logged out; report bars carry their values; every page fits a phone's width.
Every page is photographed at desktop and phone width (artifacts/screenshots/PAGE-desktop.png, PAGE-phone.png)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import httpx
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
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1300, "height": 900}


@pytest.fixture
def cleanup(cluster: Cluster) -> Iterator[list[int]]:
    """Jobs to cancel after the test, whatever happened, so the next test finds the GPUs free."""
    jobs: list[int] = []
    yield jobs
    for job in jobs:
        cluster.api("POST", f"/jobs/{job}/cancel")
    cluster.wait_ended(*jobs, timeout_s=60)


def _member_token(cluster: Cluster, tenant: str, user: str) -> str:
    """A member `user` of a new `tenant`, with an API token the admin made for it."""
    assert cluster.api("POST", "/tenants", json={"name": tenant}).status_code == 201
    r = cluster.api("POST", "/users", json={"name": user, "role": "member", "tenant": tenant})
    assert r.status_code == 201, r.text
    r = cluster.api("POST", "/tokens", json={"name": "t", "user": user})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def _style(tab: Tab, selector: str, prop: str, pseudo: str | None = None) -> str:
    return str(
        tab.page.eval_on_selector(
            selector, "(el, [p, pseudo]) => getComputedStyle(el, pseudo).getPropertyValue(p)", [prop, pseudo]
        )
    )


def _rgb(css: str) -> tuple[float, ...]:
    """'rgb(1, 2, 3)' or 'rgba(1, 2, 3, 0.5)' -> (r, g, b, alpha)."""
    parts = [float(x) for x in re.findall(r"[\d.]+", css)]
    return tuple(parts[:3] + [parts[3] if len(parts) > 3 else 1.0])


def _luminance(css: str) -> float:
    r, g, b, alpha = _rgb(css)
    return 1.0 if alpha == 0 else (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


# ---- 1. the jobs page ---------------------------------------------------------------------------------------------
def test_jobs_tabs_mark_the_selected_one_and_only_it(admin_tab: Tab) -> None:
    page = admin_tab.page
    admin_tab.goto("/jobs")
    expect(page.locator("[role=tablist] [role=tab]")).to_have_count(3)
    for chosen in ("history", "running", "queue"):
        page.click(f".tabs button[data-tab={chosen}]")
        for tab in ("queue", "running", "history"):
            expect(page.locator(f".tabs button[data-tab={tab}]")).to_have_attribute(
                "aria-selected", "true" if tab == chosen else "false"
            )
        selected = f".tabs button[data-tab={chosen}]"
        others = [f".tabs button[data-tab={t}]" for t in ("queue", "running", "history") if t != chosen]
        # An unselected tab is not a filled button (a light, or no, background); the selected one is marked apart
        # from it by its weight and its underline.
        for other in others:
            assert _luminance(_style(admin_tab, other, "background-color")) > 0.85, other
            assert _style(admin_tab, other, "border-bottom-color") != _style(admin_tab, selected, "border-bottom-color")
            assert int(_style(admin_tab, selected, "font-weight")) > int(_style(admin_tab, other, "font-weight"))
    page.focus(".tabs button[data-tab=queue]")  # the keyboard moves along the tab list too
    page.keyboard.press("ArrowRight")
    expect(page.locator(".tabs button[data-tab=running]")).to_have_attribute("aria-selected", "true")
    expect(page.locator(".tabs button[data-tab=running]")).to_be_focused()
    admin_tab.shot("jobs-tabs")


def test_history_shows_gpus_and_duration_and_filters_on_the_server(
    admin_tab: Tab, cluster: Cluster, cleanup: list[int]
) -> None:
    tag = uuid.uuid4().hex[:6]
    tenant, user = f"hist-{tag}", f"hist-{tag}-user"
    token = _member_token(cluster, tenant, user)
    theirs = cluster.submit_job(token, command=["sleep", "2"], gpus=2, gpu_model="H100", name=f"{tag}-train")
    mine = cluster.submit_job(command=["false"], gpus=1, gpu_model="H100", name=f"{tag}-eval")
    cleanup += [theirs, mine]
    cluster.wait_ended(theirs, mine, timeout_s=60)

    page = admin_tab.page
    admin_tab.goto("/jobs")
    page.click(".tabs button[data-tab=history]")
    expect(page.locator("#history-filter")).to_be_visible()
    # The history table renders after its fetch: wait for its head, then read it.
    expect(page.locator("#list thead th", has_text="Duration")).to_have_count(1)
    expect(page.locator("#list tbody tr", has=page.locator(f"a[href='/jobs/{theirs}']"))).to_have_count(1)
    heads = page.locator("#list thead th").all_inner_texts()
    assert "GPUs" in heads and "Duration" in heads, heads
    row = page.locator("#list tbody tr", has=page.locator(f"a[href='/jobs/{theirs}']"))
    cells = dict(zip(heads, row.locator("td").all_inner_texts(), strict=True))
    assert cells["GPUs"].startswith("2"), cells
    assert re.fullmatch(r"[1-9]\d*s", cells["Duration"]), cells  # slept 2 s: a few seconds, not "—"

    # Each filter is a query parameter of the list API: the server filters, and its total is what is shown.
    with page.expect_request(lambda r: f"name={tag}" in r.url and "/api/v1/jobs?" in r.url):
        page.fill("#history-filter input[name=name]", tag)
    links = page.locator("#list tbody a[href^='/jobs/']")
    expect(links).to_have_count(2)
    expect(page.locator("#list [data-total]")).to_have_attribute("data-total", "2")  # the server's X-Total-Count
    page.fill("#history-filter input[name=tenant]", tenant)
    expect(links).to_have_count(1)
    expect(page.locator(f"#list a[href='/jobs/{theirs}']")).to_have_count(1)
    page.fill("#history-filter input[name=tenant]", "")
    page.fill("#history-filter input[name=user]", user)
    expect(links).to_have_count(1)
    expect(page.locator(f"#list a[href='/jobs/{theirs}']")).to_have_count(1)
    page.fill("#history-filter input[name=user]", "")
    with page.expect_request(lambda r: "state=FAILED" in r.url and f"name={tag}" in r.url):
        page.select_option("#history-filter select[name=state]", "FAILED")
    expect(links).to_have_count(1)
    expect(page.locator(f"#list a[href='/jobs/{mine}']")).to_have_count(1)
    page.fill("#history-filter input[name=name]", f"{tag}-nothing")
    expect(page.locator("#list")).to_contain_text("no job matches this filter")
    admin_tab.shot("jobs-history-filtered")
    page.click("#history-filter button[type=reset]")
    expect(page.locator("#list tbody a[href^='/jobs/']").first).to_be_visible()
    expect(page.locator("#history-filter select[name=state]")).to_have_value("")


# ---- 2. the submit form's hints -----------------------------------------------------------------------------------
def test_submit_hints_read_as_hints_never_as_values(admin_tab: Tab) -> None:
    page = admin_tab.page
    admin_tab.goto("/submit")
    expect(page.locator("#submit-form textarea[name=env]")).to_be_visible()
    hints = page.eval_on_selector_all(
        "#submit-form [placeholder]", "els => els.map(e => [e.name, e.getAttribute('placeholder'), e.value])"
    )
    assert len(hints) >= 14, hints
    for name, hint, value in hints:
        assert value == "", (name, value)  # nothing is filled in
        # A hint says it is one: an example ("e.g. ...") or what an empty field means ("empty: ..."), never a
        # bare value such as "0", "1000" or "NCCL_DEBUG=INFO".
        assert hint.startswith("e.g. ") or hint.startswith("empty: "), (name, hint)
    assert dict((n, h) for n, h, _ in hints)["env"] == "e.g. NCCL_DEBUG=INFO"
    # Drawn lighter than typed text, and in italics.
    for field in ("input[name=gpus]", "textarea[name=env]"):
        sel = f"#submit-form {field}"
        assert _style(admin_tab, sel, "font-style", "::placeholder") == "italic", field
        assert (
            _luminance(_style(admin_tab, sel, "color", "::placeholder"))
            > _luminance(_style(admin_tab, sel, "color")) + 0.3
        )
    page.fill("#submit-form input[name=gpus]", "2")
    assert _style(admin_tab, "#submit-form input[name=gpus]", "font-style") == "normal"  # a value is no hint
    admin_tab.shot("submit-hints")


# ---- 3. alerts: rules and silences from fields; a pending alert of a job that ended --------------------------------
def test_alert_rule_and_silence_from_fields_and_an_ended_jobs_pending_alert_leaves_no_row(
    admin_tab: Tab, cluster: Cluster, cleanup: list[int]
) -> None:
    cluster.require_api("/api/v1/alert-rules", "/api/v1/alerts", "/api/v1/silences")
    page = admin_tab.page
    admin_tab.goto("/alerts")
    for form in ("#rule-form", "#silence-form"):  # no JSON to type anywhere
        labels = page.locator(f"{form} label").all_inner_texts()
        assert not any("JSON" in text for text in labels), labels
        for field in ("node", "gpu", "job"):
            expect(page.locator(f"{form} input[name={field}]")).to_be_visible()

    # A silence from its fields: a node and a rule, for a chosen duration.
    page.fill("#silence-form input[name=alertname]", "gpu_temperature")
    page.fill("#silence-form input[name=node]", "node-b")
    page.select_option("#silence-form select[name=duration_s]", str(4 * 3600))
    page.fill("#silence-form input[name=comment]", "glance maintenance")
    page.click("#silence-form button[type=submit]")
    expect(page.locator("#silences")).to_contain_text("glance maintenance")
    silence = next(s for s in cluster.api("GET", "/silences").json() if s["comment"] == "glance maintenance")
    assert silence["matchers"] == 'alertname="gpu_temperature", node="node-b"', silence
    assert abs(silence["ends_at"] - silence["starts_at"] - 4 * 3600) < 5, silence
    # A GPU is an index: a word is refused on its field, before any request.
    page.fill("#silence-form input[name=gpu]", "first")
    page.click("#silence-form button[type=submit]")
    expect(page.locator("#silence-form .field-error[data-for=gpu]")).to_contain_text("GPU index")
    page.fill("#silence-form input[name=gpu]", "")

    # A rule from its fields, on one job: pending while the job runs (its for-duration is an hour).
    job = cluster.submit_job(command=["sleep", "300"], gpus=1, gpu_model="A100", name="glance-idle")
    cleanup.append(job)
    wait_for(lambda: cluster.job_state(job) == "RUNNING", 30, "the job runs")
    rule = f"glance-{uuid.uuid4().hex[:6]}"
    page.fill("#rule-form input[name=name]", rule)
    page.fill("#rule-form input[name=metric]", "job_gpu_utilization_percent")
    page.select_option("#rule-form select[name=op]", ">")
    page.fill("#rule-form input[name=threshold]", "-1")
    page.fill("#rule-form input[name=for_s]", "3600")
    page.fill("#rule-form input[name=job]", str(job))
    page.click("#rule-form button[type=submit]")
    row = page.locator("#rules tbody tr", has_text=rule)
    expect(row).to_contain_text(f'job="{job}"')
    pending = page.locator("#pending tbody tr", has_text=rule)
    expect(pending).to_have_count(1, timeout=60_000)
    expect(pending).to_contain_text(f"job={job}")
    admin_tab.shot("alerts-pending")

    cluster.api("POST", f"/jobs/{job}/cancel")
    cluster.wait_ended(job, timeout_s=60)
    expect(pending).to_have_count(0, timeout=30_000)  # the job ended: its alert is gone...
    history = cluster.api("GET", "/alerts", params={"history": "true", "limit": 1000}).json()
    assert not [h for h in history if h["rule"] == rule], history  # ...and left no "pending" row behind
    expect(page.locator("#history")).not_to_contain_text(rule)
    admin_tab.shot("alerts-forms")
    rule_id = next(r["id"] for r in cluster.api("GET", "/alert-rules").json() if r["name"] == rule)
    assert cluster.api("DELETE", f"/alert-rules/{rule_id}").status_code == 204


# ---- 4. 404, the logged-out header, report bars --------------------------------------------------------------------
def test_an_unknown_url_is_the_portals_404_page_and_the_api_stays_json(admin_tab: Tab, cluster: Cluster) -> None:
    admin_tab.allowed.append(EXPECTED_404)
    response = admin_tab.page.goto(cluster.url + "/nosuchpage")
    assert response is not None and response.status == 404
    assert response.headers["content-type"].startswith("text/html")
    expect(admin_tab.page.locator(".notfound h1")).to_have_text("404")
    expect(admin_tab.page.locator("#nav")).to_be_visible()  # logged in: the way back is there
    admin_tab.shot("not-found-url")
    r = httpx.get(f"{cluster.url}/api/v1/nosuchthing", headers={"Accept": "text/html"}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "http_error"


def test_the_navigation_is_hidden_while_logged_out(tabs: Tabs, cluster: Cluster) -> None:
    t = tabs()
    t.goto("/login")
    expect(t.page.locator("#token-login")).to_be_visible()
    expect(t.page.locator("#nav")).to_be_hidden()
    expect(t.page.locator("#nav a[data-nav=jobs]")).to_be_hidden()
    expect(t.page.locator("#logout")).to_be_hidden()
    t.login_with_token(cluster.admin_token)
    expect(t.page.locator("#nav a[data-nav=jobs]")).to_be_visible()
    t.allowed.append(re.compile(r"status of 401"))  # the fleet page's refresh in flight as the session ends
    t.page.click("#logout")
    t.page.wait_for_url(re.compile(r"/login"))
    expect(t.page.locator("#token-login")).to_be_visible()
    expect(t.page.locator("#nav")).to_be_hidden()


def test_report_bars_carry_their_values(admin_tab: Tab, cluster: Cluster, cleanup: list[int]) -> None:
    cluster.require_api("/api/v1/reports/usage")
    tag = uuid.uuid4().hex[:6]
    tenant = f"bars-{tag}"
    token = _member_token(cluster, tenant, f"{tenant}-user")
    job = cluster.submit_job(token, command=["sleep", "2"], gpus=2, gpu_model="H100", name="barred")
    cleanup.append(job)
    cluster.wait_ended(job, timeout_s=60)
    page = admin_tab.page
    admin_tab.goto("/reports")
    page.select_option("#report-form select[name=group_by]", "tenant")
    expect(page.locator(f"#table [data-key='{tenant}']")).to_have_count(1)
    rows = page.locator("#table tbody tr").count()
    cells = page.locator("#table tbody tr", has=page.locator(f"[data-key='{tenant}']")).locator("td").all_inner_texts()
    hours, util = cells[1], cells[3]
    for chart, shown in (("#hours", f"{hours} GPU-h"), ("#util", f"{util} %" if util != "—" else "— (no samples)")):
        expect(page.locator(f"{chart} svg text[data-value]")).to_have_count(rows)  # every bar has its value beside it
        drawn = page.locator(f"{chart} svg text[data-value='{tenant}']").text_content()
        assert drawn == shown, (chart, drawn, cells)  # the same value as the table's
    assert float(hours) > 0, cells
    admin_tab.shot("reports-bars")


# ---- 5 and 6. every page at a phone's width and at a desktop's, photographed ---------------------------------------
def _pages(cluster: Cluster, job: int) -> dict[str, tuple[str, str]]:
    """name -> (path, what shows when the page is ready)."""
    return {
        "fleet": ("/", "#by-model table"),
        "nodes": ("/nodes", "#nodes table"),
        "node": ("/nodes/node-a", "#gpus .gpu-card"),
        "gpu": ("/gpus/node-a/0", "#info table"),
        "jobs": ("/jobs", "#list table"),
        "job": (f"/jobs/{job}", "h1"),
        "submit": ("/submit", "#submit-form"),
        "schedules": ("/schedules", "#list table"),
        "alerts": ("/alerts", "#rules table"),
        "reports": ("/reports", "#table table"),
        "admin": ("/admin", "#tokens table"),
        "not-found": ("/nosuchpage", ".notfound"),
    }


def _overflow(tab: Tab) -> dict[str, int]:
    return dict(
        tab.page.evaluate(
            "() => ({scroll: document.scrollingElement.scrollWidth, viewport: window.innerWidth,"
            " body: document.body.scrollWidth})"
        )
    )


def _wide(tab: Tab) -> list[str]:
    """The innermost elements that reach past the right edge of the window (what makes a page scroll sideways)."""
    return list(
        tab.page.evaluate(
            """() => [...document.querySelectorAll('body *')].filter((el) => {
                 const r = el.getBoundingClientRect();
                 return r.right > innerWidth + 1 && ![...el.children].some((c) => c.getBoundingClientRect().right > innerWidth + 1)
                   && !el.closest('.table-scroll');
               }).slice(0, 8).map((el) => `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${el.className}`
                 + ` right=${Math.round(el.getBoundingClientRect().right)}`)"""
        )
    )


@pytest.fixture
def shown_job(cluster: Cluster) -> Iterator[int]:
    job = cluster.submit_job(command=["sh", "-c", "echo a line of output; sleep 1"], gpus=1, name="photographed")
    cluster.wait_ended(job, timeout_s=60)
    yield job


def test_every_page_fits_a_phone_and_is_photographed_at_both_widths(
    tabs: Tabs, cluster: Cluster, shown_job: int
) -> None:
    for size, viewport in (("phone", PHONE), ("desktop", DESKTOP)):
        t = tabs()
        t.allowed.append(EXPECTED_404)
        t.page.set_viewport_size(viewport)
        t.goto("/login")
        expect(t.page.locator("#token-login")).to_be_visible()
        assert _overflow(t)["scroll"] <= viewport["width"], ("login", _overflow(t))
        t.shot(f"login-{size}")
        t.login_with_token(cluster.admin_token)
        for name, (path, ready) in _pages(cluster, shown_job).items():
            t.goto(path)
            expect(t.page.locator(ready).first).to_be_visible()
            expect(t.page.locator(".page-error")).to_have_count(0)
            t.page.wait_for_timeout(300)  # live pages draw their second pass
            t.shot(f"{name}-{size}")
            sizes = _overflow(t)
            assert sizes["scroll"] <= viewport["width"], f"{name} at {size} width scrolls sideways: {sizes} {_wide(t)}"
            # Every navigation link is on the screen, none cut off at its right edge.
            for link in t.page.locator("#nav a:visible").all():
                box = link.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"], (
                    name,
                    link.inner_text(),
                    box,
                )


def test_the_navigation_works_at_the_narrowest_phone(tabs: Tabs, cluster: Cluster) -> None:
    t = tabs()
    t.page.set_viewport_size({"width": 360, "height": 740})
    t.login_with_token(cluster.admin_token)
    for section, heading in (("jobs", "Jobs"), ("alerts", "Alerts"), ("admin", "Admin"), ("reports", "Reports")):
        t.page.click(f"#nav a[data-nav={section}]")
        expect(t.page.locator("main h1").first).to_have_text(heading)
        expect(t.page.locator(f"#nav a[data-nav={section}]")).to_have_attribute("aria-current", "page")
        assert _overflow(t)["scroll"] <= 360, (section, _overflow(t))
    # A wide table scrolls inside its own box, not the page.
    t.page.click("#nav a[data-nav=jobs]")
    t.page.click(".tabs button[data-tab=history]")
    box = t.page.locator("#list .table-scroll").first
    expect(box).to_be_visible()
    assert box.evaluate("el => getComputedStyle(el).overflowX") == "auto"


def test_times_read_in_one_24_hour_format_with_their_zone_on_every_page(
    admin_tab: Tab, cluster: Cluster, cleanup: list[int]
) -> None:
    """The browser's locale (en-US here: '11/26/2026, 4:14:19 AM') never shows: every full time is
    `2026-11-26 04:14:19 UTC`, on the jobs history, the job page and the alerts page alike."""
    job = cluster.submit_job(command=["true"], gpus=1, name="clock-check")
    cluster.wait_ended(job, timeout_s=60)
    page = admin_tab.page
    locale_time = re.compile(r"\d{1,2}/\d{1,2}/\d{4}|\b\d{1,2}:\d{2}(:\d{2})?\s?[AP]M\b")
    zoned = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [A-Z]")
    for path, ready in (("/jobs#history", "#list"), (f"/jobs/{job}", "#info"), ("/alerts", "main")):
        admin_tab.goto(path)
        page.wait_for_selector(ready)
        if path.startswith("/jobs#"):
            page.get_by_role("tab", name="History").click()
            expect(page.locator("#list")).to_contain_text("clock-check")
        text = page.locator("main").inner_text()
        assert not locale_time.search(text), (path, locale_time.search(text))
    admin_tab.goto("/jobs")
    page.get_by_role("tab", name="History").click()
    expect(page.locator("#list")).to_contain_text("clock-check")
    assert zoned.search(page.locator("#list").inner_text())


def test_the_job_page_shows_the_predicted_run_time_and_its_basis(
    admin_tab: Tab, cluster: Cluster, cleanup: list[int]
) -> None:
    """Issue 15: after 8 successful jobs named sweep-N, a running sweep-99 shows what they ran for."""
    done = [cluster.submit_job(command=["sleep", "0.2"], gpus=1, name=f"sweep-{i}") for i in range(8)]
    cluster.wait_ended(*done, timeout_s=60)
    job = cluster.submit_job(command=["sleep", "60"], gpus=1, name="sweep-99")
    cleanup.append(job)
    shown = wait_for(
        lambda: (j := cluster.api("GET", f"/jobs/{job}").json())["prediction"] and j, 30, "a prediction for sweep-99"
    )
    assert re.fullmatch(r"median of 8 earlier jobs by admin named sweep-\* on 1 GPU: \d+ s", shown["prediction"])
    admin_tab.goto(f"/jobs/{job}")
    expect(admin_tab.page.locator("[data-prediction]")).to_have_text(f"predicted: {shown['prediction']}")
