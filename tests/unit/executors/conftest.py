"""Fixtures for executor tests: an executor over a temporary state dir, cleaned up after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from executor_helpers import wait_for

from corral.executors import ProcessExecutor


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    # Whatever a test left running dies with it.
    cleanup = ProcessExecutor(path)
    for job_id in cleanup.running():
        cleanup.cancel(job_id, grace_s=0.0)
    wait_for(lambda: not cleanup.running(), 10.0, "cleanup")
    cleanup.close()


@pytest.fixture
def executor(state_dir: Path) -> Iterator[ProcessExecutor]:
    made = ProcessExecutor(state_dir)
    yield made
    made.close()
