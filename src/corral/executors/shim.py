"""Job shim: runs one job's command in its own process group and records its exit code durably.

Started by ProcessExecutor as `python -I shim.py <job_dir>` with start_new_session=True, so the shim is
the process-group leader and survives the agent. Standard library only: it must start whatever the
job's environment looks like. Reads <job_dir>/spec.json, writes <job_dir>/exit (JSON, atomically).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

EXIT_FILE = "exit"
SPEC_FILE = "spec.json"


def write_json_atomic(path: Path, data: object) -> None:
    """Write tmp, fsync, rename: a reader sees the old file or the whole new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """SIGTERM goes to the whole group: the child gets it too; the shim lives on to record the exit.

    A Python handler (not SIG_IGN) so that the child, after exec, is back to the default action.
    """


def start_and_wait(spec: dict[str, Any], log: int) -> tuple[int, str]:
    """Run the command to its end: (exit code shell-style, reason when it could not start)."""
    command = [str(c) for c in spec["command"]]
    workdir = spec.get("workdir")
    if not command:
        return 127, "command not found: empty command"
    if workdir is not None and not os.path.isdir(str(workdir)):
        return 1, f"workdir not found: {workdir}"
    env = {**os.environ, **{str(k): str(v) for k, v in spec["child_env"].items()}}
    try:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            cwd=None if workdir is None else str(workdir), env=env,
        )
    except FileNotFoundError:
        return 127, f"command not found: {command[0]}"
    except PermissionError:
        return 126, f"permission denied: {command[0]}"
    except OSError as e:
        return 126, f"cannot execute {command[0]}: {e.strerror or e}"
    code = child.wait()  # PEP 475: the SIGTERM handler does not interrupt the wait
    return (128 - code if code < 0 else code), ""


def _end_stragglers() -> None:
    """The job's main process ended: ask what it left in the group (background children) to stop."""
    try:
        os.killpg(os.getpgrp(), signal.SIGTERM)  # the shim itself ignores it
    except OSError:
        pass  # nothing left


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _ignore)
    signal.signal(signal.SIGINT, _ignore)
    job_dir = Path(argv[0])
    spec = json.loads((job_dir / SPEC_FILE).read_text(encoding="utf-8"))
    log = os.open(str(spec["log_path"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    code, reason = start_and_wait(spec, log)
    if reason:
        os.write(log, f"corral: {reason}\n".encode())
    os.close(log)
    _end_stragglers()
    write_json_atomic(job_dir / EXIT_FILE, {"exit_code": code, "reason": reason})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
