"""`corral simulate jobs` reproduces recorded runs of the real server (tests/e2e/test_sim_fidelity.py, without its
processes): the same starts in the same order on the same GPUs, and a simulator on another placement policy does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import corral.cli.simulate_jobs  # noqa: F401  (registers `simulate jobs`)
from corral.cli.simulate import simulate_app
from sim_fidelity import GRID_S, Start, compute_differences, load_sim_starts

DATA = Path(__file__).resolve().parents[2] / "e2e" / "data"
# Re-record after a deliberate change of the server's decisions: CORRAL_FIDELITY_RECORD=DIR with the e2e test.
RECORDED = sorted(DATA.glob("sim_fidelity_recorded_*.json"))


def _simulate(rec: dict[str, Any], tmp_path: Path, placement: str) -> list[Start]:
    trace, nodes = tmp_path / "trace.csv", tmp_path / "nodes.csv"
    trace.write_text(rec["trace_csv"])
    nodes.write_text(rec["nodes_csv"])
    out = CliRunner().invoke(
        simulate_app,
        [
            "jobs",
            "--trace",
            str(trace),
            "--cluster",
            str(nodes),
            "--queueing",
            rec["queueing"],
            "--quotas",
            "none",
            "--placement",
            placement,
            "--cycle-s",
            repr(GRID_S),
            "--json",
            "--starts",
        ],
    )
    assert out.exit_code == 0, out.output
    return load_sim_starts(json.loads(out.stdout))


def _server(rec: dict[str, Any]) -> list[Start]:
    return load_sim_starts({"starts": rec["server_starts"]})


def test_there_are_recorded_runs_of_both_queueing_policies() -> None:
    assert {json.loads(p.read_text())["queueing"] for p in RECORDED} == {"corral", "fifo"}


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_the_simulator_starts_what_the_server_started(path: Path, tmp_path: Path) -> None:
    rec = json.loads(path.read_text())
    assert compute_differences(_server(rec), _simulate(rec, tmp_path, rec["placement"]), {}) == []


def test_a_simulator_on_another_placement_policy_is_caught(tmp_path: Path) -> None:
    rec = json.loads((DATA / "sim_fidelity_recorded_fifo.json").read_text())
    differences = compute_differences(_server(rec), _simulate(rec, tmp_path, "spread"), {})
    assert any(d.startswith("placement: ") for d in differences), differences
