"""A malformed ResourceRequest is refused with the field named and what is wrong with it, in words an API or CLI
user reads (`gpu_milli: must be in 1..1000`); the bounds themselves are inclusive where the docs say so."""

from __future__ import annotations

from typing import Any

import pytest

from corral.core.errors import ValidationError
from corral.core.requests import ResourceRequest


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"gpus": -1}, "gpus", "must be >= 0"),
        ({"gpus": 1, "gpu_milli": 0}, "gpu_milli", "must be in 1..1000"),
        ({"gpus": 1, "gpu_milli": 1001}, "gpu_milli", "must be in 1..1000"),
        ({"gpus": 2, "gpu_milli": 500}, "gpu_milli", "a GPU share (< 1000 milli) needs gpus=1"),
        ({"gpus": 0, "gpu_milli": 500}, "gpu_milli", "a GPU share (< 1000 milli) needs gpus=1"),
        ({"min_gpu_memory_mib": -1}, "min_gpu_memory_mib", "must be >= 0"),
        ({"cpu_milli": -1}, "cpu_milli", "must be >= 0"),
        ({"memory_mib": -1}, "memory_mib", "must be >= 0"),
        (
            {"gpus": 1, "gpu_milli": 500, "mig_profile": "1g.10gb"},
            "mig_profile",
            "a MIG instance is taken whole (gpu_milli must be 1000)",
        ),
        (
            {"gpus": 0, "mig_profile": "1g.10gb"},
            "mig_profile",
            "a MIG request needs gpus >= 1 (the number of instances)",
        ),
        ({"nvlink": "always"}, "nvlink", "must be one of '', 'preferred', 'required'"),
    ],
)
def test_a_malformed_request_names_its_field_and_the_problem(fields: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(ValidationError) as err:
        ResourceRequest(**fields)
    assert (err.value.field, err.value.problem, str(err.value)) == (field, problem, f"{field}: {problem}")


@pytest.mark.parametrize(
    "fields",
    [
        {},  # no GPU at all: a CPU-only job
        {"gpus": 1, "gpu_milli": 1},  # the smallest share
        {"gpus": 1, "gpu_milli": 999},
        {"gpus": 8, "gpu_milli": 1000},
        {"min_gpu_memory_mib": 0, "cpu_milli": 0, "memory_mib": 0},
        {"gpus": 1, "mig_profile": "1g.10gb"},
        {"nvlink": "preferred"},
        {"nvlink": "required", "gpus": 2},
    ],
)
def test_requests_on_the_bounds_are_accepted(fields: dict[str, Any]) -> None:
    req = ResourceRequest(**fields)
    assert req.total_gpu_milli == req.gpus * req.gpu_milli
