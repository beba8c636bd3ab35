"""/api/v1/pools: node pools. Everyone sees the pools (their types, nodes, demand and spend); admins declare,
change and delete cloud pools and also see provider settings and the autoscaler's events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from corral.api.pools import PoolIn, PoolOut, PoolPatch
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.deps import ContextDep
from corral.server.services import pools as use

router = APIRouter(prefix="/api/v1/pools", tags=["pools"])
User = Annotated[Principal, Depends(require_user)]
PoolName = Annotated[str, Path(max_length=64)]
NodeName = Annotated[str, Path(max_length=255)]


@router.get("", response_model=list[PoolOut])
def list_pools(ctx: ContextDep, caller: User) -> list[PoolOut]:
    return use.list_pools(ctx.store, caller, ctx.autoscaler)


@router.post("", response_model=PoolOut, status_code=201)
def create_pool(body: PoolIn, ctx: ContextDep, caller: User) -> PoolOut:
    pool = use.create_pool(ctx.store, caller, body, ctx.settings.data_dir / "pools")
    ctx.autoscaler.wake()
    return use.list_pools(ctx.store, caller, ctx.autoscaler, name=pool.name)[-1]


@router.get("/{name}", response_model=PoolOut)
def show_pool(name: PoolName, ctx: ContextDep, caller: User) -> PoolOut:
    return use.list_pools(ctx.store, caller, ctx.autoscaler, name=name, events=True)[-1]


@router.patch("/{name}", response_model=PoolOut)
def update_pool(name: PoolName, body: PoolPatch, ctx: ContextDep, caller: User) -> PoolOut:
    use.update_pool(ctx.store, caller, name, body, ctx.settings.data_dir / "pools")
    ctx.autoscaler.wake()
    return use.list_pools(ctx.store, caller, ctx.autoscaler, name=name)[-1]


class InterruptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(120.0, ge=0, le=3600, allow_inf_nan=False)


@router.post("/{name}/nodes/{node}/interrupt", status_code=202)
def interrupt_node(name: PoolName, node: NodeName, body: InterruptIn, ctx: ContextDep, caller: User) -> dict[str, str]:
    """Play a spot interruption notice of `seconds` on a local pool's node (admins): its jobs are told, stopped
    and requeued keeping their place; the node goes when the seconds have passed."""
    caller.require(Action.MANAGE_CLUSTER)
    pool = ctx.store.get_pool(name)
    provider = ctx.autoscaler.provider(pool.spec, pool.version) if pool is not None else None
    use.interrupt_node(ctx.store, caller, name, node, body.seconds, provider)
    ctx.autoscaler.wake()
    return {"node": node, "notice_s": f"{body.seconds:g}"}


@router.delete("/{name}", status_code=204)
def delete_pool(name: PoolName, ctx: ContextDep, caller: User) -> Response:
    use.delete_pool(ctx.store, caller, name)
    ctx.autoscaler.wake()
    return Response(status_code=204)
