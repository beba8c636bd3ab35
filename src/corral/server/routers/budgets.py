"""/api/v1/budgets: tenants' budgets and their spend this period. Admins set and delete them and see every
tenant's; anyone else sees their own tenant's only (another tenant's budget is a 404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from corral.api.pools import BudgetIn, BudgetOut
from corral.core.budgets import Budget, BudgetStatus
from corral.core.errors import NotFoundError
from corral.server.auth import Principal, require_user
from corral.server.deps import ContextDep
from corral.server.services import budgets as use

router = APIRouter(prefix="/api/v1/budgets", tags=["budgets"])
User = Annotated[Principal, Depends(require_user)]
TenantName = Annotated[str, Path(min_length=1, max_length=64)]


def _out(s: BudgetStatus) -> BudgetOut:
    b = s.budget
    return BudgetOut(
        tenant=b.tenant,
        period=b.period,
        gpu_hours=b.gpu_hours,
        money=b.money,
        policy=b.policy,
        period_start=s.period_start,
        period_end=s.period_end,
        gpu_hours_used=round(s.gpu_hours_used, 4),
        money_used=round(s.money_used, 4),
        used_pct=round(s.used_pct, 2),
        state=s.state,
        enforced=s.enforced,
    )


@router.get("", response_model=list[BudgetOut])
def list_budgets(ctx: ContextDep, caller: User) -> list[BudgetOut]:
    return [_out(s) for s in use.visible_statuses(ctx.budgets, ctx.store, caller)]


@router.get("/{tenant}", response_model=BudgetOut)
def show_budget(tenant: TenantName, ctx: ContextDep, caller: User) -> BudgetOut:
    for s in use.visible_statuses(ctx.budgets, ctx.store, caller):
        if s.budget.tenant == tenant:
            return _out(s)
    raise NotFoundError("budget", tenant)


@router.put("/{tenant}", response_model=BudgetOut)
def set_budget(tenant: TenantName, body: BudgetIn, ctx: ContextDep, caller: User) -> BudgetOut:
    use.set_budget(ctx.store, caller, tenant, Budget(tenant, body.period, body.gpu_hours, body.money, body.policy))
    ctx.budgets.invalidate()
    ctx.scheduler.trigger.fire()
    return show_budget(tenant, ctx, caller)


@router.delete("/{tenant}", status_code=204)
def delete_budget(tenant: TenantName, ctx: ContextDep, caller: User) -> Response:
    use.delete_budget(ctx.store, caller, tenant)
    ctx.budgets.invalidate()
    ctx.scheduler.trigger.fire()
    return Response(status_code=204)
