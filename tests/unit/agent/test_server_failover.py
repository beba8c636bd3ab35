"""An agent given several replicas' agent ports (CORRAL_SERVER_URL, issue 17) joins, registers and long-polls
through whichever answers, over real mutual TLS on loopback; a bad URL in the list stops it at start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from corral.agent.identity import NodeTlsFiles, join, mtls_context
from corral.agent.main import AgentSettings
from corral.api.schemas import AgentRegister, AgentSync
from corral.sdk.client import AgentClient
from corral.server.runtime import ServerThread
from corral.server.settings import Settings
from ports import free_port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    settings = Settings(
        data_dir=tmp_path / "data", port=free_port(), job_ui_port=0, gateway_port=0, agent_port=free_port(), tls="on"
    )
    srv = ServerThread(settings)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_the_agent_joins_and_syncs_through_the_replica_that_answers(server: ServerThread, tmp_path: Path) -> None:
    dead = f"https://127.0.0.1:{free_port()}"
    urls = f"{dead},{server.settings.agent_url}"
    files = NodeTlsFiles(tmp_path / "n1" / "tls")
    join(files, urls, server.credentials.join_token, "n1")  # the CA fetch and the join skip the dead replica
    settings = AgentSettings(server_url=urls, node_name="n1", data_dir=tmp_path / "agent")
    client = AgentClient(settings.server_url, "", verify=mtls_context(files))
    assert client.register(AgentRegister(name="n1", backend="simulated")).name == "n1"
    assert client.url == server.settings.agent_url
    assert client.sync("n1", AgentSync(wait_s=0)).assignments == []
    client.close()


def test_the_server_urls_are_checked_at_start(tmp_path: Path) -> None:
    two = AgentSettings(server_url=" https://127.0.0.1:8602 , https://localhost:8612/", data_dir=tmp_path)
    assert two.server_url == "https://127.0.0.1:8602,https://localhost:8612"
    assert two.effective_address == "127.0.0.1"  # every replica on loopback
    assert AgentSettings(server_url="https://head:8602/", data_dir=tmp_path).server_url == "https://head:8602/"
    with pytest.raises(ValidationError, match="'head:8602' is not an http:// or https:// URL"):
        AgentSettings(server_url="https://a:8602,head:8602", data_dir=tmp_path)
