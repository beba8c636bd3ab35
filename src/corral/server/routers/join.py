"""Node identity: the join exchange (a join token + CSR -> a node certificate), join tokens (admins) and
`POST /nodes/{name}/revoke`, which cuts a node off at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends

from corral.api.schemas import JoinCaOut, JoinIn, JoinTokenIn, JoinTokenOut, NodeCertOut, NodeRevokeOut
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.deps import CaDep, ContextDep, StoreDep
from corral.server.params import Id
from corral.server.services import identity
from corral.store.identity import JoinTokenRecord

router = APIRouter(prefix="/api/v1", tags=["node identity"])
# Served on the agents' TLS port only (corral.server.app.create_agent_app): a token never crosses plain HTTP.
join_only_router = APIRouter(prefix="/api/v1", tags=["node identity"])
User = Annotated[Principal, Depends(require_user)]


@join_only_router.get("/join/ca", response_model=JoinCaOut)
def join_ca(ca: CaDep) -> JoinCaOut:
    """The cluster CA (public). A joining agent checks it against the fingerprint in its token before it
    trusts anything else this server says."""
    return JoinCaOut(ca=ca.cert_pem, fingerprint=ca.fingerprint)


@join_only_router.post("/join", response_model=NodeCertOut)
def join(body: JoinIn, ctx: ContextDep) -> NodeCertOut:
    """Spend one use of a join token for a certificate bound to `node` (no other credential needed)."""
    cert = identity.join_node(ctx.store, ctx.ca, body.token, body.node, body.csr, ctx.node_cert_lifetime)
    return NodeCertOut(node=body.node, cert=cert.pem, ca=ctx.ca.cert_pem, serial=cert.serial, not_after=cert.not_after)


@router.get("/ca", response_model=JoinCaOut)
def cluster_ca(ca: CaDep) -> JoinCaOut:
    """The cluster CA (public), for `corral login --ca-fingerprint`: the CLI pins it to the fingerprint the
    user got from the operator, then verifies the server with it."""
    return join_ca(ca)


def _out(t: JoinTokenRecord, token: str | None = None) -> JoinTokenOut:
    now = datetime.now(UTC)
    state = (
        "revoked"
        if t.revoked_at
        else "used up"
        if t.uses >= t.max_uses
        else "expired"
        if t.expires_at <= now
        else "usable"
    )
    return JoinTokenOut(
        id=t.id,
        description=t.description,
        created_by=t.created_by,
        created_at=t.created_at,
        expires_at=t.expires_at,
        max_uses=t.max_uses,
        uses=t.uses,
        revoked_at=t.revoked_at,
        state=state,
        token=token,
    )


@router.post("/join-tokens", response_model=JoinTokenOut, status_code=201)
def create_join_token(body: JoinTokenIn, ctx: ContextDep, caller: User) -> JoinTokenOut:
    token, record = identity.create_join_token(ctx.store, ctx.ca, caller, body.ttl_s, body.uses, body.description)
    return _out(record, token)


@router.get("/join-tokens", response_model=list[JoinTokenOut])
def list_join_tokens(caller: User, store: StoreDep) -> list[JoinTokenOut]:
    caller.require(Action.MANAGE_CLUSTER)
    return [_out(t) for t in store.list_join_tokens()]


@router.delete("/join-tokens/{token_id}", response_model=JoinTokenOut)
def revoke_join_token(token_id: Id, caller: User, store: StoreDep) -> JoinTokenOut:
    return _out(identity.revoke_join_token(store, caller, token_id))


@router.post("/nodes/{name}/revoke", response_model=NodeRevokeOut)
def revoke_node(name: str, ctx: ContextDep, caller: User) -> NodeRevokeOut:
    serials = identity.revoke_node(ctx.store, ctx.identities, caller, name, ctx.settings.retry_backoff_s)
    ctx.notifier.notify(name)
    ctx.scheduler.trigger.fire()
    return NodeRevokeOut(node=name, revoked_serials=serials)
