"""`corral nodes` fits an 80-column terminal (as sinfo), says DEGRADED for a node with a GPU out of service,
and --wide keeps every column with times in UTC (issue 14)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from corral.cli import light
from corral.cli.nodes import compute_gpu_table, compute_node_table

NOW = datetime(2026, 11, 26, 14, 0, tzinfo=UTC)


def node(name: str, **kw: object) -> SimpleNamespace:
    fields: dict[str, object] = dict(
        name=name,
        state="READY",
        cordoned=False,
        backend="simulated",
        gpus_free=6,
        gpus_total=8,
        gpus_unhealthy=0,
        gpu_models=["NVIDIA H100 80GB HBM3"],
        isolation="per-user accounts",
        last_heartbeat_at="2026-11-26T13:59:57Z",
        pool="static",
        source="agent",
    )
    fields.update(kw)
    return SimpleNamespace(**fields)


NODES = [
    node("dgx-h100-rack4-slot17.cluster.example.org"),
    node("b", gpus_unhealthy=1, gpus_free=3),
    node("c", cordoned=True, gpu_models=["NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB"]),
    node("d", state="LOST", last_heartbeat_at="2026-11-26T11:00:00Z"),
    node("hpc.gpu-node-017", pool="hpc", source="slurm", isolation="", backend="slurm"),
]


def test_the_default_table_fits_80_columns_and_reads_states_and_ages(capsys) -> None:  # type: ignore[no-untyped-def]
    columns, rows = compute_node_table(NODES, NOW.timestamp(), wide=False)
    light.print_table(columns, light.fit_last_column(columns, rows, 80, last_min=10))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "STATE", "POOL", "GPUS", "DOWN", "SEEN", "MODELS"]
    assert all(len(line) <= 80 for line in lines), lines
    by_node = {r[0]: r for r in rows}
    assert by_node["b"][1:5] == ["DEGRADED", "static", "3/8", "1"]
    assert by_node["c"][1] == "CORDONED" and by_node["d"][1] == "LOST"
    assert by_node["dgx-h100-rack4-slot…"][5] == "3s ago" and by_node["d"][5] == "3h00m ago"
    assert by_node["hpc.gpu-node-017"][2] == "hpc/slurm"  # a Slurm cluster's node: its pool and source


def test_wide_keeps_every_column_with_times_in_utc() -> None:
    columns, rows = compute_node_table(NODES, NOW.timestamp(), wide=True)
    assert columns == [
        "NODE", "STATE", "POOL", "SOURCE", "BACKEND", "GPUS FREE", "UNHEALTHY", "MODELS", "JOBS RUN AS", "HEARTBEAT"
    ]  # fmt: skip
    assert rows[0][0] == "dgx-h100-rack4-slot17.cluster.example.org" and rows[0][-1] == "2026-11-26 13:59:57 UTC"
    assert rows[2][1] == "READY (cordoned)"


def gpu(node: str, index: int, **kw: object) -> SimpleNamespace:
    fields: dict[str, object] = dict(
        node=node,
        index=index,
        model="NVIDIA H100 80GB HBM3",
        memory_mib=81559,
        numa_node=0,
        nvlink_peers=[i for i in range(8) if i != index],
        health="HEALTHY",
        health_reason="",
        job_id=None,
        used_milli=0,
    )
    fields.update(kw)
    return SimpleNamespace(**fields)


def test_the_gpu_table_fits_80_columns_and_keeps_the_fault_in_words(capsys) -> None:  # type: ignore[no-untyped-def]
    items = [
        gpu("dgx-h100-rack4-slot17", 0, job_id=12345, used_milli=1000),
        gpu("dgx-h100-rack4-slot17", 1, health="UNHEALTHY", health_reason="Xid 79: fell off the bus"),
    ]
    columns, rows = compute_gpu_table(items, wide=False)
    light.print_table(columns, light.fit_last_column(columns, rows, 80, last_min=12))
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert rows[0][3:6] == ["80G", "7 peers", "12345"] and rows[0][6] == "used"
    assert lines[2].endswith("…") or "Xid 79" in lines[2]
    assert rows[1][6] == "unhealthy (Xid 79: fell off the bus)"
    other = compute_gpu_table([gpu("n", 2, used_milli=1000)], wide=False)[1][0]  # another tenant's job: no id
    assert other[5:] == ["", "used"]
    wide_columns, wide_rows = compute_gpu_table(items, wide=True)
    assert wide_columns[5] == "NVLINK" and wide_rows[0][5] == "1,2,3,4,5,6,7" and wide_rows[0][3] == "81559 MiB"
