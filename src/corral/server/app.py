"""The server's app factory: store, scheduler thread, routers, error mapping, web page."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from corral import __version__
from corral.core.health import HealthPolicy
from corral.server.errors import install_error_handlers
from corral.server.routers import agents, alerts, health, jobs, metrics, nodes, proxy, reports, schedules, session, tenants, users, web
from corral.server.services.alerting import AlertService
from corral.server.services.logs import LogStore
from corral.server.services.telemetry import TelemetryService
from corral.server.services.notify import NodeNotifier
from corral.server.services.scheduling import Scheduler
from corral.server.services.schedules import ScheduleRunner
from corral.server.settings import Settings
from corral.store.sql import SqlStore, open_store

log = logging.getLogger("corral.server")


def create_app(settings: Settings, store: SqlStore | None = None) -> FastAPI:
    """Build the app; the store is opened (and migrated) here unless one is passed in."""
    store = store or open_store(settings.effective_database_url)
    notifier = NodeNotifier()
    scheduler = Scheduler(store, notifier, settings.policy, settings.schedule_interval_s, settings.node_lost_after_s,
                          retry_backoff_s=settings.retry_backoff_s, queueing=settings.queueing,
                          cancel_grace_s=settings.cancel_grace_s)
    policy = HealthPolicy(fatal_xids=settings.fatal_xid_set, temperature_limit_c=settings.gpu_temperature_limit_c,
                          recovery_checks=settings.health_recovery_checks)
    telemetry = TelemetryService(store, policy, backoff_s=settings.retry_backoff_s)
    alerting = AlertService(store, telemetry, settings)
    schedules_runner = ScheduleRunner(store, scheduler.trigger, notifier)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        notifier.bind(asyncio.get_running_loop())
        scheduler.start()
        alerting.start()
        schedules_runner.start()
        try:
            yield
        finally:
            schedules_runner.stop()
            alerting.stop()
            scheduler.stop()
            store.close()

    app = FastAPI(title="Corral", version=__version__, lifespan=lifespan,
                  description="Self-hosted GPU cluster manager. Authenticate with `Authorization: Bearer <token>`.")
    app.state.settings = settings
    app.state.store = store
    app.state.notifier = notifier
    app.state.scheduler = scheduler
    app.state.telemetry = telemetry
    app.state.health = telemetry
    app.state.alerting = alerting
    app.state.schedules = schedules_runner
    app.state.logs = LogStore(settings.data_dir / "logs")
    install_error_handlers(app)
    for module in (health, jobs, schedules, nodes, agents, tenants, users, metrics, alerts, reports, session, web):
        app.include_router(module.router)
    if settings.effective_job_ui_port:
        app.include_router(proxy.redirect_router)
        app.state.job_ui_app = create_job_ui_app(app)
    else:
        app.include_router(proxy.router)
        app.state.job_ui_app = None
    return app


def create_job_ui_app(app: FastAPI) -> FastAPI:
    """Jobs' own web UIs on an origin of their own (CORRAL_JOB_UI_PORT): nothing but /proxy/jobs/ID/... is
    served there, so a job's page can neither read the portal's pages nor call the API as the user who opens
    it (the API port answers no cross-origin requests). It shares the main app's state (store, settings)."""
    ui = FastAPI(title="Corral job UIs", openapi_url=None, docs_url=None, redoc_url=None)
    ui.state = app.state
    install_error_handlers(ui)
    ui.include_router(proxy.router)
    return ui
