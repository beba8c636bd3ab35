"""Node identity: the join exchange (a join token + CSR -> a node certificate), join tokens (admins) and
`POST /nodes/{name}/revoke`, which cuts a node off at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from corral.api.schemas import JoinCaOut, JoinIn, JoinTokenIn, JoinTokenOut, NodeCertOut, NodeRevokeOut
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.params import Id
from corral.server.services import identity
from corral.store.identity import JoinTokenRecord

router = APIRouter(prefix="/api/v1", tags=["node identity"])
# Served on the agents' TLS port only (corral.server.app.create_agent_app): a token never crosses plain HTTP.
join_only_router = APIRouter(prefix="/api/v1", tags=["node identity"])
User = Annotated[Principal, Depends(require_user)]


@join_only_router.get("/join/ca", response_model=JoinCaOut)
def join_ca(request: Request) -> JoinCaOut:
    """The cluster CA (public). A joining agent checks it against the fingerprint in its token before it
    trusts anything else this server says."""
    ca = request.app.state.ca
    return JoinCaOut(ca=ca.cert_pem, fingerprint=ca.fingerprint)


@join_only_router.post("/join", response_model=NodeCertOut)
def join(body: JoinIn, request: Request) -> NodeCertOut:
    """Spend one use of a join token for a certificate bound to `node` (no other credential needed)."""
    state = request.app.state
    cert = identity.join_node(state.store, state.ca, body.token, body.node, body.csr, state.node_cert_lifetime)
    return NodeCertOut(node=body.node, cert=cert.pem, ca=state.ca.cert_pem, serial=cert.serial,
                       not_after=cert.not_after)


@router.get("/ca", response_model=JoinCaOut)
def cluster_ca(request: Request) -> JoinCaOut:
    """The cluster CA (public), for `corral login --ca-fingerprint`: the CLI pins it to the fingerprint the
    user got from the operator, then verifies the server with it."""
    return join_ca(request)


def _out(t: JoinTokenRecord, token: str | None = None) -> JoinTokenOut:
    now = datetime.now(UTC)
    state = ("revoked" if t.revoked_at else "used up" if t.uses >= t.max_uses
             else "expired" if t.expires_at <= now else "usable")
    return JoinTokenOut(id=t.id, description=t.description, created_by=t.created_by, created_at=t.created_at,
                        expires_at=t.expires_at, max_uses=t.max_uses, uses=t.uses, revoked_at=t.revoked_at,
                        state=state, token=token)


@router.post("/join-tokens", response_model=JoinTokenOut, status_code=201)
def create_join_token(body: JoinTokenIn, request: Request, caller: User) -> JoinTokenOut:
    state = request.app.state
    token, record = identity.create_join_token(state.store, state.ca, caller, body.ttl_s, body.uses, body.description)
    return _out(record, token)


@router.get("/join-tokens", response_model=list[JoinTokenOut])
def list_join_tokens(request: Request, caller: User) -> list[JoinTokenOut]:
    caller.require(Action.MANAGE_CLUSTER)
    return [_out(t) for t in request.app.state.store.list_join_tokens()]


@router.delete("/join-tokens/{token_id}", response_model=JoinTokenOut)
def revoke_join_token(token_id: Id, request: Request, caller: User) -> JoinTokenOut:
    return _out(identity.revoke_join_token(request.app.state.store, caller, token_id))


@router.post("/nodes/{name}/revoke", response_model=NodeRevokeOut)
def revoke_node(name: str, request: Request, caller: User) -> NodeRevokeOut:
    state = request.app.state
    serials = identity.revoke_node(state.store, state.identities, caller, name, state.settings.retry_backoff_s)
    state.notifier.notify(name)
    state.scheduler.trigger.fire()
    return NodeRevokeOut(node=name, revoked_serials=serials)
