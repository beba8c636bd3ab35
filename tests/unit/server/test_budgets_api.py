"""/api/v1/budgets and the usage report's cost (issue 19) through the app (SQLite and PostgreSQL): admins set,
read and delete tenants' budgets and every refusal names its field; a tenant's members read their own tenant's
budget only; spend is what ran (owned GPUs at the admin's rate, a cloud node at its type's price per GPU); a
budget used up with policy hold keeps its tenant's new jobs waiting (pending_code `budget`) and nobody else's; the
report groups by pool and job with a cost column.

Runs are written into the store as finished jobs (no agent); the autoscaler does nothing here."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pool_api import TenantApi, open_api
from sqlalchemy import update

from corral.core.budgets import compute_period
from corral.core.pools import RELEASED, PoolNode
from corral.core.states import JobState
from corral.store.tables import JobRow

OWNED_PRICE = 2.0  # per owned GPU-hour
CLOUD_NODE = "burst-g4-1"  # 4 GPUs at 12/h: 3 per GPU-hour
CLOUD_PRICE_PER_GPU_HOUR = 3.0


class Api(TenantApi):
    def ran(self, auth: dict[str, str], gpus: int, node: str, start: datetime, end: datetime) -> int:
        """A finished run of `gpus` GPUs on `node` from `start` to `end` (written into the store)."""
        r = self.submit(auth, gpus=0)
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        self.store.finish_job(job_id, JobState.CANCELLED, None, "", start)  # keep the scheduler off it
        with self.store._tx() as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id)
                .values(
                    gpus=gpus,
                    started_at=start,
                    finished_at=end,
                    node=node,
                    gpu_indices=list(range(gpus)),
                    parts=[[node, list(range(gpus))]],
                )
            )
        return job_id

    def set_budget(self, tenant: str, auth: dict[str, str] | None = None, **body: Any) -> Any:
        return self.call("PUT", f"/budgets/{tenant}", auth=auth, json=body)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with open_api(Api, database_url, tmp_path, owned_gpu_price_per_hour=OWNED_PRICE) as a:
        yield a


@pytest.fixture
def alice(api: Api) -> dict[str, str]:
    return api.user("alice", "member", "vision")


@pytest.fixture
def bob(api: Api) -> dict[str, str]:
    return api.user("bob", "member", "nlp")


def _window() -> tuple[datetime, datetime, float]:
    """An hour that ended 10 minutes ago, and how much of it lies in this month (hours)."""
    now = datetime.now(UTC)
    start, end = now - timedelta(minutes=70), now - timedelta(minutes=10)
    month_start, _ = compute_period("month", now)
    return start, end, max((end - max(start, month_start)).total_seconds(), 0.0) / 3600


def _cloud_node(api: Api, launched: datetime) -> None:
    api.store.add_pool_node(
        PoolNode(CLOUD_NODE, "burst", "g4", RELEASED, launched.timestamp(), price_per_hour=12.0, gpus=4), None, []
    )


# ---- admins -------------------------------------------------------------------------------------------------------
def test_admin_sets_reads_replaces_and_deletes_a_budget(api: Api) -> None:
    r = api.set_budget("vision", period="week", gpu_hours=100, money=500.5, policy="hold")
    assert r.status_code == 200, r.text
    b = r.json()
    assert (b["tenant"], b["period"], b["gpu_hours"], b["money"], b["policy"]) == ("vision", "week", 100, 500.5, "hold")
    assert (b["gpu_hours_used"], b["money_used"], b["used_pct"], b["state"], b["enforced"]) == (0, 0, 0, "ok", False)
    start, end = compute_period("week", datetime.now(UTC))
    assert datetime.fromisoformat(b["period_start"]) == start and datetime.fromisoformat(b["period_end"]) == end
    assert api.call("GET", "/budgets/vision").json() == b
    assert [x["tenant"] for x in api.call("GET", "/budgets").json()] == ["vision"]

    r = api.set_budget("vision", money=10)  # replaced: the defaults come back
    assert r.status_code == 200, r.text
    assert (r.json()["period"], r.json()["gpu_hours"], r.json()["money"], r.json()["policy"]) == (
        "month",
        None,
        10,
        "notify",
    )
    assert api.set_budget("nlp", gpu_hours=1).status_code == 200
    assert [x["tenant"] for x in api.call("GET", "/budgets").json()] == ["nlp", "vision"]

    assert api.call("DELETE", "/budgets/vision").status_code == 204
    assert api.call("GET", "/budgets/vision").status_code == 404
    assert api.call("DELETE", "/budgets/vision").status_code == 404
    assert [x["tenant"] for x in api.call("GET", "/budgets").json()] == ["nlp"]
    actions = [e["action"] for e in api.call("GET", "/audit").json() if e["action"].startswith("budget.")]
    assert sorted(actions) == ["budget.delete", "budget.set", "budget.set", "budget.set"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        pytest.param({"period": "year", "gpu_hours": 1}, 422, "period", id="bad-period"),
        pytest.param({"policy": "stop", "gpu_hours": 1}, 422, "policy", id="bad-policy"),
        pytest.param({}, 400, "gpu_hours", id="no-limit"),
        pytest.param({"policy": "hold"}, 400, "gpu_hours", id="no-limit-with-policy"),
        pytest.param({"gpu_hours": -1}, 422, "gpu_hours", id="negative-hours"),
        pytest.param({"money": -0.5}, 422, "money", id="negative-money"),
        pytest.param({"money": 1e13}, 422, "money", id="money-too-large"),
        pytest.param({"gpu_hours": 1, "bogus": 1}, 422, "bogus", id="extra-field"),
    ],
)
def test_bad_budgets_name_the_field_and_store_nothing(api: Api, body: dict[str, Any], status: int, field: str) -> None:
    r = api.set_budget("vision", **body)
    assert r.status_code == status, r.text
    assert field in (r.json()["error"]["field"] or ""), r.text
    assert api.store.list_budgets() == []


def test_non_finite_limits_are_refused(api: Api) -> None:
    r = api.client.put(
        "/api/v1/budgets/vision",
        content=b'{"gpu_hours": Infinity}',
        headers={**api.admin, "Content-Type": "application/json"},
    )
    assert r.status_code in (400, 422), r.text
    assert api.store.list_budgets() == []


def test_a_budget_on_an_unknown_tenant_is_a_404(api: Api) -> None:
    r = api.set_budget("nope", gpu_hours=1)
    assert r.status_code == 404, r.text
    assert api.call("GET", "/budgets/nope").status_code == 404
    assert api.call("DELETE", "/budgets/nope").status_code == 404
    assert api.store.list_budgets() == []


# ---- tenants' members ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["member", "viewer", "tenant-admin"])
def test_members_read_only_their_own_tenants_budget(api: Api, role: str) -> None:
    assert api.set_budget("vision", gpu_hours=10).status_code == 200
    assert api.set_budget("nlp", money=99, policy="hold").status_code == 200
    who = api.user("carol", role, "vision")
    listed = api.call("GET", "/budgets", auth=who)
    assert listed.status_code == 200 and [x["tenant"] for x in listed.json()] == ["vision"]
    assert api.call("GET", "/budgets/vision", auth=who).json()["gpu_hours"] == 10
    other = api.call("GET", "/budgets/nlp", auth=who)
    assert other.status_code == 404 and "99" not in other.text
    assert api.call("GET", "/budgets/nope", auth=who).status_code == 404

    assert api.set_budget("vision", auth=who, gpu_hours=1e9).status_code == 403
    assert api.set_budget("nlp", auth=who, gpu_hours=0).status_code == 403
    assert api.set_budget("nope", auth=who, gpu_hours=1).status_code == 403
    assert api.call("DELETE", "/budgets/vision", auth=who).status_code == 403
    assert api.call("DELETE", "/budgets/nlp", auth=who).status_code == 403
    assert {b.tenant: (b.gpu_hours, b.money) for _, b in api.store.list_budgets()} == {
        "vision": (10, None),
        "nlp": (None, 99),
    }


def test_a_tenant_without_a_budget_sees_none(api: Api, bob: dict[str, str]) -> None:
    assert api.set_budget("vision", gpu_hours=10).status_code == 200
    assert api.call("GET", "/budgets", auth=bob).json() == []
    assert api.call("GET", "/budgets/nlp", auth=bob).status_code == 404
    assert api.call("GET", "/budgets/vision", auth=bob).status_code == 404
    assert api.call("GET", "/budgets", auth={}).status_code == 401


# ---- spend --------------------------------------------------------------------------------------------------------
def test_spend_counts_owned_and_cloud_gpus_at_their_prices(
    api: Api, alice: dict[str, str], bob: dict[str, str]
) -> None:
    start, end, hours = _window()
    _cloud_node(api, start)
    api.ran(alice, 2, "n1", start, end)  # 2 owned GPU-hours at 2: 4
    api.ran(alice, 1, CLOUD_NODE, start, end)  # 1 cloud GPU-hour at 3: 3
    api.ran(bob, 2, "n1", start, end)  # another tenant's: not vision's
    gpu_h, money = 3 * hours, (2 * OWNED_PRICE + CLOUD_PRICE_PER_GPU_HOUR) * hours

    b = api.set_budget("vision", gpu_hours=30, money=8.5).json()
    assert b["gpu_hours_used"] == pytest.approx(gpu_h, abs=1e-3)
    assert b["money_used"] == pytest.approx(money, abs=1e-3)
    assert b["used_pct"] == pytest.approx(100 * money / 8.5, abs=0.01)  # the higher of the two: money's 82%
    assert (b["state"], b["enforced"]) == ("warning" if hours > 0.98 else b["state"], False)
    # as the member sees it
    mine = api.call("GET", "/budgets/vision", auth=alice).json()
    assert mine["money_used"] == b["money_used"] and mine["used_pct"] == b["used_pct"]

    over = api.set_budget("vision", money=6.5, policy="no-burst").json()
    if hours > 0.98:
        assert (over["state"], over["enforced"]) == ("exceeded", True) and over["used_pct"] > 100
    notify = api.set_budget("vision", money=6.5, policy="notify").json()
    assert notify["enforced"] is False and notify["state"] == over["state"]
    hours_only = api.set_budget("vision", gpu_hours=6).json()
    assert hours_only["used_pct"] == pytest.approx(100 * gpu_h / 6, abs=0.01)  # money not limited: not counted
    nlp = api.set_budget("nlp", gpu_hours=4).json()
    assert nlp["gpu_hours_used"] == pytest.approx(2 * hours, abs=1e-3)
    assert nlp["money_used"] == pytest.approx(2 * OWNED_PRICE * hours, abs=1e-3)


def test_a_held_tenants_jobs_wait_with_pending_code_budget(
    api: Api, alice: dict[str, str], bob: dict[str, str]
) -> None:
    start, end, hours = _window()
    if hours < 0.5:
        start, end = compute_period("month", datetime.now(UTC))[0], datetime.now(UTC)  # early in a month
    api.ran(alice, 2, "n1", start, end)
    b = api.set_budget("vision", gpu_hours=0.5, policy="hold").json()
    assert (b["state"], b["enforced"]) == ("exceeded", True)
    held = api.submit(alice, gpus=1).json()["id"]
    free = api.submit(bob, gpus=1).json()["id"]
    try:
        api.ctx.scheduler.run_once(datetime.now(UTC))
        job = api.call("GET", f"/jobs/{held}", auth=alice).json()
        assert job["state"] == "PENDING", job
        assert job["pending_code"] == "budget", job
        assert "vision" in job["pending_reason"] and "monthly budget" in job["pending_reason"], job
        assert api.store.get_job(free).state is JobState.RUNNING  # type: ignore[union-attr]  # nlp is not held

        # the budget grows: the job runs
        assert api.set_budget("vision", gpu_hours=1e6, policy="hold").json()["state"] == "ok"
        api.ctx.scheduler.run_once(datetime.now(UTC))
        assert api.store.get_job(held).state is JobState.RUNNING  # type: ignore[union-attr]
    finally:
        for job_id, who in ((held, alice), (free, bob)):
            api.call("POST", f"/jobs/{job_id}/cancel", auth=who)


def test_notify_and_no_burst_do_not_hold_jobs(api: Api, alice: dict[str, str]) -> None:
    start, end, hours = _window()
    if hours < 0.5:
        start, end = compute_period("month", datetime.now(UTC))[0], datetime.now(UTC)
    api.ran(alice, 2, "n1", start, end)
    for policy in ("notify", "no-burst"):
        assert api.set_budget("vision", gpu_hours=0.5, policy=policy).json()["state"] == "exceeded"
        job_id = api.submit(alice, gpus=1).json()["id"]
        try:
            api.ctx.scheduler.run_once(datetime.now(UTC))
            job = api.call("GET", f"/jobs/{job_id}", auth=alice).json()
            assert job["state"] == "RUNNING" and job["pending_code"] is None, (policy, job)
        finally:
            api.call("POST", f"/jobs/{job_id}/cancel", auth=alice)
            api.store.finish_job(job_id, JobState.CANCELLED, None, "", datetime.now(UTC))


# ---- the usage report's cost --------------------------------------------------------------------------------------
def test_report_by_pool_and_job_with_cost_and_csv(api: Api, alice: dict[str, str], bob: dict[str, str]) -> None:
    start, end, _ = _window()
    _cloud_node(api, start)
    a_owned = api.ran(alice, 2, "n1", start, end)
    a_cloud = api.ran(alice, 1, CLOUD_NODE, start, end)
    b_owned = api.ran(bob, 1, "n1", start, end)
    since = {"start": (start - timedelta(minutes=1)).isoformat()}

    by_pool = api.call("GET", "/reports/usage", params={"group_by": "pool", **since})
    assert by_pool.status_code == 200, by_pool.text
    rows = {r["key"]: r for r in by_pool.json()}
    assert set(rows) == {"static", "burst"}
    assert rows["static"]["gpu_hours"] == pytest.approx(3.0, abs=1e-3)
    assert rows["static"]["cost"] == pytest.approx(3 * OWNED_PRICE, abs=1e-3)
    assert rows["burst"]["gpu_hours"] == pytest.approx(1.0, abs=1e-3)
    assert rows["burst"]["cost"] == pytest.approx(CLOUD_PRICE_PER_GPU_HOUR, abs=1e-3)

    by_job = api.call("GET", "/reports/usage", params={"group_by": "job", **since}).json()
    costs = {str(r["key"]): r["cost"] for r in by_job}
    assert costs == pytest.approx(
        {str(a_owned): 2 * OWNED_PRICE, str(a_cloud): CLOUD_PRICE_PER_GPU_HOUR, str(b_owned): OWNED_PRICE}, abs=1e-3
    )
    # a member: its tenant's jobs only
    mine = api.call("GET", "/reports/usage", auth=alice, params={"group_by": "job", **since}).json()
    assert {str(r["key"]) for r in mine} == {str(a_owned), str(a_cloud)}
    mine_by_pool = api.call("GET", "/reports/usage", auth=alice, params={"group_by": "pool", **since}).json()
    assert {r["key"]: r["cost"] for r in mine_by_pool} == pytest.approx(
        {"static": 2 * OWNED_PRICE, "burst": CLOUD_PRICE_PER_GPU_HOUR}, abs=1e-3
    )

    for group_by in ("pool", "job"):
        csv = api.call("GET", "/reports/usage", params={"group_by": group_by, "format": "csv", **since})
        assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
        lines = csv.text.splitlines()
        assert lines[0] == f"{group_by},gpu_hours,jobs,avg_util_pct,cost"
        assert len(lines) == 1 + (2 if group_by == "pool" else 3)
    bad = api.call("GET", "/reports/usage", params={"group_by": "planet"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "group_by"
