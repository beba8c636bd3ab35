"""The portal's pools and budgets pages in a real browser: an admin creates a `local` pool through the page's form,
sees it listed with 0 / 2 nodes, pauses it, resizes and deletes it from its page, and sets a tenant's budget; a
member of another tenant reads the pools without the form, settings or events and sees only its own budget; text
from the API (an error naming a refused name, a provider setting) is shown as text, never as markup. No job is
submitted: a pool with no demand starts no node (no agent process)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.conftest import wait_for

from .conftest import Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
Tabs = Callable[[], Tab]
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]

ROUTES = ("/api/v1/pools", "/api/v1/pools/{name}", "/api/v1/budgets", "/api/v1/budgets/{tenant}")
G4 = {"name": "g4", "gpus": 4, "gpu_model": "A100-80GB", "price_per_hour": 2.5}


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
def made(cluster: Cluster) -> Iterator[dict[str, list[str]]]:
    """Pools and budgets to delete after the test (a deleted one answers 404: fine)."""
    things: dict[str, list[str]] = {"pools": [], "budgets": []}
    yield things
    for name in things["pools"]:
        cluster.api("DELETE", f"/pools/{name}")
    for tenant in things["budgets"]:
        cluster.api("DELETE", f"/budgets/{tenant}")


def _pool_name() -> str:
    return f"burst-{uuid.uuid4().hex[:6]}"


def _create_pool(cluster: Cluster, made: dict[str, list[str]], **spec: Any) -> str:
    name = _pool_name()
    body = {"name": name, "provider": "local", "instance_types": [G4], "max_nodes": 2, **spec}
    r = cluster.api("POST", "/pools", json=body)
    assert r.status_code == 201, r.text
    made["pools"].append(name)
    return name


def _open_pools(tab: Tab) -> None:
    """To the list through the navigation, as a user gets there."""
    tab.goto("/")
    tab.page.click("#nav a[data-nav=pools]")
    tab.page.wait_for_url(re.compile(r"/pools$"))
    expect(tab.page.locator("main h1").first).to_have_text("Pools")
    expect(tab.page.locator("#nav a[data-nav=pools]")).to_have_attribute("aria-current", "page")


def test_an_admin_creates_a_pool_pauses_resizes_and_deletes_it_and_sets_a_budget(
    admin_tab: Tab, cluster: Cluster, made: dict[str, list[str]]
) -> None:
    cluster.require_api(*ROUTES)
    assert "default" in {t["name"] for t in cluster.api("GET", "/tenants").json()}
    page = admin_tab.page
    _open_pools(admin_tab)
    expect(page.locator("#list tr[data-pool-row=static]")).to_contain_text("static")

    name = _pool_name()
    made["pools"].append(name)
    form = page.locator("#pool-form")
    form.locator("input[name=name]").fill(name)
    form.locator("select[name=provider]").select_option("local")
    form.locator("input[name=type_name]").fill("g4")
    form.locator("input[name=gpus]").fill("4")
    form.locator("input[name=gpu_model]").fill("A100-80GB")
    form.locator("input[name=price_per_hour]").fill("2.5")
    form.locator("input[name=max_nodes]").fill("2")
    form.locator("button[type=submit]").click()
    expect(page.locator("#toast")).to_contain_text(f"pool {name} created")
    shown = cluster.api("GET", f"/pools/{name}").json()
    assert (shown["provider"], shown["kind"], shown["max_nodes"], shown["paused"]) == ("local", "cloud", 2, False)
    assert [(t["name"], t["gpus"], t["gpu_model"], t["price_per_hour"]) for t in shown["instance_types"]] == [
        ("g4", 4, "A100-80GB", 2.5)
    ]
    row = page.locator(f"#list tr[data-pool-row='{name}']")
    expect(row.locator("[data-nodes]")).to_have_text("0 / 2")
    expect(row).to_contain_text("local")
    expect(row).to_contain_text("g4: 4 x A100-80GB, 2.50/h")
    expect(row.locator("[data-spend]")).to_have_text("0.00")
    expect(row.locator("[data-paused]")).to_have_count(0)
    admin_tab.shot("pools")

    row.locator(f"a[data-pool='{name}']").click()
    page.wait_for_url(re.compile(rf"/pools/{name}$"))
    expect(page.locator("main h1")).to_contain_text(name)
    expect(page.locator("#summary [data-nodes]")).to_have_text("0 / 2")
    expect(page.locator("#types")).to_contain_text("A100-80GB")
    expect(page.locator("#types")).to_contain_text("2.50")
    expect(page.locator("#nodes")).to_contain_text("no nodes running")  # no demand: no node started
    expect(page.locator("#settings")).to_be_visible()
    expect(page.locator("#events")).to_be_visible()

    expect(page.locator("#pause")).to_have_text("Pause")
    page.click("#pause")
    expect(page.locator("#pool-state [data-paused]")).to_have_text("paused")
    expect(page.locator("#pause")).to_have_text("Resume")
    assert cluster.api("GET", f"/pools/{name}").json()["paused"] is True

    page.fill("#max-form input[name=max_nodes]", "3")
    page.click("#max-form button[type=submit]")
    expect(page.locator("#summary [data-nodes]")).to_have_text("0 / 3")
    assert cluster.api("GET", f"/pools/{name}").json()["max_nodes"] == 3
    admin_tab.shot("pool")

    page.click("#nav a[data-nav=pools]")
    page.wait_for_url(re.compile(r"/pools$"))
    row = page.locator(f"#list tr[data-pool-row='{name}']")
    expect(row.locator("[data-paused]")).to_have_text("paused")
    expect(row.locator("[data-nodes]")).to_have_text("0 / 3")

    # A budget for the default tenant: listed with its used % as a bar, its state and policy.
    made["budgets"].append("default")
    bform = page.locator("#budget-form")
    bform.locator("input[name=tenant]").fill("default")
    bform.locator("input[name=money]").fill("100")
    bform.locator("select[name=policy]").select_option("no-burst")
    bform.locator("button[type=submit]").click()
    expect(page.locator("#toast")).to_contain_text("budget of default set")
    got = cluster.api("GET", "/budgets/default").json()
    assert (got["money"], got["policy"], got["period"], got["gpu_hours"]) == (100, "no-burst", "month", None)
    brow = page.locator("#budgets tr[data-budget-row=default]")
    expect(brow.locator("[data-policy]")).to_have_text("no-burst")
    expect(brow.locator("[data-state]")).to_have_text(re.compile(r"^(ok|warning|exceeded)$"))
    expect(brow.locator("[data-used-pct]")).to_have_text(re.compile(r"^\d+\.\d%$"))
    expect(brow.locator(".bar > span")).to_have_count(1)
    expect(brow).to_contain_text("of 100.00")
    assert re.fullmatch(r"width:\s*\d+(\.\d+)?%;?", brow.locator(".bar > span").get_attribute("style") or "")
    admin_tab.shot("pools-budgets")

    # Delete the budget from the page, then the pool from its page.
    page.once("dialog", lambda d: d.accept())
    brow.locator("button[data-delete-budget=default]").click()
    expect(page.locator("#budgets tr[data-budget-row=default]")).to_have_count(0)
    assert cluster.api("GET", "/budgets/default").status_code == 404

    page.locator(f"a[data-pool='{name}']").click()
    page.wait_for_url(re.compile(rf"/pools/{name}$"))
    page.once("dialog", lambda d: d.accept())
    page.click("#delete")
    page.wait_for_url(re.compile(r"/pools$"))
    wait_for(lambda: cluster.api("GET", f"/pools/{name}").status_code == 404, 10, f"pool {name} gone")
    expect(page.locator(f"a[data-pool='{name}']")).to_have_count(0, timeout=10_000)


def test_a_member_of_another_tenant_reads_pools_without_admin_parts_and_only_its_own_budget(
    tabs: Tabs, cluster: Cluster, made: dict[str, list[str]]
) -> None:
    cluster.require_api(*ROUTES)
    name = _create_pool(cluster, made)
    tenant = f"pl-{uuid.uuid4().hex[:4]}"
    member, member_pw, token = _user_token(cluster, tenant, "member")
    for who, money in (("default", 100), (tenant, 50)):
        made["budgets"].append(who)
        r = cluster.api("PUT", f"/budgets/{who}", json={"money": money, "policy": "notify"})
        assert r.status_code == 200, r.text
    # The API hides the same: no settings nor events, no other tenant's budget.
    shown = cluster.api("GET", f"/pools/{name}", token=token).json()
    assert shown["settings"] is None and shown["events"] is None
    assert [b["tenant"] for b in cluster.api("GET", "/budgets", token=token).json()] == [tenant]

    t = tabs()
    t.login_with_password(member, member_pw)
    _open_pools(t)
    page = t.page
    row = page.locator(f"#list tr[data-pool-row='{name}']")
    expect(row.locator("[data-nodes]")).to_have_text("0 / 2")
    expect(page.locator("#list tr[data-pool-row=static]")).to_have_count(1)
    expect(page.locator("#pool-form")).to_have_count(0)
    expect(page.locator("#budget-form")).to_have_count(0)
    expect(page.locator(f"#budgets tr[data-budget-row='{tenant}'] [data-used-pct]")).to_have_text(re.compile(r"%$"))
    expect(page.locator("#budgets tr[data-budget-row=default]")).to_have_count(0)
    expect(page.locator("#budgets [data-budget]")).to_have_count(1)
    expect(page.locator("#budgets button")).to_have_count(0)
    t.shot("pools-member")

    row.locator(f"a[data-pool='{name}']").click()
    page.wait_for_url(re.compile(rf"/pools/{name}$"))
    expect(page.locator("#types")).to_contain_text("A100-80GB")
    expect(page.locator("#nodes")).to_be_visible()
    expect(page.locator("#settings")).to_have_count(0)
    expect(page.locator("#events")).to_have_count(0)
    expect(page.locator("#pause")).to_have_count(0)
    expect(page.locator("#max-form")).to_have_count(0)
    expect(page.locator("#delete")).to_have_count(0)


def test_text_from_the_api_is_shown_as_text_never_as_markup(
    admin_tab: Tab, cluster: Cluster, made: dict[str, list[str]]
) -> None:
    cluster.require_api(*ROUTES)
    hostile = "<b id=pwn-name>x</b>"
    r = cluster.api("POST", "/pools", json={"name": hostile, "provider": "local", "instance_types": [G4]})
    assert r.status_code in (400, 422), r.text

    page = admin_tab.page
    admin_tab.allowed.append(re.compile(r"the server responded with a status of (400|422)"))  # the refusal, below
    _open_pools(admin_tab)
    form = page.locator("#pool-form")
    form.locator("input[name=name]").fill(hostile)
    form.locator("input[name=type_name]").fill("g4")
    form.locator("input[name=gpus]").fill("4")
    form.locator("input[name=gpu_model]").fill("A100-80GB")
    form.locator("button[type=submit]").click()
    # The server's refusal quotes the name: shown under the field as text.
    expect(form.locator(".field-error[data-for=name]")).to_contain_text("is not a pool name")
    expect(form.locator(".field-error[data-for=name]")).to_contain_text(hostile)
    expect(page.locator("#pwn-name")).to_have_count(0)
    assert all(p["name"] != hostile for p in cluster.api("GET", "/pools").json())

    # A provider setting is free text (admins'): the pool's page shows it as written.
    setting = '<img id=pwn-setting src=x onerror="document.title=1">'
    name = _create_pool(cluster, made, settings={"docker_host": setting})
    admin_tab.goto(f"/pools/{name}")
    expect(page.locator("[data-setting=docker_host]")).to_have_text(setting)
    expect(page.locator("#pwn-setting")).to_have_count(0)
    expect(page.locator("#events")).to_be_visible()
    assert page.title() == f"Pool {name} · Corral"
