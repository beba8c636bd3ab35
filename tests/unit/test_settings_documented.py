"""Every setting of the server and the agent is documented in docs/settings.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.agent.main import AgentSettings
from corral.server.settings import Settings

DOC = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()


@pytest.mark.parametrize("name", sorted(set(Settings.model_fields) | set(AgentSettings.model_fields)))
def test_setting_is_documented(name: str) -> None:
    assert f"`CORRAL_{name.upper()}`" in DOC


def test_environment_overrides_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_PORT", "9123")
    monkeypatch.setenv("CORRAL_DATA_DIR", str(tmp_path))
    s = Settings()
    assert s.port == 9123 and s.data_dir == tmp_path
    assert s.effective_database_url == f"sqlite:///{tmp_path / 'corral.db'}"
    assert Settings(port=9000).port == 9000  # a flag beats the environment
