"""The portal reads at a glance (issue 14, first part), in a real browser: the fleet's allocation graph drawn
from the server's history, graphs with units, round maxima and legends in words, a node with a failed GPU
shown degraded with the fault named, no vitals for a GPU off the bus, and a requeued job's page (logs per
attempt, why it was requeued, events in order without repeats, one 24-hour time format, the graph from the
job's start)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from e2e.conftest import JOB_PYTHON, wait_for

from .conftest import Cluster, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips every test with the reason
    expect = None  # type: ignore[assignment]

# One worker runs every browser test, one chromium at a time (and each module's cluster starts once): docs/testing.md
pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.xdist_group("browser")]

NICE = {1.0, 2.0, 2.5, 5.0, 10.0}
TIME_24H = re.compile(r"^\d{4}-\d{2}-\d{2} ([01]\d|2[0-3]):[0-5]\d:[0-5]\d \S+$")


def _points(tab: Tab, chart: str) -> int:
    return int(tab.page.get_attribute(f"[data-chart={chart}] svg", "data-points") or 0)


def _wait_points(tab: Tab, chart: str) -> None:
    wait_for(lambda: _points(tab, chart) > 0, 60, f"the {chart} graph has points")


def _y_ticks(tab: Tab, chart: str) -> list[str]:
    """The value axis's labels, bottom to top."""
    texts = tab.page.locator(f"[data-chart={chart}] svg text.y-tick").evaluate_all(
        "els => els.map((e) => e.textContent)"
    )
    return [str(t).strip() for t in texts]


def _is_nice(value: float) -> bool:
    if value <= 0:
        return False
    mantissa = value / 10 ** int(f"{value:e}".split("e")[1])
    return any(abs(mantissa - n) < 1e-9 for n in NICE)


def _submit(cluster: Cluster, name: str, gpus: int, model: str, script: str) -> int:
    r = cluster.api(
        "POST", "/jobs", json={"command": [JOB_PYTHON, "-c", script], "gpus": gpus, "gpu_model": model, "name": name}
    )
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _running(cluster: Cluster, job: int, attempt: int = 1) -> dict[str, object]:
    def check() -> dict[str, object] | None:
        j = cluster.api("GET", f"/jobs/{job}").json()
        return j if j["state"] == "RUNNING" and j["attempt"] == attempt else None

    return wait_for(check, 60, f"job {job} running its attempt {attempt}")  # type: ignore[no-any-return]


def _fault(cluster: Cluster, node: str, gpu: int, body: dict[str, object]) -> None:
    r = cluster.api("POST", f"/nodes/{node}/gpus/{gpu}/fault", json=body)
    assert r.status_code == 200, r.text


def _heal(cluster: Cluster, node: str, gpu: int) -> None:
    """Clear the simulated fault and put the GPU back (an admin's enable), for the tests after."""
    _fault(cluster, node, gpu, {"clear": True})

    def back() -> bool:
        cluster.api("POST", f"/gpus/{node}/{gpu}/enable")
        g = next(g for g in cluster.api("GET", "/gpus", params={"node": node}).json() if g["index"] == gpu)
        return bool(g["healthy"])

    wait_for(back, 60, f"GPU {gpu} of {node} back in the pool")


def _unhealthy(cluster: Cluster, node: str, gpu: int, reason: str) -> None:
    def check() -> bool:
        g = next(g for g in cluster.api("GET", "/gpus", params={"node": node}).json() if g["index"] == gpu)
        return not g["healthy"] and g["health_reason"] == reason

    wait_for(check, 60, f"GPU {gpu} of {node} taken out ({reason})")


def _held_now(tab: Tab) -> float:
    """The allocation graph's newest value, read from its tooltip at the right edge."""
    page = tab.page
    page.mouse.move(0, 0)
    box = page.locator("[data-chart=fleet-alloc] svg").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 11, box["y"] + box["height"] / 2)
    tip = page.locator("[data-chart=fleet-alloc] .tip")
    expect(tip).to_contain_text("GPUs held by running jobs")
    found = re.search(r"running jobs: ([\d.]+) GPUs?\b", tip.inner_text())  # "1 GPU" while the sampling catches up
    assert found, tip.inner_text()
    return float(found.group(1))


@pytest.fixture
def sleeper(cluster: Cluster) -> Iterator[int]:
    """A job holding 2 of node-a's H100s, cancelled after the test."""
    job = _submit(cluster, "holder", 2, "H100-80GB", "import time; time.sleep(600)")
    _running(cluster, job)
    yield job
    cluster.api("POST", f"/jobs/{job}/cancel")


def test_fleet_allocation_graph_is_drawn_from_the_servers_history(
    admin_tab: Tab, cluster: Cluster, sleeper: int
) -> None:
    cluster.require_api("/api/v1/metrics/allocated")
    page = admin_tab.page
    for visit in ("first visit", "after a reload"):
        opened = time.time()
        if visit == "first visit":
            admin_tab.goto("/")
        else:
            page.reload()
        _wait_points(admin_tab, "fleet-alloc")
        # The whole range (the last hour) at once, long before this page opened: the server's history.
        assert float(page.get_attribute("[data-chart=fleet-alloc] svg", "data-t0") or opened) < opened - 1800, visit
        assert _points(admin_tab, "fleet-alloc") >= 100, visit
        wait_for(lambda: _held_now(admin_tab) >= 2, 60, "the sleeper's 2 GPUs at the graph's end")
    assert "since this page opened" not in page.inner_text("#charts")
    admin_tab.shot("glance-a-fleet")


def test_graphs_have_units_round_maxima_and_legends_in_words(admin_tab: Tab, cluster: Cluster, sleeper: int) -> None:
    cluster.require_api("/api/v1/metrics/series")
    page = admin_tab.page
    admin_tab.goto("/nodes/node-a")
    for chart in ("cpu", "net"):
        _wait_points(admin_tab, chart)
    assert _y_ticks(admin_tab, "cpu")[-1] == "100%", _y_ticks(admin_tab, "cpu")
    net = _y_ticks(admin_tab, "net")
    assert all(t.endswith("B/s") for t in net), net
    legend = page.inner_text("[data-chart=net] .legend")
    assert "received" in legend and "sent" in legend and "net_" not in legend, legend
    admin_tab.shot("glance-a-node-graphs")

    holding = cluster.api("GET", f"/jobs/{sleeper}").json()["gpus"][0]
    admin_tab.goto(f"/gpus/node-a/{holding}")
    for chart, unit in (("util", "%"), ("power", " W"), ("temp", " °C"), ("mem", " GiB")):
        _wait_points(admin_tab, chart)
        ticks = _y_ticks(admin_tab, chart)
        assert ticks and all(t.endswith(unit) for t in ticks), (chart, ticks)
        top = float(ticks[-1].removesuffix(unit).strip())
        assert _is_nice(top), (chart, ticks)  # 100, not 82.8
        assert unit != "%" or top == 100, (chart, ticks)
        legend = page.inner_text(f"[data-chart={chart}] .legend")
        assert legend.strip() and "gpu_" not in legend, (chart, legend)
    admin_tab.shot("glance-a-gpu-graphs")


def test_node_with_a_failed_gpu_is_degraded_and_names_the_fault(admin_tab: Tab, cluster: Cluster) -> None:
    page = admin_tab.page
    _fault(cluster, "node-b", 1, {"xid": 79})
    _unhealthy(cluster, "node-b", 1, "xid")
    try:
        admin_tab.goto("/nodes")
        row = page.locator("tr", has=page.locator("a", has_text="node-b"))
        expect(row.locator("[data-node-state]")).to_have_text("DEGRADED")
        assert "READY" not in row.inner_text()

        admin_tab.goto("/nodes/node-b")
        expect(page.locator("#summary [data-node-state]")).to_have_text("DEGRADED")
        expect(page.locator("#summary [data-node-faults]")).to_contain_text("GPU 1: Xid 79")
        expect(page.locator("#events")).to_contain_text("Xid 79")
        expect(page.locator(".gpu-card[data-gpu='1'] [data-fault]")).to_have_text("Xid 79")
        cells = page.locator("#events td, #gpus .gpu-card").all_inner_texts()
        assert not any(re.search(r"(^|\s)xid($|\s|:)", c) for c in cells), cells  # the code, never the word alone
        admin_tab.shot("glance-a-node-degraded")

        admin_tab.goto("/")
        expect(page.locator("#alerts")).to_contain_text("Xid 79", timeout=60_000)

        # A GPU fallen off the bus reads nothing: no watts or degrees, the card says so.
        _fault(cluster, "node-b", 2, {"off_bus": True})
        _unhealthy(cluster, "node-b", 2, "off_bus")
        admin_tab.goto("/nodes/node-b")
        card = page.locator(".gpu-card[data-gpu='2']")
        expect(card.locator("[data-no-vitals]")).to_contain_text("Off the bus")
        assert " W" not in card.inner_text() and "°C" not in card.inner_text(), card.inner_text()
        expect(page.locator("#summary [data-node-faults]")).to_contain_text("GPU 2: fallen off the bus")
        admin_tab.goto("/gpus/node-b/2")
        expect(page.locator("#vitals [data-no-vitals]")).to_contain_text("Off the bus")
        admin_tab.shot("glance-a-gpu-off-bus")
    finally:
        _heal(cluster, "node-b", 1)
        _heal(cluster, "node-b", 2)


def test_requeued_jobs_page_reads_in_order(admin_tab: Tab, cluster: Cluster) -> None:
    page = admin_tab.page
    script = "import time\nprint('hello from an attempt', flush=True)\ntime.sleep(600)"
    job = _submit(cluster, "requeued", 1, "H100-80GB", script)
    first = _running(cluster, job)
    gpu = first["gpus"][0]  # type: ignore[index]
    time.sleep(12)  # a few utilisation samples of the first attempt
    _fault(cluster, "node-a", gpu, {"xid": 79})
    try:
        _running(cluster, job, attempt=2)
        wait_for(lambda: cluster.api("GET", f"/jobs/{job}/logs").text.count("hello") == 2, 60, "both attempts logged")
        admin_tab.goto(f"/jobs/{job}")

        # Logs: one block per attempt, each under its heading.
        sections = page.locator("#logs section[data-attempt]")
        expect(sections).to_have_count(2)
        for n in (1, 2):
            sec = page.locator(f"#logs section[data-attempt='{n}']")
            expect(sec.locator("h3")).to_contain_text(f"Attempt {n}")
            assert sec.locator("pre").inner_text().count("hello from an attempt") == 1

        # Why it went back to the queue: the GPU failure in words, not "Preempted —".
        expect(page.locator("[data-requeued]")).to_contain_text("Xid 79")
        expect(page.locator("[data-requeued]")).to_contain_text(f"GPU {gpu} on node-a failed")
        assert "Preempted" not in page.inner_text("#info")

        # Events: the failure, then the requeue it caused; no message twice; one 24-hour format with the zone.
        expect(page.locator("#timeline li[data-kind=requeued]")).to_have_count(1)
        kinds = [li.get_attribute("data-kind") for li in page.locator("#timeline li").all()]
        assert kinds.index("gpu_failed") < kinds.index("requeued"), kinds
        texts = [
            li.inner_text().split(stamp, 1)[1].strip()
            for li, stamp in zip(
                page.locator("#timeline li").all(),
                page.locator("#timeline [data-time]").all_inner_texts(),
                strict=True,
            )
        ]
        shown = [t for t in texts if t]
        assert len(shown) == len(set(shown)), texts
        stamps = page.locator("#timeline [data-time]").all_inner_texts()
        assert stamps and all(TIME_24H.match(s) for s in stamps), stamps
        assert not re.search(r"\b[AP]M\b", page.inner_text("#app")), "a 12-hour time on the job page"

        # The utilisation graph starts at the job's first start, never before it.
        _wait_points(admin_tab, "job-util")
        events = cluster.api("GET", f"/jobs/{job}/events").json()
        started = min(datetime.fromisoformat(e["at"]).timestamp() for e in events if e["kind"] == "assigned")
        t0 = float(page.get_attribute("[data-chart=job-util] svg", "data-t0") or 0)
        assert abs(t0 - started) < 2, (t0, started)
        admin_tab.shot("glance-a-job-requeued")
    finally:
        cluster.api("POST", f"/jobs/{job}/cancel")
        _heal(cluster, "node-a", gpu)


@pytest.mark.parametrize(
    ("top", "nice"),
    [(82.8, 100), (100, 100), (0.3, 0.5), (2.1, 2.5), (1, 1), (3.2e6, 5e6), (0, 1)],
)
def test_axis_maxima_are_round(admin_tab: Tab, top: float, nice: float) -> None:
    got = admin_tab.page.evaluate("async (v) => (await import('/static/format.js')).niceMax(v)", top)
    assert got == pytest.approx(nice)


def test_one_time_format_everywhere(admin_tab: Tab) -> None:
    """24-hour with seconds and the zone, whatever the browser's locale would write (its 12-hour "3:05:09 PM")."""
    got = admin_tab.page.evaluate(
        "async () => { const f = await import('/static/format.js');"
        " return [f.fmtDateTime('2026-11-26T15:05:09Z'), f.fmtDateTime(1795000000), f.fmtValue(2.5e6, 'B/s')]; }"
    )
    assert all(TIME_24H.match(t) for t in got[:2]), got
    assert got[2] == "2.5 MB/s"
