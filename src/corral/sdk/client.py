"""httpx-based clients: CorralClient (users) and AgentClient (agents, join token)."""

from __future__ import annotations

import ssl
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Self
from urllib.parse import quote

import httpx

from corral.api.pools import BudgetIn, BudgetOut, PoolIn, PoolOut, PoolPatch
from corral.api.schemas import (
    AgentRegister,
    AgentSync,
    AgentSyncReply,
    GpuOut,
    GroupMappingIn,
    GroupMappingOut,
    JobOut,
    JobSubmit,
    JoinTokenIn,
    JoinTokenOut,
    NodeCertOut,
    NodeOut,
    NodeRevokeOut,
    QueueIn,
    QueueOut,
    QuotaIn,
    QuotaOut,
    ScheduleIn,
    ScheduleOut,
    SchedulePatch,
    StatusOut,
    TenantIn,
    TenantOut,
    TokenIn,
    TokenOut,
    UnixIdentityIn,
    UnixIdentityOut,
    UserIn,
    UserOut,
    UserPatch,
    WhoAmI,
)
from corral.api.secrets import KeyRotationOut, SecretIn, SecretOut, SecretUpdate
from corral.api.services import ServiceIn, ServiceOut, ServicePatch, ServiceSampleOut
from corral.sdk.endpoints import CONNECT_TIMEOUT_S, FAILOVER_STATUS, Endpoints, compute_may_resend
from corral.sdk.errors import (
    CorralAPIError,
    CorralConnectionError,
    CorralSDKError,
    compute_api_error,
    compute_failover_error,
    compute_timeout_error,
    compute_unreachable_error,
)

__all__ = ["AgentClient", "CorralAPIError", "CorralClient", "CorralConnectionError", "CorralSDKError"]


class _Base:
    # How long an idle connection is kept for the next request (httpx's default: 5 s)
    keepalive_s: float = 5.0

    def __init__(
        self,
        url: str | Sequence[str],
        token: str,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """`url`: the server's base URL, or several replicas' (comma-separated, or a list): a request goes to
        the one that answered last and fails over to the others (corral.sdk.endpoints says when). `verify`: an
        SSLContext that trusts the cluster CA (and, for agents, holds the node's certificate); True: the
        system's CAs."""
        try:
            self.endpoints = Endpoints(url)
        except ValueError as e:
            raise CorralConnectionError(str(e)) from e
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.verify = verify
        self._http = self._new_http(self.endpoints.urls[0], headers, httpx.Timeout(timeout_s), transport)

    def _new_http(
        self,
        base_url: str | httpx.URL,
        headers: Mapping[str, str] | httpx.Headers,
        timeout: httpx.Timeout,
        transport: httpx.BaseTransport | None = None,
    ) -> httpx.Client:
        """An httpx client with this client's TLS and httpx's default pool limits (100 connections, 20 kept),
        with this client's idle limit."""
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=self.keepalive_s)
        return httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport, verify=self.verify, limits=limits
        )

    @property
    def url(self) -> str:
        """The server's base URL: with several, the one that answered last."""
        return self.endpoints.current

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, *, idempotent: bool = False, **kw: Any) -> httpx.Response:
        """`idempotent`: the request may be sent again to another replica after it may have reached one (as
        GET, PUT, DELETE and a request with an Idempotency-Key may)."""
        if self.endpoints.several:
            return self._request_failover(method, path, idempotent, **kw)
        try:
            r = self._http.request(method, path, **kw)
        except httpx.TimeoutException as e:
            raise compute_timeout_error(self.url, e) from e
        except httpx.TransportError as e:
            raise compute_unreachable_error(self.url, e) from e
        if r.status_code >= 400:
            raise _api_error(r)
        return r

    def _request_failover(self, method: str, path: str, idempotent: bool, **kw: Any) -> httpx.Response:
        may_resend = idempotent or compute_may_resend(method, kw.get("headers"))
        timeout = kw.pop("timeout", self._http.timeout)
        timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        connect_s = min(timeout.connect or CONNECT_TIMEOUT_S, CONNECT_TIMEOUT_S)
        kw["timeout"] = httpx.Timeout(connect=connect_s, read=timeout.read, write=timeout.write, pool=timeout.pool)
        failures: list[CorralConnectionError] = []
        unavailable: httpx.Response | None = None
        first = self.endpoints.urls[0]
        for url in self.endpoints.compute_order():
            try:  # the first URL is the client's base_url; the others are named in full
                r = self._http.request(method, path if url == first else url + path, **kw)
            except httpx.TransportError as e:
                failures.append(
                    compute_timeout_error(url, e)
                    if isinstance(e, httpx.TimeoutException)
                    else compute_unreachable_error(url, e)
                )
                self.endpoints.mark_failed(url)
                if may_resend or isinstance(e, _NOTHING_SENT):
                    continue
                raise compute_failover_error(failures, may_be_applied=True) from e
            if r.status_code == FAILOVER_STATUS and may_resend:
                unavailable = r
                self.endpoints.mark_failed(url)
                continue
            self.endpoints.mark_answered(url)
            if r.status_code >= 400:
                raise _api_error(r)
            return r
        if unavailable is not None:  # an answer, even "unavailable", says more than no answer
            raise _api_error(unavailable)
        raise compute_failover_error(failures)


# Errors before any byte of the request left: no server can have applied it, so the next replica may have it.
_NOTHING_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def _api_error(r: httpx.Response) -> CorralAPIError:
    return compute_api_error(r.status_code, r.reason_phrase, r.content)


class IdentityClientMixin(_Base):
    """Node identity (admins): join tokens and node revocation."""

    def create_join_token(self, body: JoinTokenIn) -> JoinTokenOut:
        return JoinTokenOut.model_validate(self._request("POST", "/api/v1/join-tokens", json=body.model_dump()).json())

    def join_tokens(self) -> list[JoinTokenOut]:
        return [JoinTokenOut.model_validate(t) for t in self._request("GET", "/api/v1/join-tokens").json()]

    def revoke_join_token(self, token_id: int) -> JoinTokenOut:
        return JoinTokenOut.model_validate(self._request("DELETE", f"/api/v1/join-tokens/{token_id}").json())

    def revoke_node(self, node: str) -> NodeRevokeOut:
        return NodeRevokeOut.model_validate(self._request("POST", f"/api/v1/nodes/{node}/revoke").json())


# httpx types Response.json() as Any: each `type: ignore[no-any-return]` below marks that gap (the server's schema
# is the contract for the shape).
class CorralClient(IdentityClientMixin):
    """What users do: submit and follow jobs, look at nodes and GPUs."""

    def health(self) -> dict[str, str]:
        return self._request("GET", "/healthz").json()  # type: ignore[no-any-return]

    def submit(self, job: JobSubmit, idempotency_key: str | None = None, retry_for_s: float = 30.0) -> JobOut:
        """Submit once, whatever happens on the way: the call carries an Idempotency-Key (a fresh one unless
        given) and is retried with it on connection errors and 5xx for up to `retry_for_s` (0: no retry), so a
        retry after a lost reply or a server crash returns the job the first attempt made, never a second job."""
        from corral.sdk.retry import call_with_retries

        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        body = job.model_dump(exclude_none=True)
        r = call_with_retries(lambda: self._request("POST", "/api/v1/jobs", json=body, headers=headers), retry_for_s)
        return JobOut.model_validate(r.json())

    def submit_many(
        self, jobs: list[JobSubmit], idempotency_key: str | None = None, retry_for_s: float = 30.0
    ) -> list[JobOut]:
        """Submit several jobs (each may be an array: `JobSubmit(array="0-99%10", ...)`) in one call, all or none;
        answers every job made, arrays' tasks included. Retried with one Idempotency-Key as `submit` is."""
        from corral.sdk.retry import call_with_retries

        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        body = {"jobs": [j.model_dump(exclude_none=True) for j in jobs]}
        r = call_with_retries(
            lambda: self._request("POST", "/api/v1/jobs/batch", json=body, headers=headers), retry_for_s
        )
        return [JobOut.model_validate(j) for j in r.json()]

    def jobs(self, all: bool = False) -> list[JobOut]:
        r = self._request("GET", "/api/v1/jobs", params={"all": str(all).lower()})
        return [JobOut.model_validate(j) for j in r.json()]

    def job(self, job_id: int) -> JobOut:
        return JobOut.model_validate(self._request("GET", f"/api/v1/jobs/{job_id}").json())

    def events(self, job_id: int) -> list[dict[str, str]]:
        return self._request("GET", f"/api/v1/jobs/{job_id}/events").json()  # type: ignore[no-any-return]

    def cancel(self, job_id: int) -> JobOut:
        return JobOut.model_validate(self._request("POST", f"/api/v1/jobs/{job_id}/cancel").json())

    def logs(self, job_id: int, offset: int = 0, rank: int = 0) -> tuple[bytes, int, str]:
        """(bytes from offset, total size held, job state)."""
        r = self._request("GET", f"/api/v1/jobs/{job_id}/logs", params={"offset": offset, "rank": rank})
        return r.content, int(r.headers.get("x-log-size", "0")), r.headers.get("x-job-state", "")

    def create_schedule(self, body: ScheduleIn) -> ScheduleOut:
        r = self._request("POST", "/api/v1/schedules", json=body.model_dump(exclude_none=True))
        return ScheduleOut.model_validate(r.json())

    def schedules(self) -> list[ScheduleOut]:
        return [ScheduleOut.model_validate(s) for s in self._request("GET", "/api/v1/schedules").json()]

    def schedule(self, schedule_id: int) -> ScheduleOut:
        return ScheduleOut.model_validate(self._request("GET", f"/api/v1/schedules/{schedule_id}").json())

    def update_schedule(self, schedule_id: int, body: SchedulePatch) -> ScheduleOut:
        r = self._request("PATCH", f"/api/v1/schedules/{schedule_id}", json=body.model_dump(exclude_none=True))
        return ScheduleOut.model_validate(r.json())

    def delete_schedule(self, schedule_id: int) -> None:
        self._request("DELETE", f"/api/v1/schedules/{schedule_id}")

    def run_schedule(self, schedule_id: int) -> JobOut:
        return JobOut.model_validate(self._request("POST", f"/api/v1/schedules/{schedule_id}/run").json())

    def schedule_jobs(self, schedule_id: int, limit: int = 50) -> list[JobOut]:
        r = self._request("GET", f"/api/v1/schedules/{schedule_id}/jobs", params={"limit": limit})
        return [JobOut.model_validate(j) for j in r.json()]

    # ---- long-running services behind the gateway (docs/services.md) ----
    # Bodies are sent with the fields that were set (`exclude_unset`): an explicit None means something to PATCH
    # (`target_rps=None` turns autoscaling off, `image=None` goes back to a process), an unset field does not.
    def create_service(self, body: ServiceIn) -> ServiceOut:
        r = self._request("POST", "/api/v1/services", json=body.model_dump(mode="json", exclude_unset=True))
        return ServiceOut.model_validate(r.json())

    # ---- pools (issue 19) ----
    def pools(self) -> list[PoolOut]:
        """Every pool (the static one first): nodes, pending demand, spend; admins also see settings."""
        return [PoolOut.model_validate(p) for p in self._request("GET", "/api/v1/pools").json()]

    def pool(self, name: str) -> PoolOut:
        """One pool with its live nodes and (admins) its newest events."""
        return PoolOut.model_validate(self._request("GET", f"/api/v1/pools/{quote(name, safe='')}").json())

    def create_pool(self, body: PoolIn) -> PoolOut:
        r = self._request("POST", "/api/v1/pools", json=body.model_dump(mode="json", exclude_unset=True))
        return PoolOut.model_validate(r.json())

    def update_pool(self, name: str, patch: PoolPatch) -> PoolOut:
        r = self._request(
            "PATCH", f"/api/v1/pools/{quote(name, safe='')}", json=patch.model_dump(mode="json", exclude_unset=True)
        )
        return PoolOut.model_validate(r.json())

    def interrupt_pool_node(self, pool: str, node: str, seconds: float = 120.0) -> None:
        """Play a spot interruption notice on a local pool's node (admins)."""
        self._request(
            "POST",
            f"/api/v1/pools/{quote(pool, safe='')}/nodes/{quote(node, safe='')}/interrupt",
            json={"seconds": seconds},
        )

    def delete_pool(self, name: str) -> None:
        self._request("DELETE", f"/api/v1/pools/{quote(name, safe='')}")

    # ---- budgets and reports (issue 19) ----
    def budgets(self) -> list[BudgetOut]:
        """Budgets with this period's spend: admins every tenant's, others their own tenant's."""
        return [BudgetOut.model_validate(b) for b in self._request("GET", "/api/v1/budgets").json()]

    def set_budget(self, tenant: str, body: BudgetIn) -> BudgetOut:
        r = self._request(
            "PUT", f"/api/v1/budgets/{quote(tenant, safe='')}", json=body.model_dump(mode="json", exclude_unset=True)
        )
        return BudgetOut.model_validate(r.json())

    def delete_budget(self, tenant: str) -> None:
        self._request("DELETE", f"/api/v1/budgets/{quote(tenant, safe='')}")

    def usage_report(
        self, group_by: str = "tenant", start: str | None = None, end: str | None = None, csv: bool = False
    ) -> Any:
        """GPU-hours, jobs, utilisation and cost per group (tenant, user, gpu_model, day, pool, job): rows, or CSV
        text with `csv`."""
        params = {"group_by": group_by, "format": "csv" if csv else "json"}
        params.update({k: v for k, v in (("start", start), ("end", end)) if v})
        r = self._request("GET", "/api/v1/reports/usage", params=params)
        return r.text if csv else r.json()

    def services(self) -> list[ServiceOut]:
        """The caller's tenant's services (admins: every tenant's), without replicas, events and revisions."""
        return [ServiceOut.model_validate(s) for s in self._request("GET", "/api/v1/services").json()]

    def service(self, name: str) -> ServiceOut:
        return ServiceOut.model_validate(self._request("GET", _service_path(name)).json())

    def update_service(self, name: str, body: ServicePatch) -> ServiceOut:
        """Settings change at once; a change of what replicas run is a new revision, rolled out replica by replica."""
        r = self._request("PATCH", _service_path(name), json=body.model_dump(mode="json", exclude_unset=True))
        return ServiceOut.model_validate(r.json())

    def scale_service(self, name: str, replicas: int) -> ServiceOut:
        """A fixed replica count (409 for an autoscaled service: change its min/max instead)."""
        r = self._request("POST", _service_path(name, "/scale"), json={"replicas": replicas})
        return ServiceOut.model_validate(r.json())

    def rollback_service(self, name: str) -> ServiceOut:
        """Back to the last revision whose rollout completed (or the one before the current)."""
        return ServiceOut.model_validate(self._request("POST", _service_path(name, "/rollback")).json())

    def delete_service(self, name: str) -> None:
        """Stops its replicas, then removes it."""
        self._request("DELETE", _service_path(name))

    def service_metrics(self, name: str, since_s: float = 3600) -> list[ServiceSampleOut]:
        """Request rate, error rate, p50/p99 latency and replicas over the last `since_s`, a point every 5 s."""
        r = self._request("GET", _service_path(name, "/metrics"), params={"since_s": since_s})
        return [ServiceSampleOut.model_validate(x) for x in r.json()]

    def nodes(self) -> list[NodeOut]:
        return [NodeOut.model_validate(n) for n in self._request("GET", "/api/v1/nodes").json()]

    def gpus(self) -> list[GpuOut]:
        return [GpuOut.model_validate(g) for g in self._request("GET", "/api/v1/gpus").json()]

    # ---- operations and monitoring ----------------------------------------------
    def node_action(self, node: str, action: str) -> NodeOut:
        return NodeOut.model_validate(self._request("POST", f"/api/v1/nodes/{node}/{action}").json())

    def node_events(self, node: str) -> list[dict[str, Any]]:
        return self._request("GET", f"/api/v1/nodes/{node}/events").json()  # type: ignore[no-any-return]

    def gpu_action(self, node: str, index: int, action: str) -> list[GpuOut]:
        r = self._request("POST", f"/api/v1/gpus/{node}/{index}/{action}")
        return [GpuOut.model_validate(g) for g in r.json()]

    def inject_fault(self, node: str, index: int, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"/api/v1/nodes/{node}/gpus/{index}/fault", json=body).json()  # type: ignore[no-any-return]

    def alerts(self, states: list[str] | None = None, history: bool = False) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"history": str(history).lower()}
        if states:
            params["state"] = states
        return self._request("GET", "/api/v1/alerts", params=params).json()  # type: ignore[no-any-return]

    def alert_rules(self) -> list[dict[str, Any]]:
        return self._request("GET", "/api/v1/alert-rules").json()  # type: ignore[no-any-return]

    def create_alert_rule(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/api/v1/alert-rules", json=body).json()  # type: ignore[no-any-return]

    def delete_alert_rule(self, rule_id: int) -> None:
        self._request("DELETE", f"/api/v1/alert-rules/{rule_id}")

    def silences(self) -> list[dict[str, Any]]:
        return self._request("GET", "/api/v1/silences").json()  # type: ignore[no-any-return]

    def create_silence(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/api/v1/silences", json=body).json()  # type: ignore[no-any-return]

    def delete_silence(self, silence_id: str) -> None:
        self._request("DELETE", f"/api/v1/silences/{silence_id}")

    # ---- the control plane ------------------------------------------------------
    def status(self) -> StatusOut:
        """The server replicas sharing the database and which leads (admins)."""
        return StatusOut.model_validate(self._request("GET", "/api/v1/status").json())

    # ---- tenancy ----------------------------------------------------------------
    def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(self._request("GET", "/api/v1/whoami").json())

    def tenants(self) -> list[TenantOut]:
        return [TenantOut.model_validate(t) for t in self._request("GET", "/api/v1/tenants").json()]

    def create_tenant(self, body: TenantIn) -> TenantOut:
        return TenantOut.model_validate(self._request("POST", "/api/v1/tenants", json=body.model_dump()).json())

    def quotas(self, tenant: str | None = None) -> list[QuotaOut]:
        params = {"tenant": tenant} if tenant else {}
        return [QuotaOut.model_validate(q) for q in self._request("GET", "/api/v1/quotas", params=params).json()]

    def set_quota(self, tenant: str, body: QuotaIn) -> QuotaOut:
        r = self._request("PUT", f"/api/v1/tenants/{tenant}/quotas", json=body.model_dump())
        return QuotaOut.model_validate(r.json())

    def delete_quota(self, tenant: str, gpu_model: str = "") -> None:
        self._request("DELETE", f"/api/v1/tenants/{tenant}/quotas", params={"gpu_model": gpu_model})

    def queues(self, tenant: str | None = None) -> list[QueueOut]:
        params = {"tenant": tenant} if tenant else {}
        return [QueueOut.model_validate(q) for q in self._request("GET", "/api/v1/queues", params=params).json()]

    def set_queue(self, tenant: str, body: QueueIn) -> QueueOut:
        r = self._request("PUT", f"/api/v1/tenants/{tenant}/queues", json=body.model_dump())
        return QueueOut.model_validate(r.json())

    def users(self) -> list[UserOut]:
        return [UserOut.model_validate(u) for u in self._request("GET", "/api/v1/users").json()]

    def create_user(self, body: UserIn) -> UserOut:
        r = self._request("POST", "/api/v1/users", json=body.model_dump(exclude_none=True))
        return UserOut.model_validate(r.json())

    def update_user(self, name: str, body: UserPatch) -> UserOut:
        r = self._request("PATCH", f"/api/v1/users/{name}", json=body.model_dump(exclude_none=True))
        return UserOut.model_validate(r.json())

    def unix_identity(self, name: str) -> UnixIdentityOut:
        return UnixIdentityOut.model_validate(self._request("GET", f"/api/v1/users/{name}/unix").json())

    def set_unix_identity(self, name: str, body: UnixIdentityIn) -> UnixIdentityOut:
        r = self._request("PUT", f"/api/v1/users/{name}/unix", json=body.model_dump(exclude_none=True))
        return UnixIdentityOut.model_validate(r.json())

    def clear_unix_identity(self, name: str) -> UnixIdentityOut:
        return UnixIdentityOut.model_validate(self._request("DELETE", f"/api/v1/users/{name}/unix").json())

    def tokens(self) -> list[TokenOut]:
        return [TokenOut.model_validate(t) for t in self._request("GET", "/api/v1/tokens").json()]

    def create_token(self, body: TokenIn) -> TokenOut:
        r = self._request("POST", "/api/v1/tokens", json=body.model_dump(exclude_none=True))
        return TokenOut.model_validate(r.json())

    def revoke_token(self, token_id: int) -> None:
        self._request("DELETE", f"/api/v1/tokens/{token_id}")

    def login(self, username: str, password: str) -> TokenOut:
        r = self._request("POST", "/api/v1/login", json={"username": username, "password": password})
        return TokenOut.model_validate(r.json())

    # ---- tenant secrets: values go in, never come out ----
    def secrets(self, tenant: str | None = None) -> list[SecretOut]:
        r = self._request("GET", "/api/v1/secrets", params=_tenant(tenant))
        return [SecretOut.model_validate(x) for x in r.json()]

    def create_secret(self, body: SecretIn, tenant: str | None = None) -> SecretOut:
        r = self._request("POST", "/api/v1/secrets", params=_tenant(tenant), json=body.model_dump(exclude_none=True))
        return SecretOut.model_validate(r.json())

    def update_secret(self, name: str, body: SecretUpdate, tenant: str | None = None) -> SecretOut:
        r = self._request(
            "PUT",
            f"/api/v1/secrets/{quote(name, safe='')}",
            params=_tenant(tenant),
            json=body.model_dump(exclude_none=True),
        )
        return SecretOut.model_validate(r.json())

    def delete_secret(self, name: str, tenant: str | None = None) -> None:
        self._request("DELETE", f"/api/v1/secrets/{quote(name, safe='')}", params=_tenant(tenant))

    def rotate_secrets_key(self) -> KeyRotationOut:
        return KeyRotationOut.model_validate(self._request("POST", "/api/v1/secrets/rotate-key").json())

    def group_mappings(self) -> list[GroupMappingOut]:
        """Directory group -> tenant and role mappings (admins)."""
        return [GroupMappingOut.model_validate(m) for m in self._request("GET", "/api/v1/directory/groups").json()]

    def create_group_mapping(self, body: GroupMappingIn) -> GroupMappingOut:
        r = self._request("POST", "/api/v1/directory/groups", json=body.model_dump())
        return GroupMappingOut.model_validate(r.json())

    def delete_group_mapping(self, mapping_id: int) -> None:
        self._request("DELETE", f"/api/v1/directory/groups/{mapping_id}")


def _service_path(name: str, rest: str = "") -> str:
    return f"/api/v1/services/{quote(name, safe='')}{rest}"


def _tenant(tenant: str | None) -> dict[str, str]:
    return {"tenant": tenant} if tenant else {}


class AgentClient(_Base):
    """What agents do, over mutual TLS: `verify` is an SSLContext with the node's certificate (see
    corral.sdk.join for the join that obtains it)."""

    # An agent sends telemetry every few seconds and syncs again as soon as a long poll ends: its connections are
    # kept between requests, so a fleet does not cost the server a TLS handshake per agent every few seconds.
    # Shorter than the server's AGENT_KEEP_ALIVE_S, so the agent never sends on a connection the server is closing.
    keepalive_s: float = 50.0

    def renew(self, node: str, csr_pem: str) -> NodeCertOut:
        """A new certificate for this node, requested with the current one."""
        return NodeCertOut.model_validate(
            self._request("POST", f"/api/v1/agents/{node}/renew", json={"csr": csr_pem}).json()
        )

    def recycle_connections(self, grace_s: float = 90.0) -> None:
        """New connections from now on (after the SSLContext's certificate was replaced); requests in
        flight on the old ones (a long poll) finish first, the old pool is closed after `grace_s`."""
        old = self._http
        self._http = self._new_http(old.base_url, old.headers, old.timeout)  # not a test's transport: it closes
        timer = threading.Timer(grace_s, old.close)
        timer.daemon = True
        timer.start()

    def send_telemetry(self, node: str, batch: dict[str, Any]) -> dict[str, int]:
        return self._request("POST", f"/api/v1/agents/{node}/telemetry", json=batch).json()  # type: ignore[no-any-return]

    def register(self, body: AgentRegister) -> NodeOut:
        return NodeOut.model_validate(self._request("POST", "/api/v1/agents/register", json=body.model_dump()).json())

    def sync(self, node: str, body: AgentSync) -> AgentSyncReply:
        timeout = httpx.Timeout(body.wait_s + 30.0)
        r = self._request("POST", f"/api/v1/agents/{node}/sync", json=body.model_dump(), timeout=timeout)
        return AgentSyncReply.model_validate(r.json())

    def upload_logs(self, node: str, job_id: int, offset: int, data: bytes, attempt: int = 1, rank: int = 0) -> int:
        """Returns the size the server now holds for that run; on a gap, the size to resend from."""
        try:
            r = self._request(  # idempotent: the bytes are written at `offset`, a second time changes nothing
                "POST",
                f"/api/v1/agents/{node}/jobs/{job_id}/logs",
                params={"offset": offset, "attempt": attempt, "rank": rank},
                content=data,
                headers={"content-type": "application/octet-stream"},
                idempotent=True,
            )
        except CorralAPIError as e:
            if e.status == 409 and "expected" in e.body:
                return int(e.body["expected"])
            raise
        return int(r.json()["size"])
