"""The policy module docs/elastic.md shows (examples/burst_policy.py): it bursts for the research tenant only, on
weekdays only, and still releases idle nodes at the weekend; the server's loader finds its decide()."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from corral.autoscaler.demand import compute_demand
from corral.autoscaler.model import AutoscaleState, Launch, Release
from corral.core.pools import RUNNING, InstanceType, PoolNode, PoolSpec
from corral.core.requests import ResourceRequest
from corral.scheduler.plan import Snapshot, compute_plan
from corral.scheduler.queueing import QueuedJob, QueueState
from corral.server.background.autoscaler import load_policy

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MONDAY = datetime(2026, 11, 23, 10, tzinfo=UTC).timestamp()
SATURDAY = datetime(2026, 11, 28, 10, tzinfo=UTC).timestamp()
POOL = PoolSpec("burst", "local", (InstanceType("g4", 4, "A100-80GB", 81920, price_per_hour=2.5),), max_nodes=4)


@pytest.fixture
def policy(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield load_policy("burst_policy")
    sys.modules.pop("burst_policy", None)


def _state(now_s: float, nodes: tuple[PoolNode, ...] = ()) -> AutoscaleState:
    jobs = [
        QueuedJob("1", "research", gpus=4, submit_s=1.0, request=ResourceRequest(gpus=4)),
        QueuedJob("2", "vision", gpus=4, submit_s=2.0, request=ResourceRequest(gpus=4)),
    ]
    snapshot = Snapshot([], QueueState(jobs, []))
    demand, free, wanted = compute_demand(snapshot, compute_plan(snapshot, now_s), [POOL])
    return AutoscaleState(now_s, (POOL,), nodes, demand, free, {}, frozenset(), wanted)


def test_weekdays_burst_for_research_only(policy) -> None:  # type: ignore[no-untyped-def]
    actions = policy(_state(MONDAY))
    assert [(a.instance_type, a.job_ids) for a in actions if isinstance(a, Launch)] == [("g4", ("1",))]


def test_weekends_start_nothing_but_still_release_idle_nodes(policy) -> None:  # type: ignore[no-untyped-def]
    idle = PoolNode("burst-g4-1", "burst", "g4", RUNNING, SATURDAY - 7200, joined_s=SATURDAY - 7000,
                    idle_since_s=SATURDAY - 3600)  # fmt: skip
    actions = policy(_state(SATURDAY, (idle,)))
    assert not [a for a in actions if isinstance(a, Launch)]
    assert [a.node for a in actions if isinstance(a, Release)] == ["burst-g4-1"]
