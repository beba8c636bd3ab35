"""Durable per-job state of ProcessExecutor: one directory per job under the executor's state_dir.

Files: spec.json (what to run, written before the shim starts), shim.json (shim pid + start time, to
tell it from a later process with the same pid), cancel (deadline of a pending SIGKILL), exit (code).
Only the exit record is fsynced: the others describe a live shim, which a power cut ends (its job is then lost
whatever they say), while a crash of the agent alone leaves them whole in the page cache. That spares every
launch two waits for the disk.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil

from corral.core.errors import ValidationError
from corral.executors.base import ExitRecord, LaunchSpec
from corral.executors.shim import EXIT_FILE, SECRET_ENV_FILE, SERVE_FLAG, SPEC_FILE, write_json_atomic

SHIM_FILE = "shim.json"
CANCEL_FILE = "cancel"
_SAFE_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
_START_TIME_TOLERANCE_S = 0.5


def check_job_id(job_id: str) -> None:
    """Job ids become directory names: refuse anything that could escape state_dir."""
    if not _SAFE_ID.fullmatch(job_id):
        raise ValidationError("job_id", f"{job_id!r} is not usable as a file name (letters, digits, . _ -)")


@dataclass(frozen=True, slots=True)
class ShimIdentity:
    pid: int
    create_time: float


@dataclass(frozen=True, slots=True)
class JobDir:
    """Read and write one job's files. Every write is atomic; reads tolerate missing files."""

    path: Path

    @property
    def job_id(self) -> str:
        return self.path.name

    def write_spec(
        self, spec: LaunchSpec, *, workdir: str, child_env: dict[str, str], run_as: tuple[int, int] | None
    ) -> None:
        """What the shim runs: `run_as` (uid, gid) when it must switch users, None to run as itself."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)  # spec.json may hold secrets from env
        os.chmod(self.path, 0o700)
        write_json_atomic(
            self.path / SPEC_FILE,
            {
                "job_id": spec.job_id,
                "command": list(spec.command),
                "workdir": workdir,
                "gpu_indices": list(spec.gpu_indices),
                "gpu_uuids": list(spec.gpu_uuids),
                "log_path": str(spec.log_path),
                "child_env": child_env,
                "run_as": list(run_as) if run_as is not None else None,
                "log_max_bytes": spec.log_max_bytes,
            },
            durable=False,
        )
        if spec.secret_env:  # apart from spec.json: the shim deletes it as soon as it has read it
            write_json_atomic(self.path / SECRET_ENV_FILE, dict(spec.secret_env), durable=False)

    def has_spec(self) -> bool:
        return (self.path / SPEC_FILE).exists()

    def write_shim(self, shim: ShimIdentity) -> None:
        write_json_atomic(self.path / SHIM_FILE, {"pid": shim.pid, "create_time": shim.create_time}, durable=False)

    def load_shim(self) -> ShimIdentity | None:
        data = load_json(self.path / SHIM_FILE)
        if not isinstance(data, dict):
            return None
        return ShimIdentity(pid=int(data["pid"]), create_time=float(data["create_time"]))

    def write_exit(self, record: ExitRecord) -> None:
        write_json_atomic(self.path / EXIT_FILE, {"exit_code": record.exit_code, "reason": record.reason})

    def load_exit(self) -> ExitRecord | None:
        path = self.path / EXIT_FILE
        if not path.exists():
            return None
        data = load_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("exit_code"), int):
            return ExitRecord(self.job_id, 255, "lost: unreadable exit record")
        return ExitRecord(self.job_id, data["exit_code"], str(data.get("reason", "")))

    def write_cancel(self, deadline: float, killed: bool) -> None:
        write_json_atomic(self.path / CANCEL_FILE, {"deadline": deadline, "killed": killed}, durable=False)

    def load_cancel(self) -> tuple[float, bool] | None:
        data = load_json(self.path / CANCEL_FILE)
        if not isinstance(data, dict):
            return None
        return float(data["deadline"]), bool(data["killed"])

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def load_json(path: Path) -> object:
    """A JSON state file's content; None when it is missing or unreadable (a torn or foreign file)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def identify(pid: int) -> ShimIdentity | None:
    """The identity of a live process, or None when it is gone."""
    try:
        return ShimIdentity(pid=pid, create_time=psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def is_alive(shim: ShimIdentity) -> bool:
    """The same process (not a reused pid) still exists and is not a zombie."""
    try:
        proc = psutil.Process(shim.pid)
        if abs(proc.create_time() - shim.create_time) > _START_TIME_TOLERANCE_S:
            return False
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def find_shim(job_dir: Path) -> ShimIdentity | None:
    """Look for the shim of `job_dir` among all processes: only when the agent died between starting
    the shim and recording its pid (a rare recovery path, so a process scan is affordable).
    A shim started directly names its job dir last in its command line; one forked by the fork server has the
    server's command line (`shim.py --serve`) and works in its job dir (compared resolved: the data dir may be
    reached through a symlink). Either runs as this agent's user and leads its own session: a job's process (another
    user, in its shim's session) that dresses up as a shim is never taken for one."""
    marker = str(job_dir)
    forked_in = os.path.realpath(marker)
    me = os.geteuid()
    for proc in psutil.process_iter(["cmdline", "create_time", "uids"]):
        cmdline = proc.info.get("cmdline") or []
        if len(cmdline) < 2 or not cmdline[-2].endswith("shim.py"):
            continue
        if cmdline[-1] != marker and not (cmdline[-1] == SERVE_FLAG and _cwd(proc) == forked_in):
            continue
        uids = proc.info.get("uids")
        if uids is None or uids.real != me or not _leads_session(proc.pid):
            continue
        return ShimIdentity(pid=proc.pid, create_time=float(proc.info["create_time"]))
    return None


def _leads_session(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid
    except OSError:
        return False


def _cwd(proc: psutil.Process) -> str | None:
    try:
        return str(proc.cwd())
    except psutil.Error:
        return None
