"""`container_port` at submit (API and CLI): only with a web UI and an image, 1..65535, refusals naming the field
(the CLI's its flag); it reaches the job's ContainerSpec and the hand-over carries the assigned node port."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from corral.api.schemas import Assignment, JobSubmit
from corral.cli import light
from corral.core.errors import ValidationError

IMAGE = "corral-test/busybox:1"


@pytest.mark.parametrize(
    ("name", "body", "problem"),
    [
        ("without an image", {"web_ui": True, "container_port": 8000}, "only a job with an image"),
        ("without a web UI", {"image": IMAGE, "container_port": 8000}, "only a job with a web UI"),
        ("port 0", {"image": IMAGE, "web_ui": True, "container_port": 0}, "greater than or equal to 1"),
        ("past 65535", {"image": IMAGE, "web_ui": True, "container_port": 65536}, "less than or equal to 65535"),
    ],
)
def test_a_container_port_is_refused_naming_the_field(name: str, body: dict[str, Any], problem: str) -> None:
    with pytest.raises(pydantic.ValidationError) as e:
        JobSubmit(command=["sh"], **body)
    error = e.value.errors()[0]
    assert error["loc"] == ("container_port",) and problem in error["msg"], name


def test_a_container_port_reaches_the_container_spec() -> None:
    body = JobSubmit(command=["sh"], image=IMAGE, web_ui=True, container_port=8000)
    assert body.container is not None and body.container.port == 8000
    spec = body.to_spec(1, 1)
    assert spec.port == 0 and spec.container is not None and spec.container.port == 8000
    old = JobSubmit(command=["sh"], image=IMAGE, port=1234, container_port=8000)  # the older spelling of web_ui
    assert old.container is not None and old.container.port == 8000
    assert Assignment(job_id=1, command=["sh"], env={}, workdir=None, gpu_indices=[], gpu_uuids=[]).web_port is None


def _cli_body(*argv: str) -> dict[str, object]:
    a = light._submit_parser().parse_args([*argv, "--", "sh"])
    light._check_flags(a)
    return light._job_body(a, ["sh"])


def test_the_cli_flag() -> None:
    assert _cli_body("--image", IMAGE, "--web-ui", "--container-port", "8000")["container_port"] == 8000
    assert "container_port" not in _cli_body("--image", IMAGE, "--web-ui")
    for argv, problem in (
        (("--web-ui", "--container-port", "8000"), "add --image"),
        (("--image", IMAGE, "--container-port", "8000"), "add --web-ui"),
    ):
        with pytest.raises(ValidationError) as e:
            _cli_body(*argv)
        assert e.value.field == "--container-port" and problem in e.value.problem
