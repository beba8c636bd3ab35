"""Migration 0019's columns through both stores (memory, and SQL on SQLite and PostgreSQL): a job's container spec
round-trips, the image digest is written only for the RUNNING attempt it names, and a node keeps its runtimes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from corral.core.containers import ContainerSpec, Mount
from corral.core.resources import GpuInfo
from corral.store.memory import MemoryStore
from corral.store.records import JobSpec

NOW = datetime(2026, 11, 26, 4, 0, tzinfo=UTC)
CONTAINER = ContainerSpec("reg:5000/team/train:1", (Mount("/data/a", "/a", True),), 2048, None)


def test_in_the_sql_store(store: Any) -> None:
    check_round_trip(store)


def test_in_the_memory_store() -> None:
    check_round_trip(MemoryStore())


def check_round_trip(s: Any) -> None:
    gpu = GpuInfo(index=0, uuid="n1-0", model="H100-80GB", memory_mib=81920)
    s.upsert_node("n1", "n1", "simulated", 0, 0, {}, [gpu], NOW, runtimes=("process", "docker"))
    s.upsert_node("n2", "n2", "simulated", 0, 0, {}, [], NOW)
    assert s.get_node("n1").runtimes == ("process", "docker") and s.get_node("n2").runtimes == ("process",)
    assert {n.name: n.runtimes for n in s.list_nodes()} == {"n1": ("process", "docker"), "n2": ("process",)}
    [job] = s.create_jobs([JobSpec(command=("true",), container=CONTAINER)], NOW)
    [plain] = s.create_jobs([JobSpec(command=("true",))], NOW)
    assert s.get_job(job.id).spec.container == CONTAINER and s.get_job(plain.id).spec.container is None
    assert s.get_job(job.id).spec.request.runtime == "docker"
    assert not s.set_image_digest(job.id, 1, "sha256:" + "a" * 64)  # not RUNNING yet
    assert s.assign_job(job.id, "n1", [0], NOW)
    attempt = s.get_job(job.id).attempt
    assert not s.set_image_digest(job.id, attempt + 1, "sha256:" + "b" * 64)  # another attempt's
    assert s.set_image_digest(job.id, attempt, "sha256:" + "c" * 64)
    assert s.get_job(job.id).image_digest == "sha256:" + "c" * 64
