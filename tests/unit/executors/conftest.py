"""Fixtures for executor tests: an executor over a temporary state dir, cleaned up after each test.

Tests run as root here and in CI, so the executor switches users: the state dir sits in a base dir that jobs'
users may traverse (its sibling `work` is the executor's default work root), and `user_dir` is a directory the
job's identity owns (pytest's tmp_path, under a 0700 parent, is out of its reach by design).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from executor_helpers import JOB_IDENTITY, wait_for

from corral.executors import ProcessExecutor


@pytest.fixture
def base_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="corral-executor-"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def state_dir(base_dir: Path) -> Iterator[Path]:
    path = base_dir / "state"
    yield path
    # Whatever a test left running dies with it.
    cleanup = ProcessExecutor(path)
    for job_id in cleanup.running():
        cleanup.cancel(job_id, grace_s=0.0)
    wait_for(lambda: not cleanup.running(), 10.0, "cleanup")
    cleanup.close()


@pytest.fixture
def work_root(base_dir: Path) -> Path:
    """The executor's default work root for `state_dir`."""
    return base_dir / "work"


@pytest.fixture
def user_dir(base_dir: Path) -> Path:
    """A directory of the job's identity (what a user's shared home or scratch dir would be)."""
    path = base_dir / "user-files"
    path.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(path, JOB_IDENTITY.uid, JOB_IDENTITY.gid)
    return path


@pytest.fixture
def executor(state_dir: Path) -> Iterator[ProcessExecutor]:
    made = ProcessExecutor(state_dir)
    yield made
    made.close()
