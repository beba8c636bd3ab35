"""A full log disk never kills a job (issue 17's chaos): the shim copies the job's output to its log, drops what
the disk cannot hold, and says in the log how much was lost once it can write again. Real processes on a real
tmpfs (mounting needs root, as the agent has; without root the test says so and skips, under CI=true it fails)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from executor_helpers import make_spec, wait_exit, wait_for
from tests.realparts import missing_real_part

from corral.executors import ProcessExecutor


@pytest.fixture
def tiny_log_disk(base_dir: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs as the jobs' log dir."""
    if os.geteuid() != 0:
        missing_real_part("root (to mount a tmpfs)", "run the tests as root, as CI does")
    path = base_dir / "logs"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0711", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(fd)
    return filler


def test_a_job_writing_to_a_full_log_disk_runs_on_and_its_log_says_what_was_lost(
    executor: ProcessExecutor, tmp_path: Path, user_dir: Path, tiny_log_disk: Path
) -> None:
    said, go = user_dir / "said", user_dir / "go"
    script = f"echo hello; touch {said}; while [ ! -e {go} ]; do sleep 0.05; done; echo bye"
    spec = make_spec(tmp_path, "j-full", script, workdir=str(user_dir), log_path=tiny_log_disk / "j-full.log")
    filler = _fill(tiny_log_disk)
    executor.launch(spec)
    wait_for(said.exists, 10, "the job wrote its first line into the full disk")
    filler.unlink()  # space again
    go.touch()
    record = wait_exit(executor, "j-full")
    assert (record.exit_code, record.reason) == (0, "")  # the job never saw the full disk
    assert spec.log_path.read_text() == (
        "\ncorral: 6 bytes of this job's output were lost: the node's log disk was full\nbye\n"
    )


def test_a_job_that_fills_the_log_disk_itself_still_ends_with_its_own_exit_code(
    executor: ProcessExecutor, tmp_path: Path, user_dir: Path, tiny_log_disk: Path
) -> None:
    spec = make_spec(
        tmp_path,
        "j-spam",
        "head -c 1000000 /dev/zero | tr '\\0' x; echo; echo still here >&2; exit 3",
        workdir=str(user_dir),
        log_path=tiny_log_disk / "j-spam.log",
    )
    executor.launch(spec)
    record = wait_exit(executor, "j-spam", timeout_s=20)
    assert record.exit_code == 3  # the job's own code, not a write error
    lost = int(record.reason.split()[0])  # the disk is still full: the loss is told with the exit
    assert record.reason == f"{lost} bytes of output were lost: the node's log disk was full" and lost > 700_000
    text = spec.log_path.read_bytes()
    assert text.startswith(b"x" * 1000) and len(text) < 1_000_000  # what fitted is there, the rest was dropped
