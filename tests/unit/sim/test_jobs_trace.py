"""Job trace loaders and cluster specs: good files load; bad input names file, line and field; unusable
rows are skipped and counted, never dropped silently."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.core.errors import CorralError, ValidationError
from corral.sim.jobs_trace import load_trace, parse_cluster_spec
from corral.sim.openb import TraceError

CORRAL_HEADER = "job_id,submit_s,duration_s,gpus,gpu_fraction,model,tenant,priority,time_limit_s\n"
CHRONUS_HEADER = "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval\n"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


def test_corral_format_loads_every_field(tmp_path: Path) -> None:
    jobs, report = load_trace(
        write(tmp_path, CORRAL_HEADER + "a,5,60,1,0.5,V100,team-a,3,120\nb,1,10,2,,,,,\n"), "corral"
    )
    assert [j.job.id for j in jobs] == ["b", "a"]  # sorted by submit time
    a = jobs[1].job
    assert (a.gpu_milli, a.model, a.tenant, a.priority, a.time_limit_s, jobs[1].duration_s) == (
        500,
        "V100",
        "team-a",
        3,
        120.0,
        60.0,
    )
    assert jobs[0].job.tenant == "default" and jobs[0].job.time_limit_s is None and not report.skipped


def test_chronus_rows_without_gpus_are_skipped_and_counted(tmp_path: Path) -> None:
    jobs, report = load_trace(
        write(tmp_path, CHRONUS_HEADER + "0,vc_a,1,5,1,m,60,1\n1,vc_b,0,6,1,m,60,1\n2,vc_b,4,7,1,m,0,1\n"), "chronus"
    )
    assert [j.job.id for j in jobs] == ["0"]
    assert report.rows == 3 and report.skipped == {"no GPUs (CPU-only job)": 1, "zero duration": 1}
    assert "skipped 2 of 3 rows" in report.summary()


@dataclass
class Bad:
    name: str
    fmt: str
    text: str
    line: int
    field: str


BAD = [
    Bad("not a number", "corral", CORRAL_HEADER + "a,x,60,1,1,,t,0,\n", 2, "submit_s"),
    Bad("negative duration", "corral", CORRAL_HEADER + "a,0,-5,1,1,,t,0,\n", 2, "duration_s"),
    Bad("fraction above one", "corral", CORRAL_HEADER + "a,0,5,1,1.5,,t,0,\n", 2, "gpu_fraction"),
    Bad("fraction of several GPUs", "corral", CORRAL_HEADER + "a,0,5,2,0.5,,t,0,\n", 2, "gpu_fraction"),
    Bad("zero time limit", "corral", CORRAL_HEADER + "a,0,5,1,1,,t,0,0\n", 2, "time_limit_s"),
    Bad("duplicate id", "corral", CORRAL_HEADER + "a,0,5,1,1,,t,0,\na,1,5,1,1,,t,0,\n", 3, "job_id"),
    Bad("missing column", "chronus", "job_id,user,num_gpu\n0,a,1\n", 1, "submit_time"),
    Bad("empty tenant", "chronus", CHRONUS_HEADER + "0,,1,5,1,m,60,1\n", 2, "user"),
    Bad("no usable rows", "chronus", CHRONUS_HEADER + "0,a,0,5,1,m,60,1\n", 1, "job_id"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.name)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, case: Bad) -> None:
    path = write(tmp_path, case.text)
    with pytest.raises(TraceError) as err:
        load_trace(path, case.fmt)
    assert (err.value.line, err.value.field) == (case.line, case.field)
    assert str(path) in err.value.message


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="chronus, tiresias, corral"):
        load_trace(tmp_path / "x.csv", "yaml")
    with pytest.raises(TraceError, match="x.csv"):
        load_trace(tmp_path / "x.csv", "corral")


@pytest.mark.parametrize(
    "spec,gpus,pool",
    [
        ("32x8xV100-32GB", 256, {"V100-32GB": 256_000}),
        ("2x8xH100+4x4xT4", 32, {"H100-80GB": 16_000, "T4-16GB": 16_000}),
    ],
)
def test_cluster_specs(spec: str, gpus: int, pool: dict[str, int]) -> None:
    c = parse_cluster_spec(spec)
    assert c.gpus == gpus and c.pool_milli == pool


@pytest.mark.parametrize("spec", ["32x8", "0x8xV100", "axbxc", "8xV100"])
def test_bad_cluster_specs(spec: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_cluster_spec(spec)
    assert err.value.field == "cluster"


def test_cluster_from_a_nodes_csv(tmp_path: Path) -> None:
    p = tmp_path / "nodes.csv"
    p.write_text("sn,cpu_milli,memory_mib,gpu,model\na,64000,262144,8,V100M32\nb,64000,262144,2,T4\nc,32000,1000,0,\n")
    c = parse_cluster_spec(str(p))
    assert c.nodes == 3 and c.pool_milli == {"V100M32": 8000, "T4": 2000}
    with pytest.raises(CorralError):
        parse_cluster_spec(str(tmp_path / "missing.csv"))


def test_a_trace_of_another_format_suggests_the_flag(tmp_path: Path) -> None:
    f = tmp_path / "tiresias.csv"
    f.write_text("job_id,num_gpu,submit_time,duration\nj1,1,0,60\n")
    for fmt in ("corral", "chronus"):
        with pytest.raises(TraceError, match="its columns are those of format 'tiresias': add --format tiresias"):
            load_trace(f, fmt)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError) as err:
        load_trace(other, "corral")
    assert "add --format" not in str(err.value)  # no format fits: no hint
    assert [j.job.id for j in load_trace(f, "tiresias")[0]] == ["j1"]
