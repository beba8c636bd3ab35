"""Settings that contradict each other are refused at start, in one line naming them (issue 11: a node-lost
timeout under the agents' long poll made nodes flap and jobs run three times, with no warning)."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from corral.cli.main import main
from corral.server.settings import Settings


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        pytest.param({"node_lost_after_s": 10}, "CORRAL_NODE_LOST_AFTER_S", id="node-lost-under-the-long-poll"),
        pytest.param({"node_lost_after_s": 3, "long_poll_s": 2}, "CORRAL_NODE_LOST_AFTER_S", id="no-margin"),
        pytest.param({"port": 9000, "job_ui_port": 9000}, "CORRAL_JOB_UI_PORT", id="job-ui-on-the-api-port"),
        pytest.param({"port": 9000, "job_ui_port": 9002}, "CORRAL_AGENT_PORT", id="job-ui-on-the-agent-port"),
        pytest.param(
            {"metrics_raw_retention_s": 7200, "metrics_rollup_retention_s": 3600},
            "CORRAL_METRICS_ROLLUP_RETENTION_S",
            id="rollups-shorter-than-raw",
        ),
        pytest.param({"alert_email_to": "ops@example.org"}, "CORRAL_SMTP_HOST", id="mail-without-smtp"),
        pytest.param({"tls_key": "/etc/corral/key.pem"}, "CORRAL_TLS_CERT", id="key-without-cert"),
        pytest.param({"port": 20500, "job_ports": "20000-20999"}, "CORRAL_JOB_PORTS", id="api-port-among-job-ports"),
        pytest.param({"workers": 2}, "CORRAL_WORKERS=2 needs PostgreSQL", id="workers-on-sqlite"),
    ],
)
def test_contradictions_are_refused(settings: dict[str, object], named: str, tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError) as e:
        Settings(data_dir=tmp_path, **settings)  # type: ignore[arg-type]
    assert named in str(e.value)


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"node_lost_after_s": 3, "long_poll_s": 1}, id="fast-heartbeats"),
        pytest.param({"port": 9000, "job_ui_port": 0}, id="job-uis-on-the-api-port-on-purpose"),
        pytest.param({"workers": 2, "database_url": "postgresql+psycopg://db/corral"}, id="workers-on-postgres"),
    ],
)
def test_consistent_settings_are_accepted(settings: dict[str, object], tmp_path: Path) -> None:
    Settings(data_dir=tmp_path, **settings)  # type: ignore[arg-type]


def test_the_server_refuses_to_start_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CORRAL_NODE_LOST_AFTER_S", "10")
    monkeypatch.setenv("CORRAL_DATA_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as e:
        main(["server", "--port", "0"])
    assert e.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: CORRAL_NODE_LOST_AFTER_S=10 must be at least 30"), err
    assert not (tmp_path / "corral.db").exists()  # refused before anything was opened
