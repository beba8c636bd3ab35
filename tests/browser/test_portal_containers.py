"""The portal's container jobs: the submit form's image, mounts, /dev/shm, user and registry secret, the API's
errors under those fields, and the job page and jobs list showing them. No container engine is needed: on this
cluster's node an image job stays PENDING (no docker runtime)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from e2e.conftest import wait_for

from .conftest import Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]
Tabs = Callable[[], Tab]

IMAGE = "corral-test/busybox:1"
PRIVATE_IMAGE = "registry.example:5000/team/trainer:1"  # served by the registry the registry secret logs in to
SUBMIT = "#submit-form button[type=submit]"
REFUSED = re.compile(r"status of 4(00|22)")  # the refusals these tests provoke, which chromium logs
HOSTILE_USER = "<b>robot</b>"  # registry user names are free text: the select must show it, not render it


@pytest.fixture(scope="module")
def cluster(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One node (8 simulated H100s, no container engine); host mounts allowed under the cluster's shared dir only."""
    c = Cluster(tmp_path_factory.mktemp("portal-containers"), gpus="sim:8xH100-80GB", node="node-a")
    c.env["CORRAL_ALLOWED_MOUNTS"] = str(c.shared)
    c.env["CORRAL_STAGE_PATHS"] = f"{c.shared}/{{tenant}}"  # data staging: each tenant's own dir there
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def secrets(cluster: Cluster) -> dict[str, str]:
    """A registry login and a generic secret in the admin's tenant, and a registry login of another tenant."""
    tag = uuid.uuid4().hex[:6]
    names = {"registry": f"reg-{tag}", "generic": f"gen-{tag}", "elsewhere": f"other-reg-{tag}"}
    login = {"kind": "registry", "host": "registry.example:5000", "username": HOSTILE_USER}
    r = cluster.api("POST", "/secrets", json={"name": names["registry"], "value": "pw", **login})
    assert r.status_code == 201, r.text
    r = cluster.api("POST", "/secrets", json={"name": names["generic"], "value": "x"})
    assert r.status_code == 201, r.text
    other = f"other-{tag}"
    assert cluster.api("POST", "/tenants", json={"name": other}).status_code == 201
    r = cluster.api(
        "POST", "/secrets", params={"tenant": other}, json={"name": names["elsewhere"], "value": "pw", **login}
    )
    assert r.status_code == 201, r.text
    return names


def _has_field(cluster: Cluster, schema: str, field: str) -> bool:
    spec = httpx.get(f"{cluster.url}/openapi.json", timeout=10).json()
    return field in spec["components"]["schemas"][schema]["properties"]


def _submitted(tab: Tab) -> int:
    tab.page.wait_for_url(re.compile(r"/jobs/\d+$"))
    return int(tab.page.url.rsplit("/", 1)[1])


def test_form_submits_an_image_with_mounts_and_shm_and_the_job_shows_them(admin_tab: Tab, cluster: Cluster) -> None:
    page = admin_tab.page
    admin_tab.goto("/submit")
    expect(page.locator("textarea[name=mounts]")).to_be_hidden()  # a plain process has no container fields
    page.fill("input[name=command]", "true")
    page.fill("input[name=name]", "in-a-container")
    page.fill("input[name=image]", IMAGE)
    expect(page.locator("textarea[name=mounts]")).to_be_visible()
    page.fill("textarea[name=mounts]", f"{cluster.shared}:/data:ro\n\n{cluster.shared}:/scratch\n")
    page.fill("input[name=shm_size_mib]", "2g")
    admin_tab.shot("submit-container")
    page.click(SUBMIT)
    job_id = _submitted(admin_tab)

    job = cluster.api("GET", f"/jobs/{job_id}").json()
    assert job["image"] == IMAGE, job
    assert job["mounts"] == [f"{cluster.shared}:/data:ro", f"{cluster.shared}:/scratch"], job
    assert job["shm_size_mib"] == 2048 and job["container_user"] is None, job

    box = page.locator("#container")
    expect(box.locator("[data-image]")).to_have_text(IMAGE)
    expect(box).to_contain_text(f"{cluster.shared}:/data:ro")
    expect(box).to_contain_text("2048 MiB")
    expect(page.locator("#phase")).to_have_text("")
    admin_tab.shot("job-container")

    # Retry submits the same container again.
    page.click("#retry")
    page.wait_for_url(re.compile(rf"/jobs/(?!{job_id}$)\d+$"))
    again = cluster.api("GET", f"/jobs/{int(page.url.rsplit('/', 1)[1])}").json()
    assert {k: again[k] for k in ("image", "mounts", "shm_size_mib")} == {
        k: job[k] for k in ("image", "mounts", "shm_size_mib")
    }, again

    # A plain process shows no container table.
    plain = cluster.submit_job(command=["true"], name="plain")
    admin_tab.goto(f"/jobs/{plain}")
    expect(page.locator("#info")).to_contain_text("true")
    expect(page.locator("#container table")).to_have_count(0)


def test_draft_keeps_the_container_fields_and_a_bare_shm_size_is_mib(
    admin_tab: Tab, cluster: Cluster, secrets: dict[str, str]
) -> None:
    page = admin_tab.page
    admin_tab.goto("/submit")
    page.fill("input[name=command]", "true")
    page.fill("input[name=image]", PRIVATE_IMAGE)
    page.fill("input[name=shm_size_mib]", "512")
    page.fill("input[name=container_user]", "1000:1000")
    page.select_option("select[name=registry_secret]", secrets["registry"])
    admin_tab.goto("/submit")  # a new visit (as after a login): the draft comes back, the select once it is filled
    expect(page.locator("input[name=image]")).to_have_value(PRIVATE_IMAGE)
    expect(page.locator("input[name=shm_size_mib]")).to_have_value("512")
    expect(page.locator("input[name=container_user]")).to_have_value("1000:1000")
    expect(page.locator("select[name=registry_secret]")).to_have_value(secrets["registry"])
    page.click(SUBMIT)
    job_id = _submitted(admin_tab)
    job = cluster.api("GET", f"/jobs/{job_id}").json()
    assert job["image"] == PRIVATE_IMAGE and job["shm_size_mib"] == 512 and job["container_user"] == "1000:1000", job
    assert job["mounts"] == [] and job["registry_secret"] == secrets["registry"], job
    box = page.locator("#container")
    expect(box.locator("[data-image]")).to_have_text(PRIVATE_IMAGE)
    expect(box).to_contain_text("1000:1000")
    expect(box).to_contain_text("512 MiB")
    expect(box).to_contain_text(secrets["registry"])
    admin_tab.goto("/submit")
    expect(page.locator("input[name=image]")).to_have_value("")  # a submitted draft is gone


def test_registry_secret_select_lists_the_tenants_registry_logins_only(admin_tab: Tab, secrets: dict[str, str]) -> None:
    page = admin_tab.page
    admin_tab.goto("/submit")
    expect(page.locator("select[name=registry_secret]")).to_be_hidden()
    page.fill("input[name=image]", IMAGE)
    options = page.locator("select[name=registry_secret] option")
    # Only the admin's own tenant's registry login: not the generic secret, not another tenant's login.
    expect(options).to_have_text(
        ["none (a public image)", f"{secrets['registry']} ({HOSTILE_USER}@registry.example:5000)"]
    )
    expect(page.locator("select[name=registry_secret] b")).to_have_count(0)  # shown as text, never as HTML
    expect(page.locator("select[name=registry_secret]")).to_have_value("")


def test_a_bad_mount_shows_the_apis_error_under_mounts(admin_tab: Tab, cluster: Cluster) -> None:
    page = admin_tab.page
    admin_tab.allowed.append(REFUSED)
    admin_tab.goto("/submit")
    page.fill("input[name=command]", "true")
    page.fill("input[name=image]", IMAGE)
    page.fill("textarea[name=mounts]", "/etc:/host-etc")  # well formed, but outside CORRAL_ALLOWED_MOUNTS
    page.click(SUBMIT)
    error = page.locator(".field-error[data-for=mounts]")
    expect(error).to_contain_text("/etc is not under a directory this cluster allows to mount")
    expect(error).to_contain_text(str(cluster.shared))
    expect(page.locator("textarea[name=mounts]")).to_have_attribute("aria-invalid", "true")
    assert page.url.endswith("/submit")

    # What the browser can check itself is checked before sending, in the API's words.
    page.fill("textarea[name=mounts]", "/data")
    page.click(SUBMIT)
    expect(error).to_contain_text("write SRC:DST or SRC:DST:ro with absolute paths")
    page.fill("textarea[name=mounts]", "")
    page.fill("input[name=shm_size_mib]", "lots")
    page.click(SUBMIT)
    expect(page.locator(".field-error[data-for=shm_size_mib]")).to_contain_text("give a size like 512m or 2g")
    expect(error).to_have_text("")


@pytest.mark.parametrize(
    "fields,field,message",
    [
        ({"image": "Not An Image"}, "image", "is not an image reference"),
        (
            {"image": IMAGE, "mounts": "/tmp:/data", "container_user": "1000"},
            "container_user",
            "a job with host mounts runs as its own Unix identity",
        ),
    ],
)
def test_api_errors_of_the_container_fields_show_under_them(
    admin_tab: Tab, fields: dict[str, str], field: str, message: str
) -> None:
    page = admin_tab.page
    admin_tab.allowed.append(REFUSED)
    admin_tab.goto("/submit")
    page.fill("input[name=command]", "true")
    for name, value in fields.items():
        page.fill(f"[name={name}]", value)
    page.click(SUBMIT)
    expect(page.locator(f".field-error[data-for={field}]")).to_contain_text(message)
    expect(page.locator(f"[name={field}]")).to_have_attribute("aria-invalid", "true")
    assert page.url.endswith("/submit")


BODY_CASES = [
    (
        "no image: the container fields a draft still holds are not sent",
        {"command": "x", "mounts": "/a:/b", "shm_size_mib": "2g", "container_user": "7", "registry_secret": "r"},
        {"command": ["x"], "env": {}},
        [],
    ),
    (
        "sizes as Docker spells them",
        {"command": "x", "image": "i", "shm_size_mib": "1GiB"},
        {"command": ["x"], "image": "i", "shm_size_mib": 1024, "env": {}},
        [],
    ),
    (
        "a bare size is MiB",
        {"command": "x", "image": "i", "shm_size_mib": "300"},
        {"command": ["x"], "image": "i", "shm_size_mib": 300, "env": {}},
        [],
    ),
    (
        "mounts one a line, user, secret",
        {
            "command": "x",
            "image": "i",
            "mounts": " /a:/b \n\n/c:/d:ro",
            "container_user": "1000:5",
            "registry_secret": "r",
        },
        {
            "command": ["x"],
            "image": "i",
            "mounts": ["/a:/b", "/c:/d:ro"],
            "container_user": "1000:5",
            "registry_secret": "r",
            "env": {},
        },
        [],
    ),
    ("a relative mount", {"command": "x", "image": "i", "mounts": "a:/b"}, None, ["mounts"]),
    ("a mount over /proc", {"command": "x", "image": "i", "mounts": "/a:/proc/x"}, None, ["mounts"]),
    ("a mount mode", {"command": "x", "image": "i", "mounts": "/a:/b:rx"}, None, ["mounts"]),
    ("too many mounts", {"command": "x", "image": "i", "mounts": "\n".join(["/a:/b"] * 17)}, None, ["mounts"]),
    ("no size", {"command": "x", "image": "i", "shm_size_mib": "2 gallons"}, None, ["shm_size_mib"]),
    ("a user by name", {"command": "x", "image": "i", "container_user": "alice"}, None, ["container_user"]),
]


@pytest.mark.parametrize("name,values,body,fields", BODY_CASES, ids=[c[0] for c in BODY_CASES])
def test_submit_form_builds_the_container_fields_like_the_api(
    admin_tab: Tab, name: str, values: dict[str, str], body: dict[str, Any] | None, fields: list[str]
) -> None:
    admin_tab.goto("/submit")
    got = admin_tab.page.evaluate("async (v) => (await import('/static/pages/submit.js')).buildBody(v)", values)
    assert [f for f, _ in got["errors"]] == fields, (name, got)
    if body is not None:
        assert got["body"] == body, name


def test_the_running_phase_shows_beside_the_state_while_set(admin_tab: Tab, cluster: Cluster) -> None:
    """The API says what a RUNNING container job does before its command starts (`phase`); without a container
    engine here, the page's requests are answered with the job as the API shows it while its node pulls."""
    assert _has_field(cluster, "JobOut", "phase"), "JobOut has no `phase`"
    page = admin_tab.page
    job_id = cluster.submit_job(command=["true"], image=IMAGE, name="pulling")
    job = cluster.api("GET", f"/jobs/{job_id}").json()
    phase: dict[str, str | None] = {"now": "pulling 43%"}

    def pulling() -> dict[str, Any]:
        return {**job, "state": "RUNNING", "node": "node-a", "phase": phase["now"]}

    page.route(f"{cluster.url}/api/v1/jobs/{job_id}", lambda route: route.fulfill(json=pulling()))
    admin_tab.goto(f"/jobs/{job_id}")
    expect(page.locator("#state")).to_have_text("RUNNING")
    expect(page.locator("#phase")).to_have_text("· pulling 43%")
    phase["now"] = "pulling"
    expect(page.locator("#phase")).to_have_text("· pulling")  # refreshed with the page
    phase["now"] = None
    expect(page.locator("#phase")).to_have_text("")

    phase["now"] = "pulling 43%"
    page.route(
        re.compile(r"/api/v1/jobs\?(.*&)?state=RUNNING"),
        lambda route: route.fulfill(
            body=json.dumps([pulling()]), headers={"X-Total-Count": "1"}, content_type="application/json"
        ),
    )
    admin_tab.goto("/jobs")
    page.click(".tabs button[data-tab=running]")
    row = page.locator("#list tr", has=page.locator(f"a[href='/jobs/{job_id}']"))
    expect(row).to_contain_text("RUNNING · pulling 43%")


def test_submit_page_with_an_image_fits_a_phone(admin_tab: Tab, secrets: dict[str, str]) -> None:
    """The registry secrets' long labels ("name (user@host)") never widen the page."""
    page = admin_tab.page
    page.set_viewport_size({"width": 360, "height": 740})
    admin_tab.goto("/submit")
    page.fill("input[name=image]", IMAGE)
    expect(page.locator("select[name=registry_secret] option")).to_have_count(2)
    wide = page.evaluate(
        """() => [...document.querySelectorAll('body *')].filter((el) => el.getBoundingClientRect().right > innerWidth + 1)
             .map((el) => `${el.tagName.toLowerCase()}[name=${el.getAttribute('name')}] right=${el.getBoundingClientRect().right}`)"""
    )
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 360, wide
    admin_tab.shot("submit-container-phone")


def test_retry_keeps_the_jobs_secret_variables(admin_tab: Tab, cluster: Cluster, secrets: dict[str, str]) -> None:
    job_id = cluster.submit_job(command=["true"], name="with-secret", secret_env={"TOKEN": secrets["generic"]})
    admin_tab.goto(f"/jobs/{job_id}")
    admin_tab.page.click("#retry")
    admin_tab.page.wait_for_url(re.compile(rf"/jobs/(?!{job_id}$)\d+$"))
    again = cluster.api("GET", f"/jobs/{int(admin_tab.page.url.rsplit('/', 1)[1])}").json()
    assert again["secret_env"] == {"TOKEN": secrets["generic"]}, again  # names only: the value stays sealed


def test_the_job_page_shows_its_staging_and_retry_keeps_it(admin_tab: Tab, cluster: Cluster) -> None:
    tenant_dir = cluster.shared / "default"  # the tenant's dir on the shared storage: an admin makes it, for its users
    tenant_dir.mkdir(exist_ok=True)
    tenant_dir.chmod(0o1777)
    target = f"{cluster.shared}/default/results/"
    job_id = cluster.submit_job(
        command=["sh", "-c", 'mkdir -p "$CORRAL_STAGE_DIR/out" && echo done > "$CORRAL_STAGE_DIR/out/r.txt"'],
        name="ships-output",
        stage_out=[f"out/:{target}"],
    )
    shipped = wait_for(
        lambda: (j := cluster.api("GET", f"/jobs/{job_id}").json())["stage_out_state"] in ("done", "failed") and j,
        60,
        "its output",
    )
    assert shipped["stage_out_state"] == "done", (shipped["stage_out_message"], shipped["reason"])
    admin_tab.goto(f"/jobs/{job_id}")
    shown = admin_tab.page.locator("#container")
    expect(shown).to_contain_text(f"out/:{target}")
    expect(shown.locator("[data-stage-out]")).to_contain_text("done")
    admin_tab.page.click("#retry")
    admin_tab.page.wait_for_url(re.compile(rf"/jobs/(?!{job_id}$)\d+$"))
    again = cluster.api("GET", f"/jobs/{int(admin_tab.page.url.rsplit('/', 1)[1])}").json()
    assert again["stage_out"] == [f"out/:{target}"], again
