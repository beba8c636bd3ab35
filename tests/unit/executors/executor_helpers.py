"""Helpers for executor tests: poll with a deadline, build launch specs (no fixed sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from corral.core.unix_identity import JobIdentity
from corral.executors import ExitRecord, LaunchSpec, ProcessExecutor

T = TypeVar("T")
JOB_IDENTITY = JobIdentity(uid=200_001, gid=200_001, user="alice")  # what the server resolves for user 1
OTHER_IDENTITY = JobIdentity(uid=200_002, gid=200_002, user="bob")


def wait_for(probe: Callable[[], T], timeout_s: float = 10.0, what: str = "condition") -> T:
    """Poll `probe` until it returns something truthy; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


def wait_exit(executor: ProcessExecutor, job_id: str, timeout_s: float = 10.0) -> ExitRecord:
    def probe() -> ExitRecord | None:
        return next((r for r in executor.collect_exits() if r.job_id == job_id), None)

    return wait_for(probe, timeout_s, f"exit of {job_id}")


def make_spec(tmp_path: Path, job_id: str, script: str, **overrides: object) -> LaunchSpec:
    """A job of JOB_IDENTITY running `sh -c script`, logging to tmp_path/logs/<job_id>.log."""
    fields: dict[str, object] = {
        "job_id": job_id,
        "command": ("sh", "-c", script),
        "env": {},
        "workdir": None,
        "gpu_indices": (),
        "gpu_uuids": (),
        "log_path": tmp_path / "logs" / f"{job_id}.log",
        "identity": JOB_IDENTITY,
    }
    fields.update(overrides)
    return LaunchSpec(**fields)  # type: ignore[arg-type]
