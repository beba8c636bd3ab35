"""`corral submit --image/--mount/--shm-size/--user`: the body they make, and refusals in the flags' own words."""

from __future__ import annotations

import pytest

from corral.cli import light
from corral.core.errors import ValidationError
from corral.sdk.errors import CorralAPIError


def _body(*argv: str) -> dict[str, object]:
    a = light._submit_parser().parse_args([*argv, "--", "sh", "-c", "true"])
    light._check_flags(a)
    return light._job_body(a, ["sh", "-c", "true"])


def test_without_image_the_body_is_a_process_job() -> None:
    body = _body("--gpus", "1")
    assert not {"image", "mounts", "shm_size_mib", "container_user"} & body.keys()


def test_container_flags_make_the_body() -> None:
    body = _body(
        "--image", "corral-test/busybox:1", "--mount", "/data/a:/a:ro", "--mount", "/data/b:/b", "--shm-size", "8g"
    )
    assert body["image"] == "corral-test/busybox:1"
    assert body["mounts"] == ["/data/a:/a:ro", "/data/b:/b"] and body["shm_size_mib"] == 8192
    assert _body("--image", "x", "--user", "1000:1000")["container_user"] == "1000:1000"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--mount", "/data:/data"), "--mount"),
        (("--shm-size", "1g"), "--shm-size"),
        (("--user", "1000"), "--user"),
        (("--image", "x", "--shm-size", "lots"), "--shm-size"),
    ],
)
def test_refusals_name_the_flag(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(ValidationError) as e:
        _body(*argv)
    assert e.value.field == flag


@pytest.mark.parametrize(("field", "flag"), [("image", "--image"), ("mounts", "--mount"), ("container_user", "--user")])
def test_a_refused_container_field_is_named_by_its_flag(field: str, flag: str) -> None:
    err = light._flag_error(CorralAPIError(422, "invalid", f"{field}: Value error, nope", field, {}))
    assert isinstance(err, ValidationError) and err.field == flag and err.problem == "nope"
