"""deploy/grafana/corral-gpus.json: valid, and every series it queries is one /metrics renders."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.core.telemetry import HostSample
from corral.server.prometheus import ClusterStats, GpuMetrics, compute_latency_histogram, render_metrics

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "corral-gpus.json"
_SERIES = re.compile(r"\b(DCGM_FI_[A-Z_]+|corral_[a-z0-9_]+)\b")


def _panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def _rendered_sample_names() -> set[str]:
    sim = SimulatedGpuBackend("sim:8xH100-80GB", "dgx-1")
    gpus = [GpuMetrics("dgx-1", "H100-80GB", s) for s in sim.sample(1.0).samples]
    host = HostSample(1.0, 1, 8, 0, 0, 0, 1, 2, 1, 2, 0, 0, 0, 0)
    stats = ClusterStats(
        queue_length=1,
        pending_by_reason={"quota": 1},
        jobs_by_state={"RUNNING": 1},
        nodes_by_state={"LOST": 1},
        alerts_by_state={"firing": 1},
        scheduling_latency=compute_latency_histogram([0.1]),
    )
    body = render_metrics(gpus, [("dgx-1", host)], stats).decode()
    return {s.name for f in text_string_to_metric_families(body) for s in f.samples}


def test_every_queried_series_is_rendered() -> None:
    rendered = _rendered_sample_names()
    queried = {name for p in _panels() for t in p["targets"] for name in _SERIES.findall(t["expr"])}
    assert queried and queried <= rendered, sorted(queried - rendered)
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "corral_scheduling_latency_seconds_bucket"} <= queried


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine


def test_template_variables_used_are_defined() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    used = set(re.findall(r"\$\{?([A-Za-z_]+)\}?", json.dumps(dashboard["panels"]))) - {"__all"}
    assert used <= defined, used - defined
