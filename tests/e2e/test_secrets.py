"""Tenant secrets end to end, with real `corral up` and CLI processes: a job gets its secret in its environment,
and the value is nowhere else: not in `corral show`, listings, the server's output, or a file the server or
agent keeps (the only copy on disk is the job's own log, because the job printed it)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from corral.server.keyring import new_key, write_key_file

from .conftest import CORRAL, Corral, wait_for

pytestmark = pytest.mark.e2e

VALUE = "e2e-Kq9-SECRET-VALUE-2718281828"


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
        except OSError:
            continue
    return found


def test_a_job_gets_its_secret_and_the_value_stays_out_of_everything_else(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    made = subprocess.run(
        [CORRAL, "secrets", "create", "wandb"],
        input=VALUE + "\n",
        env=c.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    listed = c.cli("secrets", "--json")
    assert listed.returncode == 0 and '"wandb"' in listed.stdout and VALUE not in listed.stdout, listed.stderr

    job = c.submit("--secret-env", "WANDB_API_KEY=wandb", "--", "sh", "-c", 'echo "key=[$WANDB_API_KEY]"')
    assert c.cli("wait", str(job), "--timeout", "60").returncode == 0

    def job_log() -> str | None:
        out = c.cli("logs", str(job)).stdout
        return out if "key=" in out else None

    log = wait_for(job_log, 30, "the job's log")
    assert f"key=[{VALUE}]" in log  # the value reached the job, without the trailing newline of stdin

    shown = c.cli("show", str(job), "--json")
    assert shown.returncode == 0 and '"WANDB_API_KEY": "wandb"' in shown.stdout, shown.stderr
    for args in (("show", str(job), "--json"), ("show", str(job)), ("jobs", "--all", "--json")):
        r = c.cli(*args)
        assert r.returncode == 0 and VALUE not in r.stdout, (args, r.stdout, r.stderr)

    # On disk the value is only in the job's own log (the server's copy and the agent's); never in the database,
    # a spec or secret-env file of the agent's job dir, or the output of `corral up`.
    holding = _files_holding(c.root, VALUE.encode())
    job_logs = {c.data_dir / "logs" / f"{job}.1.log"} | set(c.data_dir.glob(f"agent/*/logs/{job}.1.log"))
    assert holding and set(holding) <= job_logs, holding

    # While a job runs, its secret lives in its environment only: the agent's job dir keeps no copy of it.
    quiet = c.submit("--secret-env", "WANDB_API_KEY=wandb", "--", "sh", "-c", "echo ready; sleep 120")
    wait_for(lambda: "ready" in c.cli("logs", str(quiet)).stdout, 60, "the quiet job running")
    assert c.job(quiet)["state"] == "RUNNING"
    assert set(_files_holding(c.root, VALUE.encode())) <= job_logs, "a running job's secret is in a file"
    assert c.cli("cancel", str(quiet)).returncode == 0


def test_secrets_cli_mistakes_are_one_line_errors(corral_factory: Any, tmp_path: Path) -> None:
    c: Corral = corral_factory()
    c.start()
    value_file = tmp_path / "token.txt"
    value_file.write_text(VALUE)
    assert c.cli("secrets", "create", "db", "--from-file", str(value_file)).returncode == 0
    for args, needle in (
        (("submit", "--secret-env", "DB=nope", "--", "true"), "no secret 'nope'"),
        (("submit", "--secret-env", "DB", "--", "true"), "--secret-env"),
        (("secrets", "create", "db", "--from-file", str(value_file)), "already exists"),
        (("secrets", "create", "x", "--from-file", str(tmp_path / "missing")), "--from-file"),
        (("secrets", "delete", "nope"), "not found"),
    ):
        r = c.cli(*args)
        assert r.returncode != 0 and r.stderr.startswith("error: ") and needle in r.stderr, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and VALUE not in r.stderr
    assert c.cli("secrets", "delete", "db").returncode == 0
    assert c.cli_json("secrets") == []


def test_a_missing_wrong_or_open_key_file_stops_the_start_with_one_line(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    made = subprocess.run(
        [CORRAL, "secrets", "create", "db"], input=VALUE, env=c.env, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    assert c.interrupt() == 0
    key_file = c.data_dir / "secrets.key"
    saved = key_file.read_bytes()

    def start_fails(problem: str, **env: str) -> None:
        r = c.cli("up", env=dict(c.env, **env), timeout_s=120)
        assert r.returncode == 1 and r.stderr.startswith("error: secrets_key_file: "), r.stderr
        assert problem in r.stderr and r.stderr.count("\n") == 1, r.stderr

    key_file.unlink()
    start_fails("is missing but the database holds")
    write_key_file(key_file, [new_key()])  # another installation's key
    start_fails("is not the key file of this database")
    outside = c.root / "keys" / "secrets.key"  # a key file kept apart from the data dir, left group-readable
    outside.parent.mkdir()
    outside.write_bytes(saved)
    outside.chmod(0o644)
    start_fails("readable by others (mode 0644)", CORRAL_SECRETS_KEY_FILE=str(outside))
