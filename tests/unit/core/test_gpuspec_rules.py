"""Simulated GPU specs such as `sim:8xH100-80GB`: counts, models, memory defaults and the errors."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.gpuspec import SimGpuSpec, parse_sim_spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param("sim:8xH100-80GB", SimGpuSpec(8, "H100-80GB", 80 * 1024), id="full"),
        pytest.param("sim:2xH100-40GB", SimGpuSpec(2, "H100-40GB", 40 * 1024), id="memory-given-wins"),
        pytest.param("4xA100", SimGpuSpec(4, "A100-80GB", 80 * 1024), id="no-prefix-known-model"),
        pytest.param("sim:1xh200", SimGpuSpec(1, "h200-141GB", 141 * 1024), id="model-case-insensitive"),
        pytest.param("sim:1xL40S", SimGpuSpec(1, "L40S-48GB", 48 * 1024), id="l40s"),
        pytest.param("sim:3xFOO", SimGpuSpec(3, "FOO-16GB", 16 * 1024), id="unknown-model-16gb"),
        pytest.param("sim:0xT4", SimGpuSpec(0, "T4-16GB", 16 * 1024), id="no-gpus"),
        pytest.param("sim:64xB200", SimGpuSpec(64, "B200-192GB", 192 * 1024), id="most-gpus"),
    ],
)
def test_specs(spec: str, expected: SimGpuSpec) -> None:
    assert parse_sim_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", "sim:", "sim:H100", "sim:8x", "sim:8x-80GB", "sim:8xH100-80", "sim:x8H100"])
def test_bad_specs_show_an_example(spec: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_sim_spec(spec)
    assert e.value.field == "gpus"
    assert e.value.problem == f"bad simulated GPU spec {spec!r}; expected like sim:8xH100-80GB"


@pytest.mark.parametrize("count", [65, 100])
def test_too_many_gpus(count: int) -> None:
    with pytest.raises(ValidationError) as e:
        parse_sim_spec(f"sim:{count}xH100")
    assert (e.value.field, e.value.problem) == ("gpus", f"simulated GPU count {count} out of range 0..64")
