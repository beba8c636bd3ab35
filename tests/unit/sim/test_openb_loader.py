"""The openb loader: good files load; bad rows are errors naming file, line and field, or are skipped
and counted when asked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.sim.openb import TraceError, check_gpu_models, load_nodes, load_pods

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_nodes_and_pods(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "n.csv", NODE_HEADER + "a,64000,262144,2,V100M16\nb,32000,131072,0,\n"))
    assert [(n.name, n.gpu_count, n.gpus[0].model if n.gpus else None) for n in nodes] == [
        ("a", 2, "V100M16"),
        ("b", 0, None),
    ]
    pods, report = load_pods(
        write(tmp_path, "p.csv", POD_HEADER + "p0,4000,1024,1,460,V100M16|V100M32\np1,1000,0,0,0,\np2,8000,0,2,1000,\n")
    )
    assert report.rows == 3 and not report.skipped
    assert pods[0].request.gpu_milli == 460 and pods[0].request.gpu_models == ("V100M16", "V100M32")
    assert pods[1].request.gpus == 0 and pods[2].request.total_gpu_milli == 2000


@dataclass
class Bad:
    name: str
    row: str
    field: str


BAD_PODS = [
    Bad("not a number", "p,abc,0,1,1000,", "cpu_milli"),
    Bad("negative CPU", "p,-5,0,1,1000,", "cpu_milli"),
    Bad("negative GPUs", "p,1000,0,-1,1000,", "num_gpu"),
    Bad("zero share for a GPU pod", "p,1000,0,1,0,", "gpu_milli"),
    Bad("share above 1000", "p,1000,0,1,1500,", "gpu_milli"),
    Bad("multi-GPU share", "p,1000,0,2,500,", "gpu_milli"),
    Bad("requests nothing", "p,0,0,0,0,", "cpu_milli"),
]


@pytest.mark.parametrize("bad", BAD_PODS, ids=lambda b: b.name)
def test_bad_pod_row_names_file_line_field(tmp_path: Path, bad: Bad) -> None:
    path = write(tmp_path, "pods.csv", POD_HEADER + "ok,1000,0,1,1000,\n" + bad.row + "\n")
    with pytest.raises(TraceError) as e:
        load_pods(path)
    assert (e.value.line, e.value.field) == (3, bad.field)
    assert str(e.value).startswith(f"{path}:3: {bad.field}:")


def test_skip_bad_rows_counts_them(tmp_path: Path) -> None:
    rows = "".join(b.row + "\n" for b in BAD_PODS)
    pods, report = load_pods(write(tmp_path, "pods.csv", POD_HEADER + "ok,1000,0,1,1000,\n" + rows), skip_bad_rows=True)
    assert len(pods) == 1 and report.rows == 1 + len(BAD_PODS)
    assert sum(report.skipped.values()) == len(BAD_PODS)


@pytest.mark.parametrize(
    "text, field",
    [
        (NODE_HEADER + "a,64000,262144,x,V100\n", "gpu"),
        (NODE_HEADER + "a,64000,262144,2,\n", "model"),
        (NODE_HEADER + "a,64000,262144,2,V100\na,1,1,0,\n", "sn"),
        ("sn,cpu_milli\na,1\n", "memory_mib"),
        (NODE_HEADER, "sn"),
    ],
    ids=["bad gpu count", "missing model", "duplicate name", "missing column", "empty file"],
)
def test_bad_node_file(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(TraceError) as e:
        load_nodes(write(tmp_path, "nodes.csv", text))
    assert e.value.field == field


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="nope.csv"):
        load_nodes(tmp_path / "nope.csv")


def test_unknown_gpu_model_names_file_line_field(tmp_path: Path) -> None:
    nodes = load_nodes(write(tmp_path, "n.csv", NODE_HEADER + "a,64000,262144,2,V100M16\nb,64000,262144,2,T4\n"))
    path = write(tmp_path, "p.csv", POD_HEADER + "ok,1000,0,1,1000,T4|V100M16\nbad,1000,0,1,1000,V100M16|H200\n")
    pods, report = load_pods(path)
    with pytest.raises(TraceError) as e:
        check_gpu_models(pods, nodes, path, report)
    assert (e.value.line, e.value.field) == (3, "gpu_spec") and "'H200'" in str(e.value)
    kept = check_gpu_models(pods, nodes, path, report, skip_bad_rows=True)
    assert [p.name for p in kept] == ["ok"] and sum(report.skipped.values()) == 1
