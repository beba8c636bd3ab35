"""The server's app factory: store, scheduler thread, routers, error mapping, web page."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral import __version__
from corral.core.budgets import describe_hold
from corral.core.health import HealthPolicy
from corral.core.login_backoff import BackoffPolicy
from corral.gateway.app import BODY_DEADLINE_S as GATEWAY_BODY_DEADLINE_S
from corral.gateway.app import BODY_IDLE_S as GATEWAY_BODY_IDLE_S
from corral.gateway.app import MAX_BODIES_BYTES as GATEWAY_MAX_BODIES_BYTES
from corral.gateway.app import MAX_BODY_BYTES as GATEWAY_MAX_BODY_BYTES
from corral.gateway.app import create_gateway_app
from corral.server.background.autoscaler import Autoscaler, JoinAccess
from corral.server.background.clusters import ClusterBridge
from corral.server.background.leadership import Leadership
from corral.server.background.scheduling import Scheduler
from corral.server.ca import CertificateAuthority
from corral.server.context import ServerContext
from corral.server.directory.ldap import build_ldap_directory
from corral.server.directory.oidc import build_oidc_client
from corral.server.errors import error_body, install_error_handlers
from corral.server.health import SchedulerAndAgentWaker, TelemetryService
from corral.server.inputs import InputGuard
from corral.server.keyring import load_keyring
from corral.server.openapi import document_error_responses
from corral.server.passwords import PasswordPool
from corral.server.routers import (
    agents,
    alerts,
    health,
    jobs,
    metrics,
    nodes,
    pools,
    proxy,
    reports,
    schedules,
    services,
    session,
    tenants,
    users,
    web,
)
from corral.server.routers import budgets as budgets_router
from corral.server.routers import directory as directory_router
from corral.server.routers import join as join_router
from corral.server.routers import oidc as oidc_router
from corral.server.routers import secrets as secrets_router
from corral.server.routers import unix_identity as unix_identity_router
from corral.server.services.agents import ReportOrder
from corral.server.services.alerting import AlertService
from corral.server.services.budgets import BudgetTracker
from corral.server.services.identity import NodeIdentities, create_pool_join_token
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
from corral.store.sql import open_store

log = logging.getLogger("corral.server")


def open_server_store(settings: Settings) -> StateStore:
    """The store CORRAL_DATABASE_URL names (SQLite or PostgreSQL), migrated: the one place the server picks an
    implementation; everything else sees the role protocols (corral.store.protocols)."""
    return open_store(settings.effective_database_url)


def create_app(
    settings: Settings,
    store: StateStore | None = None,
    *,
    serves: str = "all",
    replica_id: str | None = None,
    view_path: Path | None = None,
) -> FastAPI:
    """Build the app; the store is opened (and migrated) here unless one is passed in. `serves`: what this process
    of the server does (server/workers.py): "all" (a server of one process), or in a server of several "people"
    (people's ports: it computes no plan, and tells people what the loops' process wrote to `view_path`),
    "agents" (the agents' port: it computes no plan) or "loops" (it alone leads, runs the scheduler's passes and
    the other loops, and writes what people are told to `view_path`). `replica_id`: this process's id among the
    replicas (default: a new one; a worker's extends its starter's)."""
    if serves not in ("all", "people", "agents", "loops"):
        raise ValueError(f"serves: {serves!r}")
    store = store or open_server_store(settings)
    # Refuses to start (one line why) when the key file is missing, too open or not this database's.
    keyring = load_keyring(settings.effective_secrets_key_file, store.secret_key_ids())
    notifier = NodeNotifier()
    # Several replicas may share the database: the leader applies plans and runs the loops that run once
    # (server/background/leadership.py); the scheduler wakes on a change of leader.
    one_server = bool(getattr(store, "is_sqlite", False))  # SQLite: one server; PostgreSQL: replicas may share it
    leadership = Leadership(
        store, settings.url, solo=one_server, replica_id=replica_id, candidate=serves in ("all", "loops")
    )
    scheduler = Scheduler(
        store,
        notifier,
        settings.policy,
        settings.schedule_interval_s,
        settings.node_lost_after_s,
        retry_backoff_s=settings.retry_backoff_s,
        queueing=settings.queueing,
        cancel_grace_s=settings.cancel_grace_s,
        leading=lambda: leadership.leading,
        explains=serves in ("all", "loops"),
        recheck_s=settings.schedule_recheck_s,
        view_out=view_path if serves == "loops" else None,
        view_in=view_path if serves == "people" else None,
    )
    leadership.on_change = lambda _leading: scheduler.trigger.fire()
    policy = HealthPolicy(
        fatal_xids=settings.fatal_xid_set,
        temperature_limit_c=settings.gpu_temperature_limit_c,
        recovery_checks=settings.health_recovery_checks,
    )
    # a GPU that fails or comes back wakes the scheduler and the node's agent (server/health/consequences.py)
    telemetry = TelemetryService(
        store, policy, backoff_s=settings.retry_backoff_s, waker=SchedulerAndAgentWaker(scheduler.trigger, notifier)
    )
    # replicas: the leader's rules also read the samples other replicas stored, and the others answer GET /alerts
    # with the alerts the leader saved (docs/monitoring.md "Alerts with several replicas")
    alerting = AlertService(
        store,
        telemetry,
        settings,
        shared=not one_server,
        leading=lambda: leadership.leading,
        replica_id=leadership.id,
    )
    schedules_runner = ScheduleRunner(store, scheduler.trigger, notifier, rules=settings.submit_rules)
    web_ports = WebPortRegistry(store=store)
    # long-running services: every replica serves their gateway; the leader runs the controller (issue 18)
    service_manager = ServiceManager(
        store,
        web_ports,
        scheduler.trigger,
        notifier,
        server_id=leadership.id,
        leading=lambda: leadership.leading,
        activation_timeout_s=settings.service_activation_timeout_s,
        on_api_port=not settings.effective_gateway_port,
        rules=settings.submit_rules,
    )
    alerting.loop.gate = schedules_runner.loop.gate = lambda: leadership.leading
    ca = CertificateAuthority.load_or_create(settings.data_dir)
    identities = NodeIdentities(store)
    # budgets (issue 19): spend this period per tenant, owned and cloud GPUs alike; used up -> its policy applies
    budgets = BudgetTracker(store, settings.owned_gpu_price_per_hour)
    scheduler.held_tenants = lambda: {tid: describe_hold(s) for tid, s in budgets.held().items()}
    alerting.budget_used = lambda: {t: s.used_pct for t, s in budgets.statuses().items()}
    # cloud pools (issue 19): the leader's autoscaler starts nodes that join with one-time tokens bound to their name
    autoscaler = Autoscaler(
        store,
        scheduler,
        JoinAccess(url=settings.agent_url, make_token=lambda ttl, what: create_pool_join_token(store, ca, ttl, what)),
        settings.data_dir / "pools",
        latest=telemetry.latest,
        forget_node=identities.forget_node,
        leading=lambda: leadership.leading,
        no_burst=budgets.no_burst,
        wake_node=notifier.notify,
        shared=not one_server,
    )
    scheduler.on_waiting = autoscaler.wake  # jobs left waiting: the autoscaler looks at once, not at its next tick
    if serves == "loops":  # what people read of the other loops, handed to the people's process with the queue's
        scheduler.view_extra = lambda: {
            "notifiers": [asdict(s) for s in alerting.dispatcher.status()],
            "demand": {pool: list(d) for pool, d in autoscaler.demand_by_pool().items()},
        }
    elif serves == "people":
        alerting.remote_notifiers = lambda: scheduler.leader_facts.get("notifiers")
        autoscaler.remote_demand = lambda: scheduler.leader_facts.get("demand")
    job_logs = LogStore(settings.data_dir / "logs", settings.job_log_max_bytes)
    # slurm and kubernetes pools (issue 20): the leader hands the jobs placed there to their cluster and follows them
    clusters = ClusterBridge(
        store,
        job_logs,
        keyring,
        leading=lambda: leadership.leading,
        on_freed=scheduler.trigger.fire,
        uids=settings.job_uid_range,
    )
    notifier.listeners.append(clusters.on_node_notified)
    directory = build_ldap_directory(settings)  # None without CORRAL_LDAP_URL (docs/directory-login.md)
    # Password hashing on a small pool of its own, and the failed-login back-off (server/services/login.py).
    passwords = PasswordPool(settings.password_hash_workers, settings.password_hash_queue)
    logins = LoginGuard(
        store,
        passwords,
        BackoffPolicy(free_failures=settings.login_failures_allowed, max_s=settings.login_lockout_max_s),
        directory,
    )
    # Node identity (docs/settings.md, "More machines" in the README): the cluster CA in the data dir, the
    # certificates it issued (agents' mutual TLS) and how long a node certificate lives.
    ctx = ServerContext(
        settings=settings,
        store=store,
        keyring=keyring,
        notifier=notifier,
        scheduler=scheduler,
        telemetry=telemetry,
        alerting=alerting,
        schedules=schedules_runner,
        logs=job_logs,
        web_ports=web_ports,
        ca=ca,
        identities=identities,
        node_cert_lifetime=timedelta(seconds=settings.node_cert_ttl_s),
        directory=directory,
        oidc=build_oidc_client(settings),
        passwords=passwords,
        logins=logins,
        report_order=ReportOrder(None if one_server else store),
        leadership=leadership,
        services=service_manager,
        autoscaler=autoscaler,
        budgets=budgets,
        clusters=clusters,
        job_pages=JobPages(),
        node_pages=NodePages(),
    )

    gateway_on_api_port = not settings.effective_gateway_port
    # the gateway's route refresh and readiness probes: started by the gateway port's app, else by this app's
    # lifespan (on the API port; in the loops' process, which serves no port but whose services controller reads them)
    starts_gateway = gateway_on_api_port or serves == "loops"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        notifier.bind(asyncio.get_running_loop())
        await asyncio.to_thread(leadership.claim)  # a lone replica leads from its first pass
        leadership.start()
        scheduler.start()
        alerting.start()
        schedules_runner.start()
        service_manager.start()
        autoscaler.start()
        clusters.start()
        if starts_gateway:
            await service_manager.gateway.start()
        logins.purge(older_than_s=86400)  # failed-login counters nobody has added to for a day
        try:
            yield
        finally:
            if starts_gateway:
                await service_manager.gateway.stop()
            autoscaler.stop(timeout_s=30.0)
            clusters.stop(timeout_s=30.0)
            service_manager.stop()
            schedules_runner.stop()
            alerting.stop()
            scheduler.stop()
            leadership.stop()  # gives the lease up: another replica leads at once
            passwords.close()
            store.close()

    app = FastAPI(
        title="Corral",
        version=__version__,
        lifespan=lifespan,
        description="Self-hosted GPU cluster manager. Authenticate with `Authorization: Bearer <token>`.",
    )
    app.state.ctx = ctx  # the one place the components live; routes read them through server/deps.py
    install_error_handlers(app)
    install_page_not_found(app)
    # bodies bounded (each, all at once, in time) and NUL bytes refused, before any route, authentication included
    # (server/inputs.py); the gateway's bodies are its own to bound
    app.add_middleware(InputGuard, passthrough="/services" if gateway_on_api_port else None)
    document_error_responses(app)  # the OpenAPI lists every error status the routes answer
    for module in (
        health,
        jobs,
        schedules,
        services,
        pools,
        budgets_router,
        nodes,
        agents,
        tenants,
        users,
        metrics,
        alerts,
        reports,
        session,
        web,
    ):
        app.include_router(module.router)
    app.include_router(directory_router.router)
    app.include_router(oidc_router.router)
    app.include_router(secrets_router.router)
    app.include_router(join_router.router)
    app.include_router(unix_identity_router.router)
    # the services' gateway: on its own port (runtime.py serves app.state.gateway_app), or here under /services/
    gateway_app = create_gateway_app(service_manager.gateway, lifespan=True)
    gateway_app.state.ctx = ctx
    if gateway_on_api_port:
        app.mount("/services", _GatewayMount(gateway_app))
        app.state.gateway_app = None
    else:
        app.state.gateway_app = gateway_app
    if settings.effective_job_ui_port:
        app.include_router(proxy.redirect_router)
        app.state.job_ui_app = create_job_ui_app(app)
    else:
        app.include_router(proxy.router)
        app.state.job_ui_app = None
    return app


class _GatewayMount:
    """The gateway under the API port's /services (CORRAL_GATEWAY_PORT=0): the mount strips /services from the
    path; the gateway's routes expect it, so it is put back."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope["path"]
            if not path.startswith("/services/") and path != "/services":  # older Starlette: the mount stripped it
                path = "/services" + path
            scope = {**scope, "path": path, "root_path": ""}
        await self.app(scope, receive, send)


def install_page_not_found(app: FastAPI) -> None:
    """No route: a browser's page path (/nosuchpage) gets the portal's 404 page, HTML with status 404; the API and
    the other machine paths keep the JSON error body."""

    @app.exception_handler(404)
    async def _not_found(request: Request, exc: StarletteHTTPException) -> Response:
        if web.is_page_path(request.method, request.url.path):
            return web.page_not_found()
        return JSONResponse(error_body("http_error", str(exc.detail)), status_code=404)


def create_job_ui_app(app: FastAPI) -> FastAPI:
    """Jobs' own web UIs on an origin of their own (CORRAL_JOB_UI_PORT): nothing but /proxy/jobs/ID/... is
    served there, so a job's page can neither read the portal's pages nor call the API as the user who opens
    it (the API port answers no cross-origin requests). It shares the main app's state (store, settings)."""
    ui = FastAPI(title="Corral job UIs", openapi_url=None, docs_url=None, redoc_url=None)
    ui.state = app.state
    install_error_handlers(ui)
    # The proxy reads a request's body whole before it goes to the job: bounded (server/inputs.py) as the services'
    # gateway bounds a replica's, with a budget of this port's own; not checked for NUL bytes (the job's, not Corral's).
    ui.add_middleware(
        InputGuard,
        max_body_bytes=GATEWAY_MAX_BODY_BYTES,
        max_bodies_bytes=GATEWAY_MAX_BODIES_BYTES,
        body_idle_s=GATEWAY_BODY_IDLE_S,
        body_deadline_s=GATEWAY_BODY_DEADLINE_S,
        check_nul=False,
    )
    ui.include_router(proxy.router)
    return ui


def create_agent_app(app: FastAPI) -> FastAPI:
    """The agents' port (mutual TLS, CORRAL_AGENT_PORT): only the join exchange and the agent routes, which
    check the client certificate's node. It shares the main app's state."""
    agent_app = FastAPI(title="Corral agents", openapi_url=None, docs_url=None, redoc_url=None)
    agent_app.state = app.state
    install_error_handlers(agent_app)
    agent_app.add_middleware(InputGuard)  # bodies and NUL bytes, as on the API port (its own budget of bodies)
    agent_app.include_router(health.router)
    agent_app.include_router(agents.router)
    agent_app.include_router(join_router.join_only_router)
    return agent_app
