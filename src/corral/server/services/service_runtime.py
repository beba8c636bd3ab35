"""The services' moving parts in one server: the gateway (its routing table read from the store, its token check),
the flush of its request counts to the store, and the controller (on the leader).

Routes: a service's endpoints are its RUNNING replica jobs that are not being stopped or drained, whose node's
agent confirms that the job's own processes listen on its assigned port (the job proxy's rule, services/webports.py)
- never another job's port or any other port of the node.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import HTTPConnection

from corral.core.errors import ForbiddenError
from corral.core.states import JobState
from corral.core.tenancy import Action
from corral.gateway.app import Gateway
from corral.gateway.model import Endpoint, ServiceRoute
from corral.gateway.stats import BUCKETS_MS
from corral.server.auth import Principal, authenticate_bearer
from corral.server.background.loop import Loop
from corral.server.background.services import ServiceController
from corral.server.services.jobs import NO_SUBMIT_RULES, SubmitRules
from corral.server.services.notify import NodeNotifier, Trigger
from corral.server.services.webports import WebPortRegistry
from corral.store.base import StateStore

log = logging.getLogger("corral.services")
FLUSH_S = 1.0


class StoreRoutes:
    """The gateway's RouteSource: services and their routable replicas, from the store (blocking)."""

    def __init__(self, store: StateStore, web_ports: WebPortRegistry) -> None:
        self.store = store
        self.web_ports = web_ports

    def routes(self) -> Mapping[str, ServiceRoute]:
        services = self.store.list_services()
        if not services:
            return {}
        replicas = self.store.live_replicas()
        addresses = {n.name: n.address for n in self.store.list_nodes()}
        by_service: dict[int, list[Endpoint]] = {}
        drain = {s.id: set(s.state.get("draining", {})) for s in services}
        for j in replicas:
            sid = j.spec.service_id
            if sid is None or j.state is not JobState.RUNNING or not j.node or not j.spec.port:
                continue
            if j.cancel_requested or j.preempt_requested or str(j.id) in drain.get(sid, ()):
                continue
            if self.web_ports.why_not(j.node, j.id, j.attempt, j.spec.port) is not None:
                continue
            by_service.setdefault(sid, []).append(
                Endpoint(
                    job_id=j.id,
                    attempt=j.attempt,
                    host=addresses.get(j.node) or j.node,
                    port=j.spec.port,
                    revision=j.spec.service_revision or 0,
                )
            )
        routes: dict[str, ServiceRoute] = {}
        for s in services:
            if s.deleting:
                continue
            try:  # one malformed row must not keep every other service's route from changing
                routes[s.name] = ServiceRoute(
                    service_id=s.id,
                    name=s.name,
                    tenant_id=s.tenant_id,
                    public=bool(s.settings.get("public")),
                    queue_limit=int(s.settings.get("queue_limit") or 100),
                    scale_from_zero=s.settings.get("target_rps") is not None
                    and int(s.settings.get("min_replicas") or 0) == 0,
                    health_path=str(s.current["health_path"]),
                    endpoints=tuple(by_service.get(s.id, ())),
                )
            except (KeyError, TypeError, ValueError, AssertionError):
                log.exception("service %s: cannot route it", s.name)
        return routes


def make_authorize(store: StateStore) -> Callable[[HTTPConnection, ServiceRoute], Any]:
    """The gateway's token check: a user's bearer token (never a session cookie: the gateway is another origin's
    port of the same host, and a browser would send the portal's cookie to it) of the service's tenant, or an
    admin's. Another tenant's service is reported as missing."""

    async def authorize(conn: HTTPConnection, route: ServiceRoute) -> None:
        header = conn.headers.get("authorization", "")
        principal: Principal = await asyncio.to_thread(authenticate_bearer, store, header)
        if principal.token.kind != "user" or principal.user is None:
            raise ForbiddenError(f"a {principal.token.kind} token cannot call services")
        principal.check_tenant(route.tenant_id, "service", route.name)
        principal.require(Action.READ)

    return authorize


class TrafficFlush(Loop):
    """Every server writes its gateway's counts to the store once a second (the leader's controller sums them)."""

    def __init__(self, store: StateStore, gateway: Gateway, server_id: str) -> None:
        super().__init__("service-traffic", FLUSH_S, log=log)
        self.store = store
        self.gateway = gateway
        self.server_id = server_id
        self._last: dict[int, Any] = {}

    def run_pass(self) -> float | None:
        snap = self.gateway.snapshot()
        data: dict[int, dict[str, Any]] = {}
        for sid, st in snap.items():
            row = {
                "requests": st.requests,
                "errors": st.errors,
                "shed": st.shed,
                "outstanding": st.outstanding,
                "outstanding_by_job": {str(job_id): n for job_id, n in st.outstanding_by_job.items()},
                "waiting": st.waiting,
                "latency_hist": list(st.latency_ms),
                "last_request_at": st.last_request_at,
            }
            if self._last.get(sid) != row or st.outstanding or st.waiting:
                data[sid] = row
        if data:
            self.store.save_service_traffic(self.server_id, data, datetime.now(UTC))
            self._last.update(data)
        return None


class ServiceManager:
    """What the services API reads (readiness, figures) and what the app starts and stops."""

    def __init__(
        self,
        store: StateStore,
        web_ports: WebPortRegistry,
        scheduler_trigger: Trigger,
        notifier: NodeNotifier,
        *,
        server_id: str,
        leading: Callable[[], bool],
        activation_timeout_s: float = 120.0,
        on_api_port: bool = False,
        rules: SubmitRules = NO_SUBMIT_RULES,
    ) -> None:
        self.store = store
        self.rules = rules  # what the server's settings allow in a replica (host mounts): the API checks with them
        self.gateway = Gateway(
            StoreRoutes(store, web_ports),
            make_authorize(store),
            self._on_demand,
            activation_timeout_s=activation_timeout_s,
            sandbox=on_api_port,
        )
        self.readiness = self.gateway.prober
        self.controller = ServiceController(
            store, scheduler_trigger, notifier, self.readiness, BUCKETS_MS[:-1], rules=rules
        )
        self.controller.gate = leading
        self.flush = TrafficFlush(store, self.gateway, server_id)
        self._demand_lock = threading.Lock()

    def _on_demand(self, service_id: int) -> None:
        """A request waits for a replica of a service scaled to zero: counts go out now, the controller wakes."""
        with self._demand_lock:
            try:
                self.flush.run_pass()
            except Exception:
                log.warning("could not write the gateway's counts", exc_info=True)
        self.controller.wake()

    def figures(self, service_id: int) -> dict[str, Any] | None:
        """Request rate, error rate, p50/p99 and in flight: the controller's when this server leads, else the
        newest graph point the leader wrote (at most 5 s old)."""
        f = self.controller.figures(service_id)
        if f is not None and self.controller.gate is not None and self.controller.gate():
            return f
        points = self.store.service_samples(service_id, datetime.fromtimestamp(time.time() - 15, UTC))
        if not points:
            return f
        _, d = points[-1]
        return {
            "rps": d.get("rps") or 0.0,
            "error_rate": d.get("error_rate") or 0.0,
            "p50_ms": d.get("p50_ms"),
            "p99_ms": d.get("p99_ms"),
            "in_flight": 0,
        }

    def wake(self) -> None:
        self.controller.wake()

    def start(self) -> None:
        self.controller.start()
        self.flush.start()

    def stop(self) -> None:
        self.flush.stop()
        self.controller.stop()
