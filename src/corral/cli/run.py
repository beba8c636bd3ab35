"""Long-running commands: `corral up` (server + local agent), `corral server`, `corral agent`."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

# The server and agent stacks are imported inside the commands: the job commands must start fast.

Host = Annotated[str | None, typer.Option(help="Address to listen on [env CORRAL_HOST, default 127.0.0.1].")]
Port = Annotated[int | None, typer.Option(help="Port to listen on [env CORRAL_PORT, default 8600].")]
DataDir = Annotated[Path | None, typer.Option(help="Data dir [env CORRAL_DATA_DIR, default ~/.local/share/corral].")]
DbUrl = Annotated[str | None, typer.Option(help="Database URL [env CORRAL_DATABASE_URL; default SQLite in the data dir].")]
Gpus = Annotated[str | None, typer.Option(help="GPU backend: auto, nvml, none or sim:8xH100-80GB [env CORRAL_GPUS].")]
NodeName = Annotated[str | None, typer.Option(help="Node name of the agent [env CORRAL_NODE_NAME, default hostname].")]
Policy = Annotated[str | None, typer.Option(help="Placement policy [env CORRAL_POLICY].")]


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _wait_for_signal(stop: threading.Event, alive: Any = None) -> None:
    """Block until SIGINT/SIGTERM (or `alive()` turns false)."""
    def handler(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    while not stop.wait(0.5):
        if alive is not None and not alive():
            break


def up(host: Host = None, port: Port = None, data_dir: DataDir = None, database_url: DbUrl = None,
       gpus: Gpus = None, node_name: NodeName = None, policy: Policy = None) -> None:
    """Start the server and one local agent in the foreground; Ctrl-C stops both."""
    from corral.agent.main import AgentSettings, AgentThread
    from corral.server.bootstrap import ADMIN_TOKEN_FILE, JOIN_TOKEN_FILE, write_cli_config
    from corral.server.runtime import ServerThread
    from corral.server.settings import build_settings

    _logging()
    settings = build_settings(host=host, port=port, data_dir=data_dir, database_url=database_url, gpus=gpus,
                              node_name=node_name, policy=policy)
    server = ServerThread(settings)
    agent = AgentThread(AgentSettings(server_url=settings.url, join_token=server.credentials.join_token,
                                      gpus=settings.gpus, node_name=settings.node_name, data_dir=settings.data_dir,
                                      poll_wait_s=5.0, metrics_interval_s=settings.metrics_interval_s))
    server.start()
    config = write_cli_config(settings.url, server.credentials.admin_token)
    agent.start()
    print(f"Corral is up at {settings.url}  (node {settings.node_name}, GPUs: {agent.agent.backend.name})", flush=True)
    print(f"  admin token: {settings.data_dir / ADMIN_TOKEN_FILE}; CLI configured in {config}", flush=True)
    if settings.effective_job_ui_port:
        print(f"  jobs' own web UIs: port {settings.effective_job_ui_port} (CORRAL_JOB_UI_PORT)", flush=True)
    print(f"  more nodes: corral agent --server {settings.url} --token $(cat {settings.data_dir / JOIN_TOKEN_FILE})",
          flush=True)
    stop = threading.Event()
    _wait_for_signal(stop, lambda: server.alive)
    print("stopping...", flush=True)
    agent.stop()
    server.stop()


def server(host: Host = None, port: Port = None, data_dir: DataDir = None, database_url: DbUrl = None,
           policy: Policy = None) -> None:
    """Start only the server in the foreground (agents join with `corral agent`)."""
    from corral.server.bootstrap import JOIN_TOKEN_FILE
    from corral.server.runtime import ServerThread
    from corral.server.settings import build_settings

    _logging()
    settings = build_settings(host=host, port=port, data_dir=data_dir, database_url=database_url, policy=policy)
    srv = ServerThread(settings)
    srv.start()
    print(f"Corral server at {settings.url}; join token in {settings.data_dir / JOIN_TOKEN_FILE}", flush=True)
    _wait_for_signal(threading.Event(), lambda: srv.alive)
    srv.stop()


def agent(server_url: Annotated[str | None, typer.Option("--server", help="Server URL [env CORRAL_SERVER_URL].")] = None,
          token: Annotated[str | None, typer.Option("--token", help="Join token [env CORRAL_JOIN_TOKEN].")] = None,
          gpus: Gpus = None, node_name: NodeName = None, data_dir: DataDir = None) -> None:
    """Run an agent for this machine in the foreground: register, take work, run it, report."""
    from corral.agent.main import AgentSettings, AgentThread

    _logging()
    flags: dict[str, Any] = {"server_url": server_url, "join_token": token, "gpus": gpus, "node_name": node_name,
                             "data_dir": data_dir}
    settings = AgentSettings(**{k: v for k, v in flags.items() if v is not None})
    if not settings.join_token:
        raise typer.BadParameter("a join token is required (--token or CORRAL_JOIN_TOKEN)", param_hint="--token")
    thread = AgentThread(settings)
    thread.start()
    _wait_for_signal(threading.Event(), lambda: thread._thread.is_alive())
    thread.stop()
    if thread.error is not None:
        raise thread.error
