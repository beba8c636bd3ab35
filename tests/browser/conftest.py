"""Playwright driving Debian's chromium against one real `corral up` (+ a second agent) per test module."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.conftest import Corral, wait_for
from realparts import missing_real_part

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
EXPECTED_404 = re.compile(r"Failed to load resource: the server responded with a status of 404")


def chromium_problem() -> str | None:
    """None when Playwright and a chromium binary are both here, else why the browser tests cannot run."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as e:
        return f"the playwright package is not installed ({e}); run `make test` (installs the dev extras)"
    if not _chromium_path():
        return "no chromium binary (apt-get install -y chromium, or `make browser-deps`)"
    return None


def _chromium_path() -> str | None:
    """CORRAL_TEST_CHROMIUM (a path or a command name) when set, else Debian's `chromium`."""
    wanted = os.environ.get("CORRAL_TEST_CHROMIUM") or "chromium"
    return shutil.which(wanted) or (wanted if Path(wanted).is_file() else None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    problem = chromium_problem()
    if problem:
        missing_real_part("chromium for the browser tests", problem)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium_path(), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Cluster(Corral):
    """A `corral up` with its local agent (8 simulated H100s) and a second agent process (4 simulated A100s)."""

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin-token").read_text().strip()

    def api(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.admin_token}"}
        return httpx.request(method, f"{self.url}/api/v1{path}", headers=headers, timeout=10, **kw)

    def has_api(self, path: str) -> bool:
        return path in httpx.get(f"{self.url}/openapi.json", timeout=10).json()["paths"]

    def require_api(self, *paths: str) -> None:
        """Every route a page drives is shipped: one missing from the OpenAPI fails the test (never a skip)."""
        missing = [p for p in paths if not self.has_api(p)]
        assert not missing, f"the server no longer serves {', '.join(missing)}: a shipped route was removed"

    def job_state(self, job: int) -> str:
        return str(self.api("GET", f"/jobs/{job}").json()["state"])

    def submit_job(self, token: str | None = None, **spec: Any) -> int:
        """POST /jobs as the admin (or `token`'s user); the new job's id (a refusal fails the test)."""
        r = self.api("POST", "/jobs", token=token, json=spec)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def wait_ended(self, *jobs: int, timeout_s: float) -> None:
        for job in jobs:
            wait_for(lambda j=job: self.job_state(j) in TERMINAL, timeout_s, f"job {job} ended")


@pytest.fixture(scope="module")
def cluster(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("portal"), gpus="sim:8xH100-80GB", node="node-a")
    try:
        c.start()
        c.start_agent("node-b", "sim:4xA100-80GB")
        wait_for(lambda: len(c.api("GET", "/nodes").json()) == 2, 30, "second agent registered")
        yield c
    finally:
        c.close()


class Tab:
    """One browser context (its own cookies) and page; console errors and page errors are collected."""

    def __init__(self, browser: Any, cluster: Cluster) -> None:
        self.cluster = cluster
        self.context = browser.new_context(viewport={"width": 1300, "height": 900})
        self.context.set_default_timeout(15_000)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.allowed: list[re.Pattern[str]] = []
        self.page.on(
            "console", lambda m: self.errors.append(f"{self.page.url}: {m.text}") if m.type == "error" else None
        )
        self.page.on("pageerror", lambda e: self.errors.append(f"{self.page.url}: uncaught {e}"))

    def sibling(self) -> Tab:
        """Another page in this tab's context (same session); its console errors count as this tab's."""
        other = Tab.__new__(Tab)
        other.cluster, other.context, other.errors, other.allowed = (
            self.cluster,
            self.context,
            self.errors,
            self.allowed,
        )
        other.page = self.context.new_page()
        other.page.on(
            "console", lambda m: self.errors.append(f"{other.page.url}: {m.text}") if m.type == "error" else None
        )
        other.page.on("pageerror", lambda e: self.errors.append(f"{other.page.url}: uncaught {e}"))
        return other

    def goto(self, path: str) -> None:
        self.page.goto(self.cluster.url + path)

    def login_with_token(self, token: str) -> None:
        self.goto("/login")
        self.page.fill("#token-login input[name=token]", token)
        self.page.click("#token-login button[type=submit]")
        self.page.wait_for_selector("#who:has-text('·')")

    def login_with_password(self, user: str, password: str) -> None:
        self.goto("/login")
        self.page.fill("#password-login input[name=username]", user)
        self.page.fill("#password-login input[name=password]", password)
        self.page.click("#password-login button[type=submit]")
        self.page.wait_for_selector(f"#who:has-text('{user}')")

    def shot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


@pytest.fixture
def tabs(browser: Any, cluster: Cluster) -> Iterator[Callable[[], Tab]]:
    """Open tabs; after the test, every tab must have logged no console error (beyond those it allowed)."""
    made: list[Tab] = []

    def make() -> Tab:
        t = Tab(browser, cluster)
        made.append(t)
        return t

    yield make
    errors = [e for t in made for e in t.unexpected_errors()]
    for t in made:
        t.context.close()
    assert not errors, "console errors:\n" + "\n".join(errors)


@pytest.fixture
def admin_tab(tabs: Callable[[], Tab], cluster: Cluster) -> Tab:
    t = tabs()
    t.login_with_token(cluster.admin_token)
    return t
