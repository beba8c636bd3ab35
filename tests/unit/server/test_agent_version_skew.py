"""Agent/server version skew (docs/operations.md, "Upgrading without downtime"): a server logs an agent that
registers with another release than its own; an older agent's registration (fields it lacks take their defaults) is
accepted, a newer agent's with a field this server does not know is refused."""

from __future__ import annotations

import logging

import pydantic
import pytest

from corral import __version__
from corral.api.schemas import AgentRegister
from corral.server.services.agents import register_node
from corral.store.sql import SqlStore


def test_another_release_is_logged_and_a_newer_field_refused(store: SqlStore, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="corral.agents"):
        register_node(store, AgentRegister(name="same", backend="simulated", agent_version=__version__))
        assert caplog.text == ""
        older = AgentRegister.model_validate({"name": "old", "backend": "simulated", "agent_version": "0.0.1"})
        assert register_node(store, older).name == "old"
    assert "agent old runs Corral 0.0.1, this server " + __version__ in caplog.text
    with pytest.raises(pydantic.ValidationError):
        AgentRegister.model_validate({"name": "new", "backend": "simulated", "field_from_the_future": 1})
