"""The job's secret variables reach the shim through a file of their own that the shim deletes once read."""

from __future__ import annotations

from pathlib import Path

from corral.executors.shim import SECRET_ENV_FILE, take_secret_env, write_json_atomic


def test_the_shim_takes_the_secret_env_and_leaves_no_copy(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / SECRET_ENV_FILE, {"WANDB_API_KEY": "v"})
    assert (tmp_path / SECRET_ENV_FILE).stat().st_mode & 0o777 == 0o600  # written private, before any read
    assert take_secret_env(tmp_path) == {"WANDB_API_KEY": "v"}
    assert not (tmp_path / SECRET_ENV_FILE).exists()
    assert take_secret_env(tmp_path) == {}  # a job without secrets has no such file
