"""/api/v1/alerts, /api/v1/alert-rules, /api/v1/silences, /api/v1/notifiers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Response

from corral.alerts.evaluator import AlertState
from corral.api.schemas import SilenceIn
from corral.core.errors import ValidationError
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.deps import AlertingDep
from corral.server.params import Id

router = APIRouter(prefix="/api/v1", tags=["alerts"])
User = Annotated[Principal, Depends(require_user)]


@router.get("/alerts")
def list_alerts(
    caller: User,
    alerting: AlertingDep,
    state: Annotated[list[str] | None, Query()] = None,
    history: bool = False,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> list[dict[str, Any]]:
    """Current alerts (firing, pending, recently resolved), or with `history=true` every state change."""
    if history:
        return alerting.history(caller, limit)
    try:
        states = [AlertState(s) for s in state] if state else None
    except ValueError as e:
        raise ValidationError("state", f"one of {', '.join(s.value for s in AlertState)}") from e
    return alerting.list_alerts(caller, states)


@router.get("/alert-rules")
def list_rules(caller: User, alerting: AlertingDep) -> list[dict[str, Any]]:
    return alerting.list_rules(caller)


@router.post("/alert-rules", status_code=201)
def create_rule(caller: User, alerting: AlertingDep, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    return alerting.create_rule(caller, body)


@router.delete("/alert-rules/{rule_id}", status_code=204)
def delete_rule(rule_id: Id, caller: User, alerting: AlertingDep) -> Response:
    alerting.delete_rule(caller, rule_id)
    return Response(status_code=204)


@router.get("/silences")
def list_silences(caller: User, alerting: AlertingDep) -> list[dict[str, Any]]:
    """Active silences: every one for an admin, the caller's tenant's own for anyone else."""
    return alerting.list_silences(caller)


@router.post("/silences", status_code=201)
def create_silence(caller: User, alerting: AlertingDep, body: SilenceIn) -> dict[str, Any]:
    """Mute alerts whose labels match. A tenant-admin's silence belongs to its tenant and mutes only that tenant's
    own alerts (its jobs', its queue's, its rules'), never a node's, a GPU's or another tenant's, and lasts at most
    30 days; an admin's lasts at most 90."""
    return alerting.create_silence(caller, body.model_dump(exclude_none=True))


@router.delete("/silences/{silence_id}", status_code=204)
def delete_silence(silence_id: str, caller: User, alerting: AlertingDep) -> Response:
    alerting.delete_silence(caller, silence_id)
    return Response(status_code=204)


@router.get("/notifiers")
def notifiers(caller: User, alerting: AlertingDep) -> list[dict[str, Any]]:
    """Delivery status of each notifier: failures are visible, never silent (admins)."""
    caller.require(Action.MANAGE_CLUSTER)
    from dataclasses import asdict

    return [asdict(s) for s in alerting.notifier_status()]
