"""`corral backup` and `corral restore` of a database with many jobs (issue 17): time and size.

Fills a fresh install (SQLite in a temp data dir, or a fresh PostgreSQL database with --postgres) with N finished
jobs (each with its two events) and a log file of --log-bytes per job, then times `take_backup` to a directory and to
a .tar.gz, and `restore_backup` of the directory into another fresh install (database loaded, files checked and put
back, migrations run).

    .venv/bin/python bench/backup.py [--jobs 10000] [--log-bytes 2048] [--postgres] [--json]

PostgreSQL: CORRAL_BENCH_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres); two databases are
made for the run and dropped after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import make_bench_root, temp_pg_database

from corral.core.states import JobState
from corral.server.backup import restore_backup, take_backup
from corral.server.bootstrap import ensure_credentials
from corral.server.keyring import load_keyring
from corral.store.records import JobSpec
from corral.store.sql import open_store

PG_ADMIN = os.environ.get("CORRAL_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
NOW = datetime(2026, 11, 26, tzinfo=UTC)


def fill(url: str, data_dir: Path, jobs: int, log_bytes: int) -> None:
    store = open_store(url)
    try:
        ensure_credentials(store, data_dir)
        load_keyring(data_dir / "secrets.key", set())
        logs = data_dir / "logs"
        logs.mkdir(mode=0o700, exist_ok=True)
        rng = random.Random(7)  # training-log-like lines: numbers that differ, so gzip gains what it would on real logs
        for start in range(0, jobs, 500):
            specs = [JobSpec(command=("python", "train.py", f"--seed={i}"), name=f"job-{i}", gpus=1)
                     for i in range(start, min(jobs, start + 500))]  # fmt: skip
            for job in store.create_jobs(specs, NOW):
                store.finish_job(job.id, JobState.CANCELLED, None, "bench", NOW)
                (logs / f"{job.id}.1.log").write_bytes(_log(rng, log_bytes))
    finally:
        store.close()


def _log(rng: random.Random, size: int) -> bytes:
    lines, n = [], 0
    while n < size:
        line = f"step {n} loss {rng.random():.6f} lr {rng.random() * 1e-3:.2e} {rng.uniform(700, 900):.1f} samples/s\n"
        lines.append(line)
        n += len(line)
    return "".join(lines).encode()[:size]


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(jobs: int, log_bytes: int, postgres: bool) -> dict[str, Any]:
    root = make_bench_root()
    src_dir, dst_dir = root / "data", root / "restored"
    try:
        with (
            temp_pg_database(PG_ADMIN) if postgres else _nothing() as src_url,
            temp_pg_database(PG_ADMIN) if postgres else _nothing() as dst_url,
        ):
            src_url = src_url or f"sqlite:///{src_dir / 'corral.db'}"
            dst_url = dst_url or f"sqlite:///{dst_dir / 'corral.db'}"
            fill_s = timed(lambda: fill(src_url, src_dir, jobs, log_bytes))
            key = src_dir / "secrets.key"
            dir_s = timed(lambda: take_backup(root / "backup", src_url, src_dir, key, NOW))
            tar_s = timed(lambda: take_backup(root / "backup.tar.gz", src_url, src_dir, key, NOW))
            restore_s = timed(lambda: restore_backup(root / "backup", dst_url, dst_dir, dst_dir / "secrets.key"))
            dump = next((root / "backup").glob("database.*"))
            return {
                "database": "postgresql" if postgres else "sqlite",
                "jobs": jobs,
                "log_bytes_per_job": log_bytes,
                "fill_s": round(fill_s, 1),
                "backup_dir_s": round(dir_s, 2),
                "backup_dir_mib": round(size_of(root / "backup") / 2**20, 1),
                "database_dump_mib": round(dump.stat().st_size / 2**20, 1),
                "backup_tar_gz_s": round(tar_s, 2),
                "backup_tar_gz_mib": round(size_of(root / "backup.tar.gz") / 2**20, 1),
                "restore_s": round(restore_s, 2),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _nothing() -> Iterator[str]:
    yield ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--log-bytes", type=int, default=2048)
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = run(args.jobs, args.log_bytes, args.postgres)
    if args.json:
        print(json.dumps(result))
        return
    for k, v in result.items():
        print(f"{k:22} {v}")


if __name__ == "__main__":
    main()
