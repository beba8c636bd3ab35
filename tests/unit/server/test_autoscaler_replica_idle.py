"""Idle detection with server replicas (issue 19): the leader's autoscaler judges a cloud node's GPUs by the newest
telemetry it received itself, and, when replicas share the database, by the samples another replica stored for a
node whose agent reports there; before, such a node counted as idle whenever it ran no Corral job (a busy GPU could
be released). One server (no replicas) reads its own batches only. On SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

from corral.core.telemetry import GpuSample, TelemetryBatch
from corral.server.background.autoscaler import GPU_UTILIZATION, Autoscaler, JoinAccess
from corral.server.background.scheduling import Scheduler
from corral.server.services.notify import NodeNotifier
from corral.store.sql import open_store
from corral.store.telemetry import HOST_GPU, Point


def _scaler(database_url: str, tmp_path: Path, shared: bool, latest: dict[str, TelemetryBatch]) -> Autoscaler:
    store = open_store(database_url)
    return Autoscaler(
        store,
        Scheduler(store, NodeNotifier(), "binpack", 1.0),
        JoinAccess("https://corral.example:8602", lambda ttl, what: ("t", 1)),
        tmp_path / "pools",
        latest=lambda: latest,
        shared=shared,
    )


def test_a_node_reporting_to_another_replica_is_judged_by_its_stored_samples(database_url: str, tmp_path: Path) -> None:
    now = time.time()
    here = TelemetryBatch("gpu.a", now, None, (GpuSample(now, 0, "GPU-a0", utilization_percent=12.0),))
    scaler = _scaler(database_url, tmp_path, True, {"gpu.a": here})
    scaler.store.insert_points(
        [
            Point(now - 3, "gpu.b", 0, GPU_UTILIZATION, 5.0),
            Point(now - 3, "gpu.b", 1, GPU_UTILIZATION, 97.0),  # its busiest GPU counts
            Point(now - 3, "gpu.b", HOST_GPU, "cpu_percent", 100.0),  # the host is not a GPU
            Point(now - 3, "gpu.c", 0, "gpu_memory_used_mib", 1024.0),  # no utilisation sample: unknown
            Point(now - 900, "gpu.d", 0, GPU_UTILIZATION, 99.0),  # too old to say anything now
        ]
    )
    assert scaler._gpu_util(["gpu.a", "gpu.b", "gpu.c", "gpu.d"], now) == {"gpu.a": 12.0, "gpu.b": 97.0}


def test_one_server_reads_only_the_batches_it_received(database_url: str, tmp_path: Path) -> None:
    now = time.time()
    scaler = _scaler(database_url, tmp_path, False, {})
    scaler.store.insert_points([Point(now - 3, "gpu.b", 0, GPU_UTILIZATION, 97.0)])
    assert scaler._gpu_util(["gpu.b"], now) == {}
