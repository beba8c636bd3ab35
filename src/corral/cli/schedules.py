"""`corral schedules [--json]`, `corral schedules show|jobs|pause|resume|run|delete ID`.

Schedules are created with `corral submit --repeat EXPR ... -- COMMAND`."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.api.schemas import ScheduleOut, SchedulePatch
from corral.cli.config import make_client
from corral.cli.output import print_fields, print_json, print_table, short_time

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ID = Annotated[int, typer.Argument(help="Schedule id.")]
schedules_app = typer.Typer(
    help="Repeating jobs: list them (no subcommand), show, pause, resume, run now, delete. "
    "Create one with `corral submit --repeat`.",
    invoke_without_command=True,
)


@schedules_app.callback()
def schedules(ctx: typer.Context, as_json: JSON = False) -> None:
    """List schedules with their next run."""
    if ctx.invoked_subcommand is not None:
        return
    with make_client() as c:
        items = c.schedules()
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["ID", "NAME", "TENANT", "SCHEDULE", "CONCURRENCY", "NEXT RUN", "LAST JOB", "RUNS", "SKIPPED"],
        [
            (
                s.id,
                s.name,
                s.tenant,
                s.schedule + ("" if s.timezone == "UTC" else f" ({s.timezone})"),
                s.concurrency,
                "paused" if s.paused else short_time(s.next_run_at),
                s.last_job_id or "",
                s.runs,
                s.skipped,
            )
            for s in items
        ],
    )


def _print(s: ScheduleOut) -> None:
    fields = [
        ("id", s.id),
        ("name", s.name),
        ("tenant", s.tenant),
        ("schedule", f"{s.schedule}  ({s.description})"),
        ("timezone", s.timezone),
        ("concurrency", s.concurrency),
        ("paused", "yes" if s.paused else "no"),
        ("command", " ".join(s.job.get("command", []))),
        ("next runs", ", ".join(short_time(t) or "" for t in s.upcoming) or "-"),
        ("last run", short_time(s.last_run_at)),
        ("last job", s.last_job_id),
        ("active", ", ".join(map(str, s.active_job_ids)) or "-"),
        ("runs", f"{s.runs} started, {s.skipped} skipped, {s.missed} missed"),
    ]
    if s.last_skip_reason:
        fields.append(("last skip", s.last_skip_reason))
    print_fields(fields, 11)


@schedules_app.command("show")
def show(schedule_id: ID, as_json: JSON = False) -> None:
    """Show one schedule: its next runs, last job, counts."""
    with make_client() as c:
        s = c.schedule(schedule_id)
    if as_json:
        return print_json(s)
    _print(s)


@schedules_app.command("jobs")
def jobs(schedule_id: ID, as_json: JSON = False) -> None:
    """The jobs a schedule started, newest first."""
    with make_client() as c:
        items = c.schedule_jobs(schedule_id)
    if as_json:
        return print_json(items)
    print_table(
        None,
        ["ID", "STATE", "EXIT", "CREATED", "STARTED", "FINISHED"],
        [
            (
                j.id,
                j.state.value,
                j.exit_code,
                short_time(j.created_at),
                short_time(j.started_at),
                short_time(j.finished_at),
            )
            for j in items
        ],
    )


def _patch(schedule_id: int, body: SchedulePatch, verb: str) -> None:
    with make_client() as c:
        s = c.update_schedule(schedule_id, body)
    print(f"schedule {s.id} {verb}" + ("" if s.paused else f"; next run {short_time(s.next_run_at)}"))


@schedules_app.command("pause")
def pause(schedule_id: ID) -> None:
    """Stop firing until resumed (running jobs go on)."""
    _patch(schedule_id, SchedulePatch(paused=True), "paused")


@schedules_app.command("resume")
def resume(schedule_id: ID) -> None:
    """Fire again, from the next time after now (no catch-up)."""
    _patch(schedule_id, SchedulePatch(paused=False), "resumed")


@schedules_app.command("run")
def run(schedule_id: ID) -> None:
    """Start the schedule's job once now; prints the job id."""
    with make_client() as c:
        print(c.run_schedule(schedule_id).id)


@schedules_app.command("delete")
def delete(schedule_id: ID) -> None:
    """Delete a schedule (jobs it started are not cancelled)."""
    with make_client() as c:
        c.delete_schedule(schedule_id)
    print(f"schedule {schedule_id} deleted")
