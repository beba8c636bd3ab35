"""Backup and restore (issue 17) with real processes: `corral server` and `corral agent` with tenants, users, a
sealed secret and finished jobs with logs; `corral backup` while a job runs; `corral restore` into a brand-new data
dir and a brand-new database (PostgreSQL, and SQLite); a server started there has every job with its state and
history, the tenants and users; the old admin token works, the secret opens (the sealing key came back), the logs
of finished jobs read back, and the agent's certificate, issued by the restored CA, is accepted."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from realparts import missing_real_part

from .conftest import CORRAL, Corral, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
PG_ADMIN_URL = os.environ.get("CORRAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SECRET = "e2e-backup-SECRET-31415"


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    def __call__(self, method: str, path: str, **kw: Any) -> Any:
        r = httpx.request(method, f"{self.url}/api/v1{path}", headers={"Authorization": f"Bearer {self.token}"},
                          timeout=10, **kw)  # fmt: skip
        assert r.status_code < 300, (path, r.status_code, r.text)
        return r.json()

    def state(self, job: int) -> str:
        return str(self("GET", f"/jobs/{job}")["state"])


def _start_server(c: Corral) -> subprocess.Popen[bytes]:
    proc = c.spawn([CORRAL, "server"], log_name="server")
    wait_for(c.healthy, 60, "server healthy")
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def databases(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The source's and the target's database URLs ("" = SQLite in each data dir); two new PostgreSQL ones."""
    if request.param == "sqlite":
        yield "", ""
        return
    for tool in ("pg_dump", "pg_restore"):
        if shutil.which(tool) is None:
            missing_real_part(tool, "install the PostgreSQL client tools (apt-get install postgresql-client)")
    source = str(request.getfixturevalue("postgres_url"))  # fails under CI=true when PostgreSQL is missing
    import psycopg

    name = f"corral_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield source, f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_backup_while_running_then_restore_into_a_fresh_install(
    corral_factory: Any, databases: tuple[str, str], tmp_path: Path
) -> None:
    source_db, target_db = databases
    c: Corral = corral_factory("src", gpus="none", database_url=source_db)
    server = _start_server(c)
    token = (c.data_dir / "admin-token").read_text().strip()
    c.env.update(CORRAL_URL=c.url, CORRAL_TOKEN=token)
    api = Api(c.url, token)
    assert c.cli("tenants", "create", "vision").returncode == 0
    assert c.cli("users", "create", "alice", "--tenant", "vision").returncode == 0
    made = subprocess.run([CORRAL, "secrets", "create", "wandb"], input=SECRET + "\n", env=c.env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    agent = c.start_agent("n1", "sim:2xH100-80GB")
    wait_for(lambda: api("GET", "/nodes"), 60, "the agent registered")

    ok = c.submit("--gpus", "1", "--name", "ok", "--", "sh", "-c", "echo hello-from-ok")
    bad = c.submit("--name", "bad", "--", "sh", "-c", "echo failing; exit 3")
    sec = c.submit("--secret-env", "K=wandb", "--", "sh", "-c", 'echo "key=[$K]"')
    for job in (ok, bad, sec):
        wait_for(lambda j=job: api.state(j) in ("SUCCEEDED", "FAILED"), 60, f"job {job} ended")
        wait_for(lambda j=job: c.cli("logs", str(j)).stdout, 30, f"job {job}'s log shipped")
    go = c.shared / "go"  # the long job ends once this exists: it runs through the backup and the restore
    script = f"echo started; while [ ! -e {go} ]; do sleep 0.2; done; echo finished"
    run = c.submit("--gpus", "1", "--name", "long", "--", "sh", "-c", script)
    wait_for(lambda: c.cli("logs", str(run)).stdout.startswith("started"), 60, "the long job running, logging")
    before = {j["id"]: j for j in api("GET", "/jobs", params={"all": "true"})}
    events = {j: api("GET", f"/jobs/{j}/events") for j in before}
    tenants, users = api("GET", "/tenants"), api("GET", "/users")

    dest = tmp_path / "backups" / "corral.tar.gz"
    dest.parent.mkdir()
    backup_env = {k: v for k, v in c.env.items() if k not in ("CORRAL_URL", "CORRAL_TOKEN")}
    taken = c.cli("backup", str(dest), env=backup_env)  # while the server, the agent and a job run
    assert taken.returncode == 0, taken.stderr
    print(taken.stdout.strip())
    assert api.state(run) == "RUNNING" and stat.S_IMODE(dest.stat().st_mode) == 0o600
    _stop(server)
    _stop(agent)

    r: Corral = corral_factory("restored", gpus="none", database_url=target_db)
    restored = r.cli("restore", str(dest))
    assert restored.returncode == 0, restored.stderr
    again = r.cli("restore", str(dest))  # the target is no longer fresh
    assert again.returncode == 1 and again.stderr.startswith("error: CORRAL_DATABASE_URL: the target database is not")
    _start_server(r)
    api = Api(r.url, token)  # the old admin token works
    assert (r.data_dir / "admin-token").read_text().strip() == token
    assert stat.S_IMODE((r.data_dir / "ca" / "ca.key").stat().st_mode) == 0o600
    after = {j["id"]: j for j in api("GET", "/jobs", params={"all": "true"})}
    assert after.keys() == before.keys()
    for j, job in before.items():
        assert (after[j]["state"], after[j]["name"], after[j]["exit_code"]) == (
            job["state"], job["name"], job["exit_code"])  # fmt: skip
        assert api("GET", f"/jobs/{j}/events") == events[j]
    assert (after[ok]["state"], after[bad]["state"], after[run]["state"]) == ("SUCCEEDED", "FAILED", "RUNNING")
    assert api("GET", "/tenants") == tenants and api("GET", "/users") == users
    cli_env = dict(r.env, CORRAL_URL=r.url, CORRAL_TOKEN=token)
    assert r.cli("logs", str(ok), env=cli_env).stdout == "hello-from-ok\n"
    assert r.cli("logs", str(bad), env=cli_env).stdout == "failing\n"
    assert f"key=[{SECRET}]" in r.cli("logs", str(sec), env=cli_env).stdout
    assert r.cli("logs", str(run), env=cli_env).stdout.startswith("started\n")

    # The agent comes back with its certificate from the old CA, without a join token, to the restored server.
    c.spawn(
        [CORRAL, "agent", "--join", r.agent_url, "--gpus", "sim:2xH100-80GB", "--node-name", "n1"],
        env=c.agent_env("n1"),
        log_name="agent-n1-again",
    )
    wait_for(lambda: any(n["state"] == "READY" for n in api("GET", "/nodes")), 60, "the agent accepted")
    go.touch()
    wait_for(lambda: api.state(run) == "SUCCEEDED", 60, "the job that ran across the backup ends")
    new = api("POST", "/jobs", json={"command": ["sh", "-c", 'echo "key=[$K]"'], "secret_env": {"K": "wandb"}})["id"]
    assert new == max(before) + 1
    wait_for(lambda: api.state(new) == "SUCCEEDED", 60, "a new job with the secret ran")
    wait_for(lambda: f"key=[{SECRET}]" in r.cli("logs", str(new), env=cli_env).stdout, 30, "the secret opened")
