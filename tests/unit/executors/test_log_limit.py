"""A job's log is capped (LaunchSpec.log_max_bytes, the server's CORRAL_JOB_LOG_MAX_MB): the shim copies the job's
first bytes of output to the log and reads and drops the rest, so a job printing without end runs on unharmed and
cannot fill the node's log disk. The log says once that the limit was reached, and at the end how much was dropped.
Real processes through the ProcessExecutor and its shim."""

from __future__ import annotations

from pathlib import Path

from executor_helpers import make_spec, wait_exit

from corral.executors import ProcessExecutor

MB = 1 << 20
PATTERN = b"0123456789abcdef" * 4 + b"\n"  # 65 bytes: a limit never falls on a chunk's edge by chance


def _output(n: int) -> bytes:
    return (PATTERN * (n // len(PATTERN) + 1))[:n]


def _job_writing(n: int, code: int) -> str:
    """Write the first `n` bytes of PATTERN repeated (in one stream, as a flooding job does), then exit `code`."""
    return f"yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef | head -c {n}; exit {code}"


def test_a_job_past_its_log_limit_runs_on_and_its_log_keeps_the_first_bytes(
    executor: ProcessExecutor, tmp_path: Path, user_dir: Path
) -> None:
    spec = make_spec(tmp_path, "j-flood", _job_writing(3 * MB, 7), workdir=str(user_dir), log_max_bytes=MB)
    executor.launch(spec)
    record = wait_exit(executor, "j-flood", timeout_s=30)
    assert (record.exit_code, record.reason) == (7, "")  # the job's own exit: the limit never harmed it
    assert spec.log_path.read_bytes() == _output(MB) + (
        b"\ncorral: this job's log reached its limit of 1 MB; further output is dropped\n"
        + f"corral: {2 * MB} bytes of this job's output were dropped past its log's limit\n".encode()
    )


def test_a_job_within_its_log_limit_is_untouched(executor: ProcessExecutor, tmp_path: Path, user_dir: Path) -> None:
    for job, size in (("j-small", 1000), ("j-exact", MB)):
        spec = make_spec(tmp_path, job, _job_writing(size, 0), workdir=str(user_dir), log_max_bytes=MB)
        executor.launch(spec)
        assert wait_exit(executor, job, timeout_s=30).exit_code == 0
        assert spec.log_path.read_bytes() == _output(size)  # no notice: nothing was dropped


def test_no_limit_keeps_everything(executor: ProcessExecutor, tmp_path: Path, user_dir: Path) -> None:
    spec = make_spec(tmp_path, "j-free", _job_writing(3 * MB, 0), workdir=str(user_dir))  # an older server: 0
    executor.launch(spec)
    assert wait_exit(executor, "j-free", timeout_s=30).exit_code == 0
    assert spec.log_path.read_bytes() == _output(3 * MB)
