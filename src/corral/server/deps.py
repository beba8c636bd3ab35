"""Typed FastAPI dependencies: `Annotated` aliases for the server's components, read from its ServerContext."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from corral.server.background.scheduling import Scheduler
from corral.server.ca import CertificateAuthority
from corral.server.context import ServerContext, context_of
from corral.server.directory.ldap import LdapDirectory
from corral.server.directory.oidc import OidcClient
from corral.server.health import TelemetryService
from corral.server.keyring import Keyring
from corral.server.passwords import PasswordPool
from corral.server.services.alerting import AlertService
from corral.server.services.identity import NodeIdentities
from corral.server.services.login import LoginGuard
from corral.server.services.logs import LogStore
from corral.server.services.notify import NodeNotifier
from corral.server.services.schedules import ScheduleRunner
from corral.server.services.service_runtime import ServiceManager
from corral.server.services.webports import WebPortRegistry
from corral.server.settings import Settings
from corral.store.base import StateStore

# async: FastAPI awaits these on the event loop instead of sending each to the thread pool


async def get_context(conn: HTTPConnection) -> ServerContext:
    return context_of(conn.app)


async def get_settings(conn: HTTPConnection) -> Settings:
    return context_of(conn.app).settings


async def get_store(conn: HTTPConnection) -> StateStore:
    return context_of(conn.app).store


async def get_keyring(conn: HTTPConnection) -> Keyring:
    return context_of(conn.app).keyring


async def get_notifier(conn: HTTPConnection) -> NodeNotifier:
    return context_of(conn.app).notifier


async def get_scheduler(conn: HTTPConnection) -> Scheduler:
    return context_of(conn.app).scheduler


async def get_telemetry(conn: HTTPConnection) -> TelemetryService:
    return context_of(conn.app).telemetry


async def get_alerting(conn: HTTPConnection) -> AlertService:
    return context_of(conn.app).alerting


async def get_schedules(conn: HTTPConnection) -> ScheduleRunner:
    return context_of(conn.app).schedules


async def get_services(conn: HTTPConnection) -> ServiceManager:
    return context_of(conn.app).services


async def get_logs(conn: HTTPConnection) -> LogStore:
    return context_of(conn.app).logs


async def get_web_ports(conn: HTTPConnection) -> WebPortRegistry:
    return context_of(conn.app).web_ports


async def get_ca(conn: HTTPConnection) -> CertificateAuthority:
    return context_of(conn.app).ca


async def get_identities(conn: HTTPConnection) -> NodeIdentities:
    return context_of(conn.app).identities


async def get_node_cert_lifetime(conn: HTTPConnection) -> timedelta:
    return context_of(conn.app).node_cert_lifetime


async def get_directory(conn: HTTPConnection) -> LdapDirectory | None:
    return context_of(conn.app).directory


async def get_oidc(conn: HTTPConnection) -> OidcClient | None:
    return context_of(conn.app).oidc


async def get_passwords(conn: HTTPConnection) -> PasswordPool:
    return context_of(conn.app).passwords


async def get_logins(conn: HTTPConnection) -> LoginGuard:
    return context_of(conn.app).logins


ContextDep = Annotated[ServerContext, Depends(get_context)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[StateStore, Depends(get_store)]
KeyringDep = Annotated[Keyring, Depends(get_keyring)]
NotifierDep = Annotated[NodeNotifier, Depends(get_notifier)]
SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]
TelemetryDep = Annotated[TelemetryService, Depends(get_telemetry)]
AlertingDep = Annotated[AlertService, Depends(get_alerting)]
SchedulesDep = Annotated[ScheduleRunner, Depends(get_schedules)]
ServicesDep = Annotated[ServiceManager, Depends(get_services)]
LogsDep = Annotated[LogStore, Depends(get_logs)]
WebPortsDep = Annotated[WebPortRegistry, Depends(get_web_ports)]
CaDep = Annotated[CertificateAuthority, Depends(get_ca)]
IdentitiesDep = Annotated[NodeIdentities, Depends(get_identities)]
NodeCertLifetimeDep = Annotated[timedelta, Depends(get_node_cert_lifetime)]
DirectoryDep = Annotated[LdapDirectory | None, Depends(get_directory)]
OidcDep = Annotated[OidcClient | None, Depends(get_oidc)]
PasswordsDep = Annotated[PasswordPool, Depends(get_passwords)]
LoginsDep = Annotated[LoginGuard, Depends(get_logins)]
