"""Long-running commands: `corral up` (server + local agent), `corral server`, `corral agent`."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

# The server and agent stacks are imported inside the commands: the job commands must start fast.

Host = Annotated[str | None, typer.Option(help="Address to listen on [env CORRAL_HOST, default 127.0.0.1].")]
Port = Annotated[int | None, typer.Option(help="Port to listen on [env CORRAL_PORT, default 8600].")]
DataDir = Annotated[Path | None, typer.Option(help="Data dir [env CORRAL_DATA_DIR, default ~/.local/share/corral].")]
DbUrl = Annotated[
    str | None, typer.Option(help="Database URL [env CORRAL_DATABASE_URL; default SQLite in the data dir].")
]
Gpus = Annotated[str | None, typer.Option(help="GPU backend: auto, nvml, none or sim:8xH100-80GB [env CORRAL_GPUS].")]
NodeName = Annotated[str | None, typer.Option(help="Node name of the agent [env CORRAL_NODE_NAME, default hostname].")]
Policy = Annotated[str | None, typer.Option(help="Placement policy [env CORRAL_POLICY].")]


def _logging() -> None:
    """Logging of the long-running commands; and every file they create private (umask 077: the data dir's
    database, tokens and logs are 0600; what jobs must reach is given its mode explicitly)."""
    os.umask(0o077)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _stop_on_signal() -> threading.Event:
    """An event that SIGINT/SIGTERM set, installed before anything starts. A Ctrl-C during the start then stops
    the command once it is up. Python's own KeyboardInterrupt is lost when it lands in a weakref callback or a
    collection (`settle_heap` runs a full one right after the start), and the command then never stopped."""
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def _wait_for_signal(stop: threading.Event, alive: Any = None) -> None:
    """Block until `stop` is set (by a signal: `_stop_on_signal`) or `alive()` turns false."""
    while not stop.wait(0.5):
        if alive is not None and not alive():
            break


def up(
    host: Host = None,
    port: Port = None,
    data_dir: DataDir = None,
    database_url: DbUrl = None,
    gpus: Gpus = None,
    node_name: NodeName = None,
    policy: Policy = None,
    stop_jobs: Annotated[
        bool,
        typer.Option(
            "--stop-jobs",
            help="On Ctrl-C, also end the jobs running on this node (SIGTERM, then SIGKILL after the grace period); "
            "without it they keep running and are adopted at the next start.",
        ),
    ] = False,
) -> None:
    """Start the server and one local agent in the foreground; Ctrl-C stops both (its jobs keep running unless
    --stop-jobs)."""
    from corral.agent.identity import usable_identity
    from corral.agent.main import AgentSettings, AgentThread
    from corral.server.bootstrap import ADMIN_TOKEN_FILE, JOIN_TOKEN_FILE, write_cli_config
    from corral.server.runtime import ServerThread, StartStopped, settle_heap
    from corral.server.settings import build_settings

    _logging()
    settings = build_settings(
        host=host,
        port=port,
        data_dir=data_dir,
        database_url=database_url,
        gpus=gpus,
        node_name=node_name,
        policy=policy,
    )
    server = ServerThread(settings)
    agent_settings = AgentSettings(
        server_url=settings.agent_url,
        gpus=settings.gpus,
        node_name=settings.node_name,
        data_dir=settings.data_dir,
        poll_wait_s=5.0,
        metrics_interval_s=settings.metrics_interval_s,
    )
    # The local agent speaks mutual TLS too; its certificate comes straight from the CA (kept while valid).
    if usable_identity(agent_settings.tls_files, settings.node_name) is not None:
        server.provision_local_agent(settings.node_name, agent_settings.tls_files.directory)
    agent = AgentThread(agent_settings)
    stop = _stop_on_signal()
    try:
        server.start(stop=stop)
    except StartStopped:  # a Ctrl-C while starting: nothing is left running
        print("stopping...", flush=True)
        return
    except RuntimeError as e:  # a port taken: one line that says which and what to set, not a traceback
        _fail(str(e))
    # The CLI verifies an https:// server with the cluster CA, unless the operator's own certificate is served
    # (then with the system's CAs, or CORRAL_CA_FILE).
    config = write_cli_config(
        settings.url, server.credentials.admin_token, "" if settings.tls_cert else server.ca.cert_pem
    )
    agent.start()
    settle_heap(settings.switch_interval_ms)
    print(f"Corral is up at {settings.url}  (node {settings.node_name}, GPUs: {agent.agent.backend.name})", flush=True)
    print(f"  admin token: {settings.data_dir / ADMIN_TOKEN_FILE}; CLI configured in {config}", flush=True)
    if settings.effective_job_ui_port:
        print(f"  jobs' own web UIs: port {settings.effective_job_ui_port} (CORRAL_JOB_UI_PORT)", flush=True)
    if settings.effective_gateway_port:
        print(f"  services' gateway: port {settings.effective_gateway_port} (CORRAL_GATEWAY_PORT)", flush=True)
    _print_join_hint(
        settings.agent_url,
        server.ca.fingerprint,
        settings.data_dir / JOIN_TOKEN_FILE,
        bool(server.credentials.join_token),
    )
    _wait_for_signal(stop, lambda: server.alive)
    print("stopping...", flush=True)
    _leave_or_stop_jobs(agent.agent.executor, stop_jobs, settings.cancel_grace_s)
    agent.stop()
    server.stop()


def _leave_or_stop_jobs(executor: Any, stop_jobs: bool, grace_s: float) -> None:
    """Say what becomes of the jobs still running on this node, and end them with --stop-jobs."""
    running = executor.running()
    if not running:
        return
    if not stop_jobs:
        print(
            f"{len(running)} job(s) keep running on this node and are adopted at the next start "
            "(`corral up --stop-jobs` ends them on Ctrl-C)",
            flush=True,
        )
        return
    print(f"ending {len(running)} job(s) on this node (SIGTERM, SIGKILL after {grace_s:g} s)...", flush=True)
    for key in running:
        executor.cancel(key, grace_s)
    deadline = time.monotonic() + grace_s + 5.0
    while executor.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = executor.running()
    print(
        f"{len(running) - len(left)} job(s) ended; their exits reach the server at the next start"
        + (f"; {len(left)} did not end in time" if left else ""),
        flush=True,
    )


def _print_join_hint(agent_url: str, fingerprint: str, token_file: Path, fresh: bool) -> None:
    print(f"  agents join at {agent_url} (mutual TLS; CA {fingerprint})", flush=True)
    if fresh:
        print(f"  a first join token (1 day, 10 nodes) is in {token_file}", flush=True)
    print("  more nodes: corral tokens join create --ttl 1h --uses 10 > join-token   (then, on each node)", flush=True)
    print(f"              corral agent --join {agent_url} --token-file join-token", flush=True)


def server(
    host: Host = None, port: Port = None, data_dir: DataDir = None, database_url: DbUrl = None, policy: Policy = None
) -> None:
    """Start only the server in the foreground (agents join with `corral agent --join`)."""
    from corral.server.background.scheduler_view import sweep_views, view_path
    from corral.server.bootstrap import JOIN_TOKEN_FILE
    from corral.server.context import context_of
    from corral.server.runtime import ServerThread, StartStopped, settle_heap
    from corral.server.settings import build_settings
    from corral.server.workers import (
        STUCK_AFTER_S,
        WAKE_BUDGETS,
        WAKE_POOLS,
        WAKE_SCHEDULER,
        WAKE_SERVICES,
        NotAWorker,
        Workers,
        follow_parent,
        inherited_channel,
        inherited_relay,
        inherited_sockets,
        inherited_wakes,
        read_batches,
        watch_progress,
        worker_of,
        worker_replica_id,
        worker_role,
    )

    _logging()
    settings = build_settings(host=host, port=port, data_dir=data_dir, database_url=database_url, policy=policy)
    try:
        starter = worker_of()  # this process is one of CORRAL_WORKERS, started by that one: it serves the agents
    except NotAWorker as e:
        _fail(str(e))
    # one process serves everything; or, with CORRAL_WORKERS, the one started serves people's ports and starts the
    # others: those serving the agents' port and the one running the leader's loops (server/workers.py)
    serves = worker_role() if starter is not None else "people" if settings.workers > 1 else "all"
    if serves == "agents" and settings.worker_nice:  # before any thread starts: each inherits it
        os.nice(settings.worker_nice)
    view = view_path(settings.data_dir, starter if starter is not None else os.getpid())
    if serves == "people":  # what this host's servers that no longer run left; people are told nothing until
        sweep_views(settings.data_dir)  # this run's loops' process wrote its view
        view.unlink(missing_ok=True)
    sockets = inherited_sockets() if starter else []
    if serves == "loops":  # the agents' port is the other workers'
        for sock in sockets:
            sock.close()
        sockets = []
    srv = ServerThread(
        settings,
        serves=serves,
        agent_sockets=sockets,
        replica_id=worker_replica_id() if starter else None,
        view_path=view if serves in ("people", "loops") else None,
    )
    stop = _stop_on_signal()
    try:
        srv.start(stop=stop)
    except StartStopped:  # a Ctrl-C while starting: nothing is left running
        print("stopping...", flush=True)
        return
    except RuntimeError as e:  # a port taken: one line that says which and what to set, not a traceback
        _fail(str(e))
    settle_heap(settings.switch_interval_ms, serves)
    workers = None
    telemetry = context_of(srv.app).telemetry
    if starter is not None:
        follow_parent(starter, stop.set)
        if (channel := inherited_channel()) is not None:  # the batches it receives reach the starter's gauges
            telemetry.forward = channel.send
            context_of(srv.app).scheduler.trigger.forward = channel.send_wake  # for the loops' process's scheduler
        if serves == "loops":  # what the starter's API changed wakes the loop that acts on it; the batches its
            ctx = context_of(srv.app)  # agents' workers forward reach the alert rounds and the autoscaler here too

            def budgets_changed() -> None:
                ctx.budgets.invalidate()
                ctx.scheduler.trigger.fire()

            inherited_wakes(
                {
                    WAKE_SCHEDULER: ctx.scheduler.trigger.fire,
                    WAKE_BUDGETS: budgets_changed,
                    WAKE_POOLS: ctx.autoscaler.wake,
                    WAKE_SERVICES: ctx.services.wake,
                }
            )
            if (relay := inherited_relay()) is not None:
                read_batches(relay, telemetry.remember, on_wake=ctx.scheduler.trigger.fire)

            def stuck(name: str) -> None:  # no other process here takes the lease: its starter starts another
                logging.getLogger("corral.workers").critical(
                    "the %s loop finished no pass for %.0f s: this loops' process exits", name, STUCK_AFTER_S
                )
                os._exit(70)

            watch_progress([ctx.leadership, ctx.scheduler], stuck)
    else:
        if settings.workers > 1:  # after this one's start: the data dir and the database are ready for them
            replica = context_of(srv.app).leadership.id
            workers = Workers(settings, srv.agent_sockets, on_batch=telemetry.remember, replica_of=replica)
            ctx = context_of(srv.app)  # the loops' process runs the loops these wake
            ctx.scheduler.trigger.forward = lambda: workers.tell(WAKE_SCHEDULER)
            ctx.budgets.forward = lambda: workers.tell(WAKE_BUDGETS)
            ctx.autoscaler.trigger.forward = lambda: workers.tell(WAKE_POOLS)
            ctx.services.controller.trigger.forward = lambda: workers.tell(WAKE_SERVICES)
            workers.start()
        print(f"Corral server at {settings.url}", flush=True)
        _print_join_hint(
            settings.agent_url,
            srv.ca.fingerprint,
            settings.data_dir / JOIN_TOKEN_FILE,
            bool(srv.credentials.join_token),
        )
        if workers is not None:
            print(
                f"  agents are served by {settings.workers - 1} more server process(es), the scheduler and the other "
                "loops by one more (CORRAL_WORKERS)",
                flush=True,
            )
    _wait_for_signal(stop, lambda: srv.alive)
    if workers is not None:
        workers.stop()
    srv.stop()


def read_token_file(path: str) -> str:
    """A join token from a file, or from stdin for `-`. Raises ValueError with a one-line reason."""
    import sys

    try:
        text = sys.stdin.read() if path == "-" else Path(path).expanduser().read_text()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from e
    token = text.strip()
    if not token:
        raise ValueError(f"{'stdin' if path == '-' else path} holds no join token")
    return token


def agent(
    join_url: Annotated[
        str | None,
        typer.Option("--join", help="The server's agent port URL, as `corral up` prints it [env CORRAL_SERVER_URL]."),
    ] = None,
    token_file: Annotated[
        str | None,
        typer.Option(
            "--token-file",
            help="File with a join token, `-` for stdin [env CORRAL_JOIN_TOKEN_FILE]; only the first start needs it.",
        ),
    ] = None,
    token: Annotated[str | None, typer.Option("--token", hidden=True)] = None,
    server_url: Annotated[str | None, typer.Option("--server", hidden=True)] = None,
    gpus: Gpus = None,
    node_name: NodeName = None,
    data_dir: DataDir = None,
) -> None:
    """Run an agent for this machine in the foreground: join (once), register, take work, run it, report."""
    import os

    from corral.agent.main import AgentSettings, AgentThread, JoinNeeded, ensure_identity
    from corral.sdk.client import CorralSDKError

    if token is not None or os.environ.get("CORRAL_JOIN_TOKEN"):
        _fail(
            "a join token on the command line or in CORRAL_JOIN_TOKEN is visible to every user (ps, "
            "/proc); put it in a file and pass --token-file FILE (or - for stdin, or CORRAL_JOIN_TOKEN_FILE)"
        )
    _logging()
    flags: dict[str, Any] = {
        "server_url": join_url or server_url,
        "join_token_file": token_file,
        "gpus": gpus,
        "node_name": node_name,
        "data_dir": data_dir,
    }
    settings = AgentSettings(**{k: v for k, v in flags.items() if v is not None})
    secret: str | None = None
    if settings.join_token_file:
        try:
            secret = read_token_file(settings.join_token_file)
        except ValueError as e:
            _fail(f"--token-file: {e}")
    try:
        ensure_identity(settings, secret)
    except (JoinNeeded, CorralSDKError) as e:
        _fail(str(e))
    thread = AgentThread(settings)
    stop = _stop_on_signal()
    thread.start()
    _wait_for_signal(stop, lambda: thread._thread.is_alive())
    thread.stop()
    if thread.error is not None:
        raise thread.error


def _fail(message: str) -> NoReturn:
    import sys

    print(f"error: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(2)
