"""What the gateway is given: its routing table (services and their replicas' endpoints) and its auth check."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import HTTPConnection


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One replica's HTTP server: job `job_id`'s attempt `attempt`, listening on host:port."""

    job_id: int
    attempt: int
    host: str
    port: int
    revision: int

    @property
    def key(self) -> tuple[int, int]:
        """What health and load are kept by: a new attempt of the same job is a new endpoint."""
        return (self.job_id, self.attempt)


@dataclass(frozen=True, slots=True)
class ServiceRoute:
    service_id: int
    name: str
    tenant_id: int
    public: bool  # no token needed
    # Requests in flight at this gateway for this service (forwarded or waiting for a replica) beyond which it
    # answers 503 + Retry-After. 0 or less: no limit.
    queue_limit: int
    scale_from_zero: bool  # min replicas is 0: a request that finds no ready replica waits (buffered) for one
    health_path: str  # e.g. "/healthz"; probed with GET
    endpoints: tuple[Endpoint, ...]  # replicas that may take traffic once ready (RUNNING, port confirmed, not draining)


class RouteSource(Protocol):
    def routes(self) -> Mapping[str, ServiceRoute]:
        """Every service the gateway serves, by name, as the store has them now. Blocks (it reads a database):
        the gateway calls it in a thread, every `refresh_s`. May raise: the gateway then keeps the routes it had."""
        ...


# Whether the caller of `conn` may use `route`. Raises corral.core.errors.AuthError (401: no or a bad credential),
# ForbiddenError (403) or NotFoundError (404: another tenant's service looks exactly like a missing one). Never
# called for public routes. Called once per request: it should answer from a cache, not the database each time.
Authorize = Callable[[HTTPConnection, ServiceRoute], Awaitable[None]]
# A request is waiting for a replica of service `service_id` (scale from zero). Called from a worker thread, at most
# once a second per service while requests wait; must be thread-safe.
DemandHook = Callable[[int], None]
