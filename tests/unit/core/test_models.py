"""The domain models: a JobSpec carries the ResourceRequest built once from its fields, and the API and
store boundaries convert to and from them in one place each."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime, timedelta

import pytest

from corral.api.schemas import JobOut, JobSubmit
from corral.core.errors import ValidationError
from corral.core.models import Job, JobSpec
from corral.core.requests import ResourceRequest
from corral.core.states import JobState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(**kw: object) -> JobSpec:
    return JobSpec(command=("python", "train.py"), **kw)  # type: ignore[arg-type]


def test_request_is_built_from_the_resource_fields() -> None:
    spec = _spec(gpus=2, gpu_models=("A100", "H100"), min_gpu_memory_mib=40_000, cpu_milli=8000, memory_mib=64_000)
    assert spec.request == ResourceRequest(
        gpus=2,
        gpu_models=("A100", "H100"),
        min_gpu_memory_mib=40_000,
        cpu_milli=8000,
        memory_mib=64_000,
        tolerations=("slurm",),  # a command: a Slurm pool's nodes may run it (core/models.compute_cluster_tolerations)
    )


def test_a_share_of_one_gpu_is_in_the_request() -> None:
    assert _spec(gpus=1, gpu_milli=250).request.total_gpu_milli == 250


def test_replace_rebuilds_the_request() -> None:
    spec = _spec(gpus=1, cpu_milli=1000)
    bigger = dataclasses.replace(spec, gpus=4, memory_mib=2048)
    assert (bigger.request.gpus, bigger.request.memory_mib, bigger.request.cpu_milli) == (4, 2048, 1000)
    assert spec.request.gpus == 1  # the original is untouched


def test_replace_cannot_set_the_request_by_hand() -> None:
    with pytest.raises(ValueError):
        dataclasses.replace(_spec(), request=ResourceRequest(gpus=8))


def test_pickle_and_equality_keep_the_request() -> None:
    spec = _spec(gpus=2, gpu_models=("H100",), env={"A": "1"})
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and back.request == spec.request
    job = Job(id=7, spec=spec, state=JobState.PENDING, created_at=T0)
    assert pickle.loads(pickle.dumps(job)).request.gpu_models == ("H100",)


def test_request_is_not_part_of_repr_or_equality() -> None:
    assert "request" not in repr(_spec())
    assert _spec(gpus=1) == _spec(gpus=1)


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"gpus": -1}, "gpus"),
        ({"gpus": 2, "gpu_milli": 500}, "gpu_milli"),
        ({"gpu_milli": 0}, "gpu_milli"),
        ({"min_gpu_memory_mib": -1}, "min_gpu_memory_mib"),
        ({"cpu_milli": -5}, "cpu_milli"),
        ({"memory_mib": -5}, "memory_mib"),
    ],
)
def test_a_malformed_spec_is_refused_naming_the_field(fields: dict[str, int], field_name: str) -> None:
    with pytest.raises(ValidationError) as e:
        _spec(**fields)
    assert e.value.field == field_name


def test_records_reexports_the_same_classes() -> None:
    from corral.store import records

    assert records.JobSpec is JobSpec and records.Job is Job
    assert set(records.__all__) >= {
        "Job",
        "JobSpec",
        "Node",
        "GpuStatus",
        "GpuInfo",
        "Tenant",
        "Quota",
        "Queue",
        "compute_placed_parts",
    }


def test_submission_converts_to_a_spec_once() -> None:
    body = JobSubmit(
        command=["/usr/bin/train", "--fast"],
        gpus=1,
        gpu_milli=500,
        gpu_model="A100|H100",
        min_gpu_memory_mib=10_000,
        cpu_milli=2000,
        memory_mib=4096,
        web_ui=True,
        secret_env={"TOKEN": "hf"},
    )
    spec = body.to_spec(tenant_id=3, user_id=5, schedule_id=9)
    assert spec.name == "train"  # the program's base name when no name was given
    assert (spec.tenant_id, spec.user_id, spec.schedule_id, spec.port) == (3, 5, 9, 0)
    assert spec.request == ResourceRequest(
        gpus=1, gpu_milli=500, gpu_models=("A100", "H100"), min_gpu_memory_mib=10_000, cpu_milli=2000, memory_mib=4096
    )
    assert spec.secret_env == {"TOKEN": "hf"}


def test_a_share_of_several_gpus_is_refused_at_the_api_boundary() -> None:
    body = JobSubmit(command=["x"], gpus=2, gpu_milli=500)
    with pytest.raises(ValidationError) as e:
        body.to_spec(tenant_id=1, user_id=None)
    assert e.value.field == "gpu_milli"


def test_job_out_from_a_running_job() -> None:
    spec = _spec(gpus=2, gpu_models=("H100",), port=8888, nodes=2)
    job = Job(
        id=4,
        spec=spec,
        state=JobState.RUNNING,
        created_at=T0,
        started_at=T0,
        parts=(("n1", (0, 1)), ("n2", (2, 3))),
        node="n1",
        gpu_indices=(0, 1),
    )
    out = JobOut.from_job(job, T0 + timedelta(seconds=5), tenant="ml")
    assert (out.gpu_count, out.gpu_model, out.nodes, out.tenant, out.port, out.web_ui) == (
        2,
        "H100",
        2,
        "ml",
        8888,
        True,
    )
    assert out.parts == [{"node": "n1", "gpus": [0, 1]}, {"node": "n2", "gpus": [2, 3]}]
    assert out.web_url == "/proxy/jobs/4/"


def test_job_out_pending_fields() -> None:
    job = Job(id=1, spec=_spec(port=0), state=JobState.PENDING, created_at=T0)
    out = JobOut.from_job(job, T0, pending_reason="quota", position=2, eta=T0 + timedelta(seconds=30))
    assert (out.pending_reason, out.queue_position, out.eta_s, out.port, out.web_ui) == ("quota", 2, 30.0, None, True)
    assert out.web_url is None
