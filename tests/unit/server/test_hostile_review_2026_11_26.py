"""Hostile-tenant / hostile-agent review of what landed on 2026-11-26 (per-run log cap, alert snapshot for
followers, the agent journal, backup/restore, the 503 database_unavailable answer): each test is a hole found."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

from test_job_log_limit import Cluster, cluster  # noqa: F401  (the fixture: a node n1 with a 1 MB log cap)

from corral.server.backup import take_backup
from corral.server.bootstrap import ensure_credentials
from corral.store.sql import open_store

MB = 1 << 20


def test_an_agent_cannot_multiply_a_jobs_log_cap_by_inventing_ranks(cluster: Cluster) -> None:
    """The cap is per run file, and a run file is (job, attempt, rank): a hostile agent holding one single-node job
    could write a full capped log for each of ranks 0..1024 (1025 GiB per attempt at the default 1 GiB cap). Only
    the ranks the job has may be written."""
    job = cluster.running_job()
    assert cluster.upload(job, 0, b"rank 0\n").status_code == 200
    for rank in (1, 7, 1024):
        r = cluster.upload(job, 0, b"x" * 1024, rank=rank)
        assert r.status_code == 403, (rank, r.status_code, r.text)
    assert cluster.api.get(f"/api/v1/jobs/{job}/logs", headers=cluster.admin, params={"rank": 1}).content in (b"", None)


def test_a_tarball_backup_never_reuses_a_planted_temporary_file(tmp_path: Path) -> None:
    """`corral backup /shared/dir/b.tar.gz` wrote the tarball (secrets key and CA key inside) through a predictable
    `.b.tar.gz.tmp` opened with O_CREAT|O_TRUNC and no O_EXCL/O_NOFOLLOW: another local user who plants that name
    first (a file they own, readable by all, or a symlink to a file the operator owns) gets the backup written into
    their file - readable by them, and kept 0644 after the rename - or has the operator's file clobbered."""
    data_dir = tmp_path / "data"
    url = f"sqlite:///{data_dir / 'corral.db'}"
    data_dir.mkdir()
    ensure_credentials(open_store(url), data_dir)
    key = data_dir / "secrets.key"
    key.write_bytes(b"k" * 32)
    os.chmod(key, 0o600)
    shared = tmp_path / "shared"
    shared.mkdir()
    dest = shared / "b.tar.gz"
    planted = shared / ".b.tar.gz.tmp"
    planted.write_bytes(b"")
    os.chmod(planted, 0o644)  # the attacker's own file, readable by everyone
    victim = tmp_path / "victim"
    victim.write_bytes(b"the operator's precious file")
    other = shared / "c.tar.gz"
    (shared / ".c.tar.gz.tmp").symlink_to(victim)
    now = datetime(2026, 11, 26, tzinfo=UTC)
    take_backup(dest, url, data_dir, key, now)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    take_backup(other, url, data_dir, key, now)
    assert victim.read_bytes() == b"the operator's precious file"
    assert stat.S_IMODE(other.stat().st_mode) == 0o600
