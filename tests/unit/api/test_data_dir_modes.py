"""The data dir is the server's and the agent's alone: 0700, nothing in it open to group or others, including
an install made before (its 0755 dir and 0644 database), without following links or touching jobs' own dirs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from corral.api.paths import secure_data_dir
from corral.server.services.logs import LogStore


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def test_an_old_install_is_made_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "logs").mkdir(parents=True)
    os.chmod(data, 0o755)
    os.chmod(data / "logs", 0o755)
    for name, mode in (("corral.db", 0o644), ("admin-token", 0o644), ("logs/1.1.log", 0o666), ("tool", 0o755)):
        (data / name).write_text("x")
        os.chmod(data / name, mode)
    outside = tmp_path / "shared.txt"
    outside.write_text("not ours")
    os.chmod(outside, 0o644)
    (data / "link").symlink_to(outside)
    jobs = data / "jobs"
    jobs.mkdir()
    (jobs / "result").write_text("a job's")
    os.chmod(jobs / "result", 0o644)

    secure_data_dir(data, skip=(jobs,))

    assert {n: _mode(data / n) for n in ("", "logs", "corral.db", "admin-token", "logs/1.1.log", "tool")} == {
        "": 0o700,
        "logs": 0o700,
        "corral.db": 0o600,
        "admin-token": 0o600,
        "logs/1.1.log": 0o600,
        "tool": 0o700,
    }
    assert _mode(outside) == 0o644 and _mode(jobs / "result") == 0o644  # not followed, not ours to change


def test_a_new_data_dir_is_created_private(tmp_path: Path) -> None:
    secure_data_dir(tmp_path / "new" / "data")
    assert _mode(tmp_path / "new" / "data") == 0o700


def test_server_logs_are_written_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        logs = LogStore(tmp_path / "logs")
        logs.append(1, 0, b"hello\n")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "logs") == 0o700 and _mode(logs.path(1)) == 0o600
