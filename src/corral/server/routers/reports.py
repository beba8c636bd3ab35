"""/api/v1/reports/usage: GPU-hours, cost and utilisation per tenant, user, GPU model, day, pool or job (JSON or
CSV). Cost: GPU-hours x the price per GPU-hour of the node each ran on (cloud types' prices; owned GPUs at
CORRAL_OWNED_GPU_PRICE_PER_HOUR)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from corral.core.errors import ValidationError
from corral.server.auth import Principal, require_user
from corral.server.deps import SettingsDep, StoreDep
from corral.server.services.budgets import compute_prices
from corral.server.services.reports import JobRun, compute_usage_rows, parse_time, render_csv

router = APIRouter(prefix="/api/v1/reports", tags=["reports"])
User = Annotated[Principal, Depends(require_user)]


@router.get("/usage", response_model=None)
def usage(
    caller: User,
    store: StoreDep,
    settings: SettingsDep,
    group_by: str = "tenant",
    start: str | None = None,
    end: str | None = None,
    format: Annotated[str, Query(pattern="^(json|csv)$")] = "json",
) -> Any:
    """Members see their tenant's usage; admins everyone's. Default range: the last 30 days."""
    now = datetime.now(UTC)
    t1 = parse_time(end, "end", now)
    t0 = parse_time(start, "start", t1 - timedelta(days=30))
    if t0 >= t1:
        raise ValidationError("start", "must be before end")
    if t1 - t0 > timedelta(days=400):
        raise ValidationError("start", "a report covers at most 400 days")
    scope = caller.tenant_scope()
    by_model = group_by == "gpu_model"
    # every report prices what ran (cost): it reads where each job ran
    runs = [JobRun.from_columns(r) for r in store.list_runs_between(t0, t1, tenant_id=scope, with_placement=True)]
    tenants = {t.id: t.name for t in store.list_tenants()}
    users = {u.id: u.name for u in store.list_users()}
    models = {(n.name, g.index): g.model for n in store.list_nodes() for g in n.gpus} if by_model else {}
    prices, pools = compute_prices(store)
    rows = compute_usage_rows(
        runs, group_by, t0, t1, now, tenants, users, models, prices, settings.owned_gpu_price_per_hour, pools
    )
    if format == "csv":
        return Response(
            render_csv(rows, group_by),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="corral-usage-{group_by}.csv"'},
        )
    return rows
