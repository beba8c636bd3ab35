"""The portal's repeating jobs in a real browser: a schedule made from the submit form fires real jobs, the
Schedules page shows them and pauses, runs now and deletes; field errors from the API land on the form."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import wait_for

from .conftest import Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]


@pytest.fixture
def schedules_cleanup(cluster: Cluster) -> Iterator[None]:
    """Whatever the test left, no schedule keeps firing into the next test's cluster."""
    yield
    for s in cluster.api("GET", "/schedules").json():
        cluster.api("DELETE", f"/schedules/{s['id']}")
        for job in s["active_job_ids"]:
            cluster.api("POST", f"/jobs/{job}/cancel")


def test_repeating_job_from_the_form_fires_and_is_paused_run_and_deleted(
    admin_tab: Tab, cluster: Cluster, schedules_cleanup: None
) -> None:
    page = admin_tab.page
    name = f"tick-{uuid.uuid4().hex[:6]}"
    admin_tab.goto("/submit")
    page.fill("input[name=command]", "echo tick")
    page.fill("input[name=name]", name)
    page.fill("input[name=repeat]", "@every 2s")
    page.select_option("select[name=concurrency]", "forbid")
    admin_tab.shot("submit-repeat")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r"/schedules#schedule-\d+$"))
    sid = int(page.url.rsplit("-", 1)[1])
    row = page.locator("tr", has=page.locator(f"[data-schedule='{sid}']"))
    expect(row).to_contain_text(name)
    expect(row).to_contain_text("every 2s")
    expect(row).to_have_class(re.compile("highlight"))

    # Real jobs, run by the real agent, one after another (forbid: never two at once).
    def finished() -> list[dict[str, Any]]:
        jobs = cluster.api("GET", f"/schedules/{sid}/jobs").json()
        return [j for j in jobs if j["state"] == "SUCCEEDED"]

    done = wait_for(lambda: len(finished()) >= 2 and finished(), 60, "two runs of the schedule succeeded")
    assert all(j["schedule_id"] == sid and j["name"] == name for j in done)
    expect(row.locator("td").nth(7)).to_have_text(re.compile(r"^[2-9]|\d\d"), timeout=10_000)  # Runs, live
    admin_tab.shot("schedules")

    row.locator("td").nth(5).locator("a").first.click()  # the last job
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    expect(page.locator("#webui")).to_contain_text(f"schedule {sid}")
    page.go_back()

    row = page.locator("tr", has=page.locator(f"[data-schedule='{sid}']"))
    row.locator("button[data-act=pause]").click()
    expect(row).to_contain_text("paused")
    runs = cluster.api("GET", f"/schedules/{sid}").json()["runs"]
    page.wait_for_timeout(4_000)  # two periods: a paused schedule starts nothing
    assert cluster.api("GET", f"/schedules/{sid}").json()["runs"] == runs
    row.locator("button[data-act=run]").click()
    expect(page.locator("#toast")).to_contain_text("started job #")
    wait_for(lambda: cluster.api("GET", f"/schedules/{sid}").json()["runs"] == runs + 1, 10, "run now counted")

    page.once("dialog", lambda d: d.accept())
    row.locator("button[data-act=delete]").click()
    expect(page.locator(f"[data-schedule='{sid}']")).to_have_count(0)
    assert cluster.api("GET", f"/schedules/{sid}").status_code == 404


@pytest.mark.parametrize(
    "fields,error_for,message",
    [
        ({"repeat": "61 * * * *"}, "repeat", "Bad minute"),  # the cron grammar is the server's: its error, inline
        ({"repeat": "@fortnightly"}, "repeat", "unknown nickname"),
        ({"repeat": "@daily", "timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),  # checked in the browser
        ({"repeat": "@daily", "gpus": "64"}, "gpus", "largest node has 8"),  # the API's job.gpus, on the GPUs field
        ({"repeat": "@daily", "queue": "nope"}, "queue", "no queue 'nope'"),
    ],
)
def test_schedule_errors_show_on_the_form_fields(
    admin_tab: Tab, schedules_cleanup: None, fields: dict[str, str], error_for: str, message: str
) -> None:
    page = admin_tab.page
    admin_tab.allowed.append(re.compile(r"status of 400"))
    admin_tab.goto("/submit")
    page.fill("input[name=command]", "true")
    for k, v in fields.items():
        page.fill(f"[name={k}]", v)
    page.click("#submit-form button[type=submit]")
    expect(page.locator(f".field-error[data-for={error_for}]")).to_contain_text(message)
    expect(page.locator(f"[name={error_for}]")).to_have_attribute("aria-invalid", "true")
    assert page.url.endswith("/submit")


SCHEDULE_CASES = [
    ("no repeat: a one-off job", {"command": "x"}, None, []),
    (
        "cron with zone",
        {"repeat": "0 2 * * *", "timezone": "Europe/Paris", "concurrency": "replace", "name": "n"},
        {"schedule": "0 2 * * *", "timezone": "Europe/Paris", "concurrency": "replace", "name": "n"},
        [],
    ),
    (
        "zone defaults to UTC",
        {"repeat": "@hourly", "timezone": " "},
        {"schedule": "@hourly", "timezone": "UTC", "concurrency": "forbid"},
        [],
    ),
    ("unknown zone", {"repeat": "@hourly", "timezone": "Nowhere/Else"}, None, ["timezone"]),
    ("every without duration", {"repeat": "@every "}, None, ["repeat"]),
]


@pytest.mark.parametrize("name,values,schedule,fields", SCHEDULE_CASES, ids=[c[0] for c in SCHEDULE_CASES])
def test_submit_form_builds_schedules_like_the_api(
    admin_tab: Tab, name: str, values: dict[str, str], schedule: dict[str, Any] | None, fields: list[str]
) -> None:
    admin_tab.goto("/submit")
    got = admin_tab.page.evaluate(
        """async (v) => { const m = await import('/static/pages/submit.js');
        const job = {command: ['x'], ...(v.name ? {name: v.name} : {})};
        const r = m.buildSchedule(v, job); return {schedule: r.schedule, errors: r.errors,
        mapped: ['schedule', 'job.gpus', 'timezone', null].map(m.formField)}; }""",
        values,
    )
    assert [f for f, _ in got["errors"]] == fields, name
    assert got["mapped"] == ["repeat", "gpus", "timezone", None]
    if not fields:
        if schedule is None:
            assert got["schedule"] is None, name
        else:
            assert {k: v for k, v in got["schedule"].items() if k != "job"} == schedule, name
