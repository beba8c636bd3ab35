"""Run the server (uvicorn) in this process, in the foreground or on background threads: the API and portal
(HTTPS beyond loopback), the job-UI port, and the agents' mutual-TLS port."""

from __future__ import annotations

import gc
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import uvicorn

from corral.api.paths import secure_data_dir
from corral.server.app import create_agent_app, create_app, open_server_store
from corral.server.bootstrap import Credentials, ensure_credentials
from corral.server.ca import CertificateAuthority, default_server_names, write_private
from corral.server.context import context_of, gateway_app_of, job_ui_app_of
from corral.server.services.identity import issue_local_node_cert
from corral.server.settings import Settings
from corral.server.tls import TlsH11Protocol, agent_ssl_context, https_ssl_context
from corral.server.workers import bind_sockets
from corral.store.base import StateStore

# How long the agent port keeps an idle connection (uvicorn's default: 5 s). An agent sends telemetry every few
# seconds and syncs again as soon as a long poll ends; closing its connections after 5 s idle made every agent a
# new TLS handshake every few seconds (200 a second for 1,000 agents: bench/api_load.py). The agents' own idle
# limit (sdk.client.AgentClient.keepalive_s) is shorter, so an agent never sends on a connection being closed.
AGENT_KEEP_ALIVE_S = 75


class StartStopped(RuntimeError):
    """`ServerThread.start` was asked to stop (a Ctrl-C while starting): what it had started is stopped again."""


def _factory(
    make: Callable[[], ssl.SSLContext],
) -> Callable[[uvicorn.Config, Callable[[], ssl.SSLContext]], ssl.SSLContext]:
    return lambda _config, _default: make()


# The collector's young-generation threshold in a server process (CPython's default: 700 allocations). A server holds
# hundreds of thousands of long-lived objects (its caches of jobs, pages and nodes' samples) that agents' reports
# replace all the time; with the default, objects outlived young collections, the oldest generation grew by a
# quarter every few seconds, and each full collection held the interpreter for 0.25-0.4 s (1,000 agents, 10,000
# pending jobs: bench/api_load.py): every request in flight waited. Young collections further apart let most of those
# objects die first (by reference count, as most do).
GC_YOUNG_THRESHOLD = 50_000


# The switch interval of each process of a server of several processes (CORRAL_WORKERS > 1) unless
# CORRAL_SWITCH_INTERVAL_MS says otherwise. bench/api_load.py on PostgreSQL (2 processes, 1,000 agents, 32 clients):
# the reads' p99 0.44-0.81 s -> 0.18-0.44 s, agent ticks 5-10% fewer. A server of one process (SQLite) serves the
# agents on the same interpreter; one run there gave a quarter fewer agent ticks, within what its runs vary by, so it
# keeps CPython's 5 ms until measured better.
WORKERS_SWITCH_INTERVAL_MS = 0.5


def switch_interval_ms(setting: float | None, serves: str) -> float | None:
    """The switch interval a server process sets (None: CPython's own), from CORRAL_SWITCH_INTERVAL_MS and what the
    process serves ("all": a server of one process; "people" or "agents": one of several)."""
    if setting is not None:
        return setting
    return None if serves == "all" else WORKERS_SWITCH_INTERVAL_MS


def settle_heap(switch_setting_ms: float | None = None, serves: str = "all") -> None:
    """Once the server has started: what it made to start (modules, schemas, the app; most of the heap) is frozen out
    of the collector's reach (gc.freeze: full collections then walk only what was made since; those objects are still
    freed by reference count), and young collections are spaced GC_YOUNG_THRESHOLD allocations apart.

    `switch_setting_ms` (CORRAL_SWITCH_INTERVAL_MS) and `serves` (what this process serves) give the switch interval
    (`switch_interval_ms`): a thread that waits for the interpreter gets it after at most this long. A request gives the interpreter up at each database query and each hand-over between the event loop
    and its thread, and takes it back after: while a background pass (a scheduling plan, an alert round) computed,
    each of those cost up to CPython's 5 ms, tens of times a request (None: CPython's own; see
    WORKERS_SWITCH_INTERVAL_MS)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
    interval_ms = switch_interval_ms(switch_setting_ms, serves)
    if interval_ms is not None:
        sys.setswitchinterval(interval_ms / 1000)


def https_files(settings: Settings, ca: CertificateAuthority) -> tuple[Path, Path]:
    """The certificate people's ports serve: the operator's (CORRAL_TLS_CERT/KEY) or one from the cluster CA."""
    if settings.tls_cert:
        if not settings.tls_key:
            raise RuntimeError("CORRAL_TLS_CERT is set but CORRAL_TLS_KEY is not")
        return Path(settings.tls_cert), Path(settings.tls_key)
    return ca.ensure_server_cert(server_names(settings))


def server_names(settings: Settings) -> list[str]:
    extra = [n.strip() for n in settings.tls_names.split(",") if n.strip()]
    return list(dict.fromkeys(default_server_names(settings.host) + extra))


def lifespan_only(app: Any) -> Any:
    """`app`'s start and stop, and a 404 for every request (a websocket is closed)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await app(scope, receive, send)
        elif scope["type"] == "http":
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"this Corral process answers no request on this port\n"})
        else:
            await send({"type": "websocket.close", "code": 1008})

    return wrapped


def agent_port_failure(settings: Settings) -> str:
    return (
        f"the agent port {settings.host}:{settings.effective_agent_port} could not be opened (is it taken? set "
        "CORRAL_AGENT_PORT)"
    )


class _Listener:
    def __init__(self, name: str, server: uvicorn.Server, failure: str) -> None:
        self.server = server
        self.failure = failure
        self.sockets: list[socket.socket] = []  # a worker's agents' port, handed by its starter (else uvicorn binds)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        self.server.run(sockets=self.sockets or None)


class ServerThread:
    """The API server on threads, so one process can also host the local agent (`corral up`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        serves: str = "all",
        agent_sockets: Sequence[socket.socket] = (),
        replica_id: str | None = None,
        view_path: Path | None = None,
    ) -> None:
        """For CORRAL_WORKERS (server/workers.py): `serves` "people" (the API, job-UI and gateway ports; the agents'
        port is bound at `start`, in `agent_sockets`, for the workers), "agents" (the agents' port on the
        `agent_sockets` its starter handed it, which checked every port; the app runs on a loopback port of its own
        that answers no request) or "loops" (no port: the leader's loops; `view_path`, what it tells the people's
        process, server/background/scheduler_view.py)."""
        if serves not in ("all", "people", "agents", "loops"):
            raise ValueError(f"serves: {serves!r}")
        self.settings = settings
        self.serves = serves
        self.agent_sockets = list(agent_sockets)
        # 0700 before anything is written there; again once the database, tokens and CA exist (older installs)
        private = (settings.data_dir, (settings.data_dir / "jobs",))  # jobs/: a single-user agent's jobs' own dirs
        secure_data_dir(*private)
        self.store: StateStore = open_server_store(settings)
        self.credentials: Credentials = ensure_credentials(self.store, settings.data_dir)
        app = create_app(settings, self.store, serves=serves, replica_id=replica_id, view_path=view_path)
        self.app = app
        secure_data_dir(*private)
        self.ca: CertificateAuthority = context_of(app).ca
        people_tls: dict[str, Any] = {}
        if settings.serves_https:
            cert, key = https_files(settings, self.ca)
            people_tls = {"ssl_context_factory": _factory(lambda: https_ssl_context(cert, key))}
        common: dict[str, Any] = {
            "host": settings.host,
            "log_level": "warning",
            "access_log": False,
            "timeout_graceful_shutdown": 2,
        }  # agents' long polls would hold a longer one
        # A worker (serving agents, or the loops) runs the app (its lifespan: the loops, the leader lease) on a
        # loopback port of its own that answers no request: people reach the API through its starter only.
        worker = serves in ("agents", "loops")
        api = {"port": 0, "host": "127.0.0.1"} if worker else {"port": settings.port}
        self.listeners = [
            _Listener(
                "corral-server",
                uvicorn.Server(uvicorn.Config(lifespan_only(app) if worker else app, **(common | api), **people_tls)),
                f"the server could not start on {settings.host}:{settings.port} (is the port taken?)",
            )
        ]
        # Jobs' web UIs on their own port (origin); it serves only /proxy/jobs/... and shares the app's state.
        job_ui_app = None if worker else job_ui_app_of(app)
        if job_ui_app is not None:
            self.listeners.append(
                _Listener(
                    "corral-job-ui",
                    uvicorn.Server(
                        uvicorn.Config(
                            job_ui_app, port=settings.effective_job_ui_port, lifespan="off", **common, **people_tls
                        )
                    ),
                    f"the job-UI port {settings.host}:{settings.effective_job_ui_port} could not be opened (is it taken? "
                    "set CORRAL_JOB_UI_PORT to another port, or 0 to serve job UIs on the API port)",
                )
            )
        # The services' gateway on its own port (/services/NAME/...); it shares the app's state.
        gateway_app = None if worker else gateway_app_of(app)
        if gateway_app is not None:
            self.listeners.append(
                _Listener(
                    "corral-gateway",
                    uvicorn.Server(
                        uvicorn.Config(
                            gateway_app,
                            port=settings.effective_gateway_port,
                            lifespan="on",
                            proxy_headers=False,  # X-Forwarded-For from a client is not its address
                            **common,
                            **people_tls,
                        )
                    ),
                    f"the gateway port {settings.host}:{settings.effective_gateway_port} could not be opened (is it "
                    "taken? set CORRAL_GATEWAY_PORT to another port, or 0 to serve services on the API port)",
                )
            )
        if serves == "people":
            # the agents' port is the workers': its certificate is made here, before they start (several
            # processes issuing it at once could leave a key that does not match the certificate)
            self.ca.ensure_server_cert(server_names(settings))
            return
        if serves == "loops":
            return
        # Agents: mutual TLS with the cluster CA's server certificate, client certificates verified.
        agent_cert, agent_key = self.ca.ensure_server_cert(server_names(settings))
        agent_tls = _factory(lambda: agent_ssl_context(agent_cert, agent_key, self.ca.cert_path))
        self.listeners.append(
            _Listener(
                "corral-agents",
                uvicorn.Server(
                    uvicorn.Config(
                        create_agent_app(app),
                        port=settings.effective_agent_port,
                        lifespan="off",
                        http=TlsH11Protocol,
                        ssl_context_factory=agent_tls,
                        timeout_keep_alive=AGENT_KEEP_ALIVE_S,
                        **common,
                    )
                ),
                agent_port_failure(settings),
            )
        )

    @property
    def server(self) -> uvicorn.Server:
        return self.listeners[0].server

    def provision_local_agent(self, node: str, tls_dir: Path) -> None:
        """Key, certificate and CA for the in-process agent of `corral up`, straight from the CA (no token).
        The caller checks first whether the ones in `tls_dir` are still good (a restart reuses them)."""
        provision_node_files(self.store, self.ca, node, tls_dir, context_of(self.app).node_cert_lifetime)

    def start(self, timeout_s: float = 30.0, stop: threading.Event | None = None) -> None:
        """Start and wait until every port is bound. Raises RuntimeError if one never comes up. Every port is
        tried first: whoever waits for the API's port (a script, `make up`, a benchmark) should not see a server
        that exits a moment later because a port it opens after the API's is taken (the agents' port too when
        this process leaves it to its workers)."""
        if self.serves not in ("agents", "loops"):  # a worker's ports are its starter's, checked there
            ports = [(lst.server.config.host, lst.server.config.port, lst.failure) for lst in self.listeners]
            if self.serves == "people":
                s = self.settings
                ports.append((s.host, s.effective_agent_port, agent_port_failure(s)))
            check_ports_free(ports)
        if self.serves == "people":  # bound now, for the workers: nothing else can take it before they start
            s = self.settings
            try:
                self.agent_sockets = bind_sockets(s.host, s.effective_agent_port)
            except OSError as e:
                raise RuntimeError(
                    f"the agent port {s.host}:{s.effective_agent_port} could not be opened: {e.strerror or e}"
                ) from e
        elif self.serves == "agents":
            self.listeners[-1].sockets = self.agent_sockets
        for i, listener in enumerate(self.listeners):
            listener.thread.start()
            try:
                self._wait(listener, timeout_s, stop)
            except StartStopped:
                self.stop()  # what started, this one included (it may still be coming up)
                raise
            except RuntimeError:
                if i:
                    self.stop()
                raise

    @staticmethod
    def _wait(listener: _Listener, timeout_s: float, stop: threading.Event | None = None) -> None:
        """Until the listener serves; `stop` set (a Ctrl-C while starting) ends the wait at once."""
        deadline = time.monotonic() + timeout_s
        while not listener.server.started:
            if stop is not None and stop.is_set():
                raise StartStopped("stopped while starting (a signal came)")
            if not listener.thread.is_alive():
                raise RuntimeError(listener.failure)
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start in time")
            time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return all(listener.thread.is_alive() for listener in self.listeners)

    def stop(self, timeout_s: float = 10.0) -> None:
        for listener in reversed(self.listeners):
            listener.server.should_exit = True
        for listener in reversed(self.listeners):
            if listener.thread.is_alive():
                listener.thread.join(timeout=timeout_s)
        if self.serves == "people":  # the workers' port: closed once they are stopped
            for sock in self.agent_sockets:
                sock.close()


def check_ports_free(listeners: Sequence[tuple[str, int, str]]) -> None:
    """RuntimeError(failure, with the system's reason) for the first (host, port, failure) that cannot be bound now,
    as uvicorn (asyncio) binds it: every address the host resolves to, SO_REUSEADDR, IPv6 sockets IPv6-only. The
    probes listen until all are checked, so two listeners given one port fail too. Port 0 and hosts that do not
    resolve are left to uvicorn."""
    with ExitStack() as probes:
        for host, port, failure in listeners:
            if not port:
                continue
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            except OSError:
                continue
            for family, kind, proto, _, address in dict.fromkeys(infos):
                probe = probes.enter_context(socket.socket(family, kind, proto))
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    probe.bind(address)
                    probe.listen()
                except OSError as e:
                    raise RuntimeError(f"{failure}: {e.strerror}") from None


def provision_node_files(
    store: StateStore, ca: CertificateAuthority, node: str, tls_dir: Path, lifetime: timedelta
) -> None:
    """Write node.key, node.crt (0600) and ca.crt for `node` into `tls_dir`, issued by the CA directly: the
    in-process agent of `corral up`, which the server trusts as itself."""
    key_pem, cert = issue_local_node_cert(store, ca, node, lifetime)
    write_private(tls_dir / "node.key", key_pem)
    write_private(tls_dir / "ca.crt", ca.cert_pem.encode())
    write_private(tls_dir / "node.crt", cert.pem.encode())
