"""Job commands: submit, jobs, show, logs, cancel, wait."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import pydantic
import typer

from corral.api.schemas import JobOut, JobSubmit, ScheduleIn
from corral.cli.config import make_client
from corral.cli.output import console, print_fields, print_json, print_table, short_time
from corral.core.errors import ValidationError

JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


# JobSubmit's fields as `corral submit` spells them, so a refused value names the flag the user typed
FLAG_OF_FIELD = {
    "command": "COMMAND",
    "env": "--env",
    "secret_env": "--secret-env",
    "name": "--name",
    "workdir": "--workdir",
    "gpus": "--gpus",
    "gpu_model": "--gpu-model",
    "priority": "--priority",
    "queue": "--queue",
    "time_limit_s": "--time-limit",
    "gpu_milli": "--gpu-share",
    "min_gpu_memory_mib": "--min-gpu-memory",
    "port": "--port",
    "web_ui": "--web-ui",
    "nodes": "--nodes",
}


def _flag_error(e: pydantic.ValidationError) -> ValidationError:
    err = e.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    flag = FLAG_OF_FIELD.get(loc[0], loc[0]) if loc else "submit"
    where = f" ({'.'.join(loc[1:])})" if len(loc) > 1 else ""
    return ValidationError(flag, str(err.get("msg", "invalid")).removeprefix("Value error, ") + where)


def parse_env(pairs: list[str]) -> dict[str, str]:
    return parse_pairs(pairs, "--env", "KEY=VALUE")


def parse_pairs(pairs: list[str], flag: str, shape: str) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or (flag == "--secret-env" and not value):
            raise ValidationError(flag, f"{pair!r} is not {shape}")
        env[key] = value
    return env


def submit(
    command: Annotated[list[str], typer.Argument(help="The command to run, after --.")],
    gpus: Annotated[int, typer.Option(min=0, help="Whole GPUs on one node.")] = 0,
    gpu_model: Annotated[str | None, typer.Option(help="Allowed GPU models, e.g. A100|H100.")] = None,
    name: Annotated[str | None, typer.Option(help="A name for the job.")] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            "-e",
            help=("KEY=VALUE, repeatable. Not secret: shown by `corral show` and to your tenant; use --secret-env."),
        ),
    ] = None,
    secret_env: Annotated[
        list[str] | None,
        typer.Option(
            "--secret-env",
            help=(
                "VAR=NAME, repeatable: VAR gets the value of your tenant's secret NAME (`corral secrets create NAME`) "
                "when the job starts; only the name is ever shown."
            ),
        ),
    ] = None,
    workdir: Annotated[str | None, typer.Option(help="Working directory on the node (absolute).")] = None,
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    queue: Annotated[str, typer.Option(help="One of your tenant's queues.")] = "default",
    time_limit: Annotated[
        int | None, typer.Option(help="Seconds; the job is stopped after it (helps backfill).")
    ] = None,
    gpu_share: Annotated[
        int | None, typer.Option(help="A share of one GPU in milli-GPUs (1..999), with --gpus 1.")
    ] = None,
    nodes: Annotated[int, typer.Option(help="Run on this many nodes at once (--gpus on each), all or none.")] = 1,
    min_gpu_memory: Annotated[int, typer.Option(help="Minimum GPU memory in MiB.")] = 0,
    web_ui: Annotated[
        bool,
        typer.Option(
            "--web-ui",
            help=(
                "The job serves a web UI, opened through Corral: it listens on the port Corral gives it in $CORRAL_JOB_PORT "
                "(also $PORT), under the path $CORRAL_PROXY_PREFIX."
            ),
        ),
    ] = False,
    port: Annotated[
        int | None, typer.Option(help="Older spelling of --web-ui (the number is not used).", hidden=True)
    ] = None,
    repeat: Annotated[
        str | None,
        typer.Option(
            help="Repeat on a schedule instead of running once: a cron line ('0 2 * * *'), '@daily' or '@every 15m'."
        ),
    ] = None,
    timezone: Annotated[str, typer.Option(help="With --repeat: the IANA time zone the cron line is read in.")] = "UTC",
    concurrency: Annotated[
        str, typer.Option(help="With --repeat, when the previous run is still active: allow, forbid (skip) or replace.")
    ] = "forbid",
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            help="Send this Idempotency-Key (default: a fresh one, retried on connection errors): running the same "
            "command again with the same key and job returns the first job instead of a second."
        ),
    ] = None,
    as_json: JSON = False,
) -> None:
    """Submit a job; prints its id. With --repeat, creates a schedule and prints its id and next run."""
    try:
        body = JobSubmit(
            command=command,
            gpus=gpus,
            gpu_model=gpu_model,
            name=name or "",
            env=parse_env(env or []),
            workdir=workdir,
            priority=priority,
            queue=queue,
            time_limit_s=time_limit,
            gpu_milli=gpu_share or 1000,
            min_gpu_memory_mib=min_gpu_memory,
            web_ui=web_ui or port is not None,
            nodes=nodes,
            secret_env=parse_pairs(secret_env or [], "--secret-env", "VAR=NAME"),
        )
    except pydantic.ValidationError as e:
        raise _flag_error(e) from None
    if repeat is None and (timezone != "UTC" or concurrency != "forbid"):
        raise ValidationError("--repeat", "--timezone and --concurrency only apply to a repeating job (add --repeat)")
    if repeat is not None:
        schedule_in = ScheduleIn(name=name or "", schedule=repeat, timezone=timezone, concurrency=concurrency, job=body)
        with make_client() as c:
            sched = c.create_schedule(schedule_in)
        if as_json:
            print_json(sched)
        else:
            print(f"schedule {sched.id} ({sched.name}): {sched.description}; next run {short_time(sched.next_run_at)}")
        return
    with make_client() as c:
        job = c.submit(body, idempotency_key=idempotency_key)
    if as_json:
        print_json(job)
    else:
        print(job.id)


def jobs(
    all: Annotated[bool, typer.Option("--all", "-a", help="Include finished jobs.")] = False, as_json: JSON = False
) -> None:
    """List pending and running jobs (all with --all)."""
    with make_client() as c:
        items = c.jobs(all=all)
    if as_json:
        print_json(items)
        return
    rows = [
        (
            j.id,
            j.name,
            j.tenant,
            j.state.value,
            "" if j.queue_position is None else j.queue_position + 1,
            j.node,
            ",".join(map(str, j.gpus)) or j.gpu_count or "",
            j.exit_code,
            short_time(j.created_at),
            j.pending_reason or j.reason,
            short_time(j.eta),
        )
        for j in items
    ]
    print_table(
        None, ["ID", "NAME", "TENANT", "STATE", "POS", "NODE", "GPUS", "EXIT", "CREATED", "REASON", "ETA"], rows
    )


def show(job_id: Annotated[int, typer.Argument(help="Job id.")], as_json: JSON = False) -> None:
    """Show one job."""
    with make_client() as c:
        job = c.job(job_id)
        events = [] if as_json else c.events(job_id)
    if as_json:
        print_json(job)
        return
    _print_job(job)
    for e in events:
        console.print(f"  {e['at'][:19]}  {e['kind']:<16} {e['message']}")


def _print_job(j: JobOut) -> None:
    fields = [
        ("id", j.id),
        ("name", j.name),
        ("state", j.state.value),
        ("node", j.node),
        ("gpus", ",".join(map(str, j.gpus)) or f"{j.gpu_count} requested"),
        ("command", " ".join(j.command)),
        ("exit code", j.exit_code),
        ("reason", j.pending_reason or j.reason),
        ("created", short_time(j.created_at)),
        ("started", short_time(j.started_at)),
        ("finished", short_time(j.finished_at)),
    ]
    if j.web_url:
        fields.append(("web UI", j.web_url))
    if j.secret_env:  # names only: the values never leave the server except to the job's agent
        fields.append(("secrets", ", ".join(f"{var} <- {name}" for var, name in sorted(j.secret_env.items()))))
    if j.nodes > 1:
        fields.append(
            (
                "parts",
                "; ".join(f"rank {i}: {p['node']} GPUs {','.join(map(str, p['gpus']))}" for i, p in enumerate(j.parts)),
            )
        )
    print_fields(fields, 10)


def logs(
    job_id: Annotated[int, typer.Argument(help="Job id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    rank: Annotated[int, typer.Option(help="Which part of a multi-node job.")] = 0,
) -> None:
    """Print a job's logs (stdout and stderr)."""
    offset = 0
    with make_client() as c:
        while True:
            data, size, state = c.logs(job_id, offset, rank)
            if data:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
                offset += len(data)
            if offset < size:
                continue
            if not follow or state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                # a final read after the end: the agent ships all logs before it reports the exit
                if follow:
                    data, _, _ = c.logs(job_id, offset, rank)
                    sys.stdout.buffer.write(data)
                    sys.stdout.buffer.flush()
                return
            time.sleep(0.5)


def cancel(job_id: Annotated[int, typer.Argument(help="Job id.")], as_json: JSON = False) -> None:
    """Cancel a job (SIGTERM, then SIGKILL after a grace period)."""
    with make_client() as c:
        job = c.cancel(job_id)
    if as_json:
        print_json(job)
    else:
        print(f"job {job.id}: {'cancelling' if job.state.value == 'RUNNING' else job.state.value.lower()}")


def wait(
    job_id: Annotated[int, typer.Argument(help="Job id.")],
    timeout: Annotated[float | None, typer.Option(min=0, help="Give up after S seconds (exit 124).")] = None,
) -> None:
    """Wait for a job to end; exits with the job's exit code."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with make_client() as c:
        while True:
            job = c.job(job_id)
            if job.state.terminal:
                code = job.exit_code if job.exit_code is not None else (130 if job.state.value == "CANCELLED" else 1)
                print(f"job {job.id} {job.state.value} (exit code {job.exit_code})", file=sys.stderr)
                raise typer.Exit(code if 0 <= code <= 255 else 1)
            if deadline is not None and time.monotonic() >= deadline:
                print(f"error: job {job_id} still {job.state.value} after {timeout:g} s", file=sys.stderr)
                raise typer.Exit(124)
            time.sleep(0.25)
