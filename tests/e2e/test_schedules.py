"""Repeating jobs end to end: `corral submit --repeat` on a real `corral up`, real jobs on the local agent,
a kill -9 of the server in the middle (no firing lost for good, none started twice), pause, run now, delete."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import Corral, wait_for

pytestmark = pytest.mark.e2e


def _jobs(c: Corral, sid: int) -> list[dict[str, Any]]:
    return c.cli_json("schedules", "jobs", str(sid))  # type: ignore[no-any-return]


def _due_times(c: Corral, job_ids: list[int]) -> list[str]:
    """The due time each job's `scheduled` event names (run-now jobs have none)."""
    out = []
    for jid in job_ids:
        events = c.api_events(jid)
        out += [
            m.group(1)
            for e in events
            if e["kind"] == "scheduled" and (m := re.search(r"due at (\S+ \S+)", e["message"]))
        ]
    return out


def test_repeating_job_survives_a_server_kill_and_is_paused_run_and_deleted(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    r = c.cli("submit", "--repeat", "@every 2s", "--name", "tick", "--", "sh", "-c", "echo tick $CORRAL_JOB_ID")
    assert r.returncode == 0, r.stderr
    m = re.match(r"schedule (\d+) \(tick\): every 2s; next run ", r.stdout)
    assert m, r.stdout
    sid = int(m.group(1))

    wait_for(lambda: sum(j["state"] == "SUCCEEDED" for j in _jobs(c, sid)) >= 2, 60, "two runs succeeded")
    first = _jobs(c, sid)[-1]
    assert first["schedule_id"] == sid and first["name"] == "tick"
    assert f"tick {first['id']}" in c.cli("logs", str(first["id"])).stdout

    before = c.cli_json("schedules", "show", str(sid))
    c.kill9()
    # at least two firings fall due while nobody is there (the clock is all there is to watch while it is down).
    # The runner may fire once more between reading `before` and the kill, moving next_run_at on by 2 s, so wait
    # out two intervals past it: whichever of the two it was, two firings were due while it was down.
    due = datetime.fromisoformat(before["next_run_at"]) + timedelta(seconds=4)
    wait_for(lambda: datetime.now(UTC) > due, 30, "two firings fell due")
    c.start()
    wait_for(lambda: c.cli_json("schedules", "show", str(sid))["runs"] >= before["runs"] + 2, 60, "firing again")
    after = c.cli_json("schedules", "show", str(sid))
    assert after["missed"] >= 1  # the downtime's firings were folded into one and counted
    jobs = _jobs(c, sid)
    dues = _due_times(c, [j["id"] for j in jobs])
    assert len(dues) == len(jobs) and len(set(dues)) == len(dues)  # no firing started twice
    running = [j for j in jobs if j["state"] in ("PENDING", "RUNNING")]
    assert len(running) <= 1  # concurrency forbid: never two at once

    assert c.cli("schedules", "pause", str(sid)).returncode == 0
    # A witness schedule proves the runner goes on firing: once it has fired, any pass that began before the
    # pause has ended; two firings of it later, the paused schedule (due every 2 s) would have fired too.
    r = c.cli("submit", "--repeat", "@every 1s", "--name", "witness", "--", "true")
    assert r.returncode == 0, r.stderr
    m = re.match(r"schedule (\d+) ", r.stdout)
    assert m, r.stdout
    witness = int(m.group(1))
    witness_runs = wait_for(lambda: c.cli_json("schedules", "show", str(witness))["runs"], 60, "the witness fired")
    paused_runs = c.cli_json("schedules", "show", str(sid))["runs"]
    wait_for(
        lambda: c.cli_json("schedules", "show", str(witness))["runs"] >= witness_runs + 3, 60, "three more firings"
    )
    assert c.cli_json("schedules", "show", str(sid))["runs"] == paused_runs
    assert c.cli("schedules", "delete", str(witness)).returncode == 0
    listed = c.cli("schedules")
    assert "tick" in listed.stdout and "paused" in listed.stdout

    r = c.cli("schedules", "run", str(sid))
    assert r.returncode == 0, r.stderr
    now_job = int(r.stdout.strip())
    assert c.cli("wait", str(now_job), "--timeout", "60").returncode == 0
    assert c.job(now_job)["schedule_id"] == sid

    assert c.cli("schedules", "delete", str(sid)).returncode == 0
    gone = c.cli("schedules", "show", str(sid))
    assert gone.returncode != 0 and gone.stderr.startswith("error:") and "not found" in gone.stderr
    assert c.job(now_job)["state"] == "SUCCEEDED"  # its jobs stay


BAD_REPEAT = [
    (["--repeat", "61 * * * *"], "schedule"),
    (["--repeat", "@daily", "--timezone", "Mars/Olympus"], "time zone"),
    (["--repeat", "@daily", "--concurrency", "sometimes"], "allow, forbid or replace"),
    (["--timezone", "Europe/Paris"], "--repeat"),
    (["--repeat", "@daily", "--gpus", "64"], "--gpus: 64 GPUs"),  # the flag, also for the server's check
]


def test_bad_repeat_input_is_one_line_and_creates_nothing(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.start()
    for args, words in BAD_REPEAT:
        r = c.cli("submit", *args, "--", "true")
        assert r.returncode != 0, args
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], (args, r.stderr)
    assert c.cli_json("schedules") == [] and c.api_jobs() == []
