"""The services gateway (issue 18): /services/NAME/... forwarded to a service's ready replicas.

Self-contained: it knows nothing of SQL or of the rest of the server. It is given its routing table (a
`RouteSource`) and its auth check (an `Authorize` callable) and reports traffic through `TrafficCounters`."""

from corral.gateway.app import Gateway, create_gateway_app
from corral.gateway.model import Authorize, DemandHook, Endpoint, RouteSource, ServiceRoute
from corral.gateway.stats import TrafficStats

__all__ = [
    "Authorize",
    "DemandHook",
    "Endpoint",
    "Gateway",
    "RouteSource",
    "ServiceRoute",
    "TrafficStats",
    "create_gateway_app",
]
