"""Fair share's history survives a restart of the server (SQLite and PostgreSQL): the decayed GPU-seconds a
tenant used are written by the scheduler and read back by the next one, which keeps counting from there."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from corral.core.resources import GpuInfo
from corral.server.background.scheduling import USAGE_SAVE_EVERY_S, Scheduler
from corral.server.services.notify import NodeNotifier
from corral.store.records import JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _running_job(store: SqlStore, tenant: str, gpus: int) -> None:
    tenant_id = store.create_tenant(tenant, T0).id
    store.upsert_node(
        "n1",
        "n1",
        "simulated",
        64_000,
        512_000,
        {},
        [GpuInfo(index=i, uuid=f"GPU-{i}", model="H100-80GB", memory_mib=81920) for i in range(8)],
        T0,
    )
    job = store.create_job(JobSpec(command=("sleep", "1000"), gpus=gpus, tenant_id=tenant_id), T0)
    assert store.assign_job(job.id, "n1", list(range(gpus)), T0)


def _scheduler(store: SqlStore) -> Scheduler:
    return Scheduler(store, NodeNotifier(), "corral", 1.0)


def _held(gpus: int, seconds: float, half_life_s: float) -> float:
    """GPU-seconds of `gpus` held for `seconds`, each second decayed by the half-life since (docs/queueing.md)."""
    return gpus * half_life_s / math.log(2) * (1 - 0.5 ** (seconds / half_life_s))


def _pass(s: Scheduler, at: datetime) -> None:
    s.store.touch_node("n1", at)  # the node's agent is alive throughout
    s.run_once(at)


def test_usage_is_kept_across_a_restart(store: SqlStore) -> None:
    _running_job(store, "vision", 4)
    first = _scheduler(store)
    _pass(first, T0)
    _pass(first, T0 + timedelta(seconds=600))
    half_life = first.queueing.half_life_s
    assert first.usage_gpu_s["vision"] == pytest.approx(_held(4, 600, half_life))  # 4 GPUs for 10 minutes
    first.stop()  # (a clean stop writes it; a crash loses at most USAGE_SAVE_EVERY_S)

    second = _scheduler(store)  # the server restarted 5 minutes later; the job ran on meanwhile
    _pass(second, T0 + timedelta(seconds=900))
    assert second.usage_gpu_s["vision"] == pytest.approx(_held(4, 900, half_life))  # as if never restarted


def test_a_crash_loses_at_most_the_last_save_interval(store: SqlStore) -> None:
    _running_job(store, "nlp", 2)
    first = _scheduler(store)
    for k in range(int(USAGE_SAVE_EVERY_S) * 3):  # one pass a second, no clean stop
        _pass(first, T0 + timedelta(seconds=k))
    crashed_at = T0 + timedelta(seconds=int(USAGE_SAVE_EVERY_S) * 3 - 1)
    second = _scheduler(store)
    _pass(second, crashed_at)
    ran = (crashed_at - T0).total_seconds()
    lost = _held(2, USAGE_SAVE_EVERY_S, first.queueing.half_life_s)  # at most one save interval's worth
    assert first.usage_gpu_s["nlp"] - lost <= second.usage_gpu_s["nlp"] <= first.usage_gpu_s["nlp"] + 1e-6
    assert first.usage_gpu_s["nlp"] == pytest.approx(_held(2, ran, first.queueing.half_life_s))
