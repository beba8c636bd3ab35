"""The server's components in one frozen, typed container, built once by the app factory (server/app.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from starlette.applications import Starlette

if TYPE_CHECKING:  # the classes only: importing them here would make auth -> context -> services -> auth a cycle
    from corral.server.background.autoscaler import Autoscaler
    from corral.server.background.clusters import ClusterBridge
    from corral.server.background.leadership import Leadership
    from corral.server.background.scheduling import Scheduler
    from corral.server.ca import CertificateAuthority
    from corral.server.directory.ldap import LdapDirectory
    from corral.server.directory.oidc import OidcClient
    from corral.server.health import TelemetryService
    from corral.server.keyring import Keyring
    from corral.server.passwords import PasswordPool
    from corral.server.services.agents import ReportOrder
    from corral.server.services.alerting import AlertService
    from corral.server.services.budgets import BudgetTracker
    from corral.server.services.identity import NodeIdentities
    from corral.server.services.inventory import NodePages
    from corral.server.services.job_ui import JobPages
    from corral.server.services.login import LoginGuard
    from corral.server.services.logs import LogStore
    from corral.server.services.notify import NodeNotifier
    from corral.server.services.schedules import ScheduleRunner
    from corral.server.services.service_runtime import ServiceManager
    from corral.server.services.webports import WebPortRegistry
    from corral.server.settings import Settings
    from corral.store.base import StateStore


@dataclass(frozen=True, slots=True)
class ServerContext:
    """Everything a route or service may need, shared by the API, job-UI and agent apps (one per server)."""

    settings: Settings
    store: StateStore  # every store role (corral.store.protocols); services take the roles they use
    keyring: Keyring  # seals tenant secrets and stored credentials (docs/secrets.md)
    notifier: NodeNotifier  # wakes an agent's long poll
    scheduler: Scheduler
    telemetry: TelemetryService  # ingest and GPU health (server/health)
    alerting: AlertService
    schedules: ScheduleRunner
    logs: LogStore
    web_ports: WebPortRegistry  # who listens on jobs' web-UI ports, as agents report it (proxy)
    ca: CertificateAuthority  # the cluster CA in the data dir (agents' mutual TLS)
    identities: NodeIdentities  # the node certificates the CA issued
    node_cert_lifetime: timedelta
    directory: LdapDirectory | None  # None without CORRAL_LDAP_URL (docs/directory-login.md)
    oidc: OidcClient | None  # None without CORRAL_OIDC_ISSUER
    passwords: PasswordPool  # password hashing on a small pool of its own
    logins: LoginGuard  # the failed-login back-off (server/services/login.py)
    report_order: ReportOrder  # per node, the newest agent report applied (services/agents.py)
    leadership: Leadership  # whether this replica leads the others on the same database (issue 17)
    services: ServiceManager  # long-running services: the gateway, its counts, the controller (issue 18)
    autoscaler: Autoscaler  # cloud pools: the leader's loop that starts and releases their nodes (issue 19)
    clusters: ClusterBridge  # slurm and kubernetes pools: the leader's loop that runs jobs on them (issue 20)
    budgets: BudgetTracker  # tenants' spend this period against their budgets (issue 19)
    job_pages: JobPages  # each listed job's JSON while nothing it is made of changed (GET /api/v1/jobs)
    node_pages: NodePages  # each listed node's JSON while the node is the same (GET /api/v1/nodes)


def context_of(app: object) -> ServerContext:
    """The context the app factory stored on `app` (the API app, or the job-UI or agent app sharing its state)."""
    ctx = getattr(getattr(app, "state", None), "ctx", None)
    if not isinstance(ctx, ServerContext):
        raise RuntimeError("this app was not built by corral.server.app.create_app (no server context)")
    return ctx


def gateway_app_of(app: object) -> Starlette | None:
    """The services' gateway app on its own port (CORRAL_GATEWAY_PORT), or None when it is on the API port."""
    gw = getattr(getattr(app, "state", None), "gateway_app", None)
    return gw if isinstance(gw, Starlette) else None


def job_ui_app_of(app: object) -> Starlette | None:
    """The job-UI app sharing `app`'s state (CORRAL_JOB_UI_PORT), or None when job UIs are on the API port."""
    ui = getattr(getattr(app, "state", None), "job_ui_app", None)
    return ui if isinstance(ui, Starlette) else None
