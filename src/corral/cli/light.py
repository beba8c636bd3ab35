"""The everyday commands on a light path: `corral submit`, `jobs`, `show`, `logs`, `cancel`, `wait` and
`--version` parse with argparse and talk to the server with corral.sdk.rest (HTTP/1.1 on a socket, corral.sdk.wire),
so that a loop of submissions from the shell costs tens of milliseconds per call, not the few hundred that
loading typer, httpx, pydantic and rich takes. The server validates every field; a refused one is named by the
flag the user typed. Every other command goes through the typer app (corral.cli.app).

Nothing here may import typer, httpx, pydantic, rich or anything of the scheduler or the simulator:
tests/unit/cli/test_cli_light_path.py checks it.
"""

from __future__ import annotations

import os
import sys
import time

from corral import __version__
from corral.core.errors import CorralError, ValidationError

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing (a few ms per call)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

LIGHT_COMMANDS = ("submit", "jobs", "show", "logs", "cancel", "wait")
TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")

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
    "array": "--array",
    "image": "--image",
    "mounts": "--mount",
    "shm_size_mib": "--shm-size",
    "container_user": "--user",
    "registry_secret": "--registry-secret",
    "container_port": "--container-port",
    "spot": "--spot",
    "tolerations": "--toleration",
    "pool": "--pool",
    "stage_in": "--stage-in",
    "stage_out": "--stage-out",
    "stage_secret": "--stage-secret",
}


class UsageError(Exception):
    """The command line itself is wrong (exit 2)."""


class Exit(Exception):  # noqa: N818  (an exit, not an error)
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def parse_pairs(pairs: Sequence[str], flag: str, shape: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or (flag == "--secret-env" and not value):
            raise ValidationError(flag, f"{pair!r} is not {shape}")
        out[key] = value
    return out


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    return parse_pairs(pairs, "--env", "KEY=VALUE")


# `corral submit`'s options, read by argparse (_submit_parser: help, errors, anything unusual) and by the fast
# reading of the usual command lines (fast_submit_args, which gives what argparse gives or hands over to it:
# tests/unit/cli/test_fast_submit_args.py checks both on generated command lines). Each row: the flags, the kind (int,
# str, append: repeatable, flag: on when given), the default (None: none), the metavar and the help (None: hidden).
SUBMIT_OPTIONS: tuple[tuple[tuple[str, ...], str, object, str | None, str | None], ...] = (
    (("--gpus",), "int", 0, None, "Whole GPUs on one node."),
    (("--gpu-model",), "str", None, None, "Allowed GPU models, e.g. A100|H100."),
    (("--name",), "str", None, None, "A name for the job."),
    (
        ("--env", "-e"),
        "append",
        None,
        None,
        "KEY=VALUE, repeatable. Not secret: shown by `corral show` and to your tenant; use --secret-env.",
    ),
    (
        ("--secret-env",),
        "append",
        None,
        None,
        "VAR=NAME, repeatable: VAR gets the value of your tenant's secret NAME (`corral secrets create NAME`) "
        "when the job starts; only the name is ever shown.",
    ),
    (("--workdir",), "str", None, None, "Working directory on the node (absolute); with --image, in the container."),
    (
        ("--image",),
        "str",
        None,
        None,
        "Run in a container of this image (on a node with the docker runtime; docs/containers.md). Without it the"
        " job runs as a plain process.",
    ),
    (
        ("--mount",),
        "append",
        None,
        "SRC:DST[:ro]",
        "With --image, repeatable: host path SRC at DST in the container; only under the directories the cluster "
        "allows (CORRAL_ALLOWED_MOUNTS).",
    ),
    (
        ("--registry-secret",),
        "str",
        None,
        "NAME",
        "With --image: pull it with your tenant's registry login NAME (`corral secrets create NAME --registry "
        "HOST --username U --password-stdin`).",
    ),
    (
        ("--shm-size",),
        "str",
        None,
        "SIZE",
        "With --image: the container's /dev/shm, e.g. 512m or 8g (default 1g, or a quarter of its memory).",
    ),
    (
        ("--user",),
        "str",
        None,
        "UID[:GID]",
        "With --image: run as this numeric user in the container (default: your own Unix identity); not with --mount.",
    ),
    (("--priority",), "int", 0, None, "Higher runs first."),
    (("--queue",), "str", "default", None, "One of your tenant's queues."),
    (("--time-limit",), "int", None, None, "Seconds; the job is stopped after it (helps backfill)."),
    (("--gpu-share",), "int", None, None, "A share of one GPU in milli-GPUs (1..999), with --gpus 1."),
    (("--nodes",), "int", 1, None, "Run on this many nodes at once (--gpus on each), all or none."),
    (("--min-gpu-memory",), "int", 0, None, "Minimum GPU memory in MiB."),
    (
        ("--web-ui",),
        "flag",
        None,
        None,
        "The job serves a web UI, opened through Corral: it listens on the port Corral gives it in "
        "$CORRAL_JOB_PORT (also $PORT), under the path $CORRAL_PROXY_PREFIX.",
    ),
    (("--port",), "int", None, None, None),
    (
        ("--container-port",),
        "int",
        None,
        "PORT",
        "With --image and --web-ui: the port the image's web UI listens on inside the container; Corral publishes"
        " it on the node port it assigns (default: that port, as $PORT inside).",
    ),
    (
        ("--spot",),
        "flag",
        None,
        None,
        "The job may run on spot (interruptible) nodes of a cloud pool, which are cheaper; it is requeued keeping"
        " its place when one is taken back.",
    ),
    (
        ("--toleration",),
        "append",
        None,
        "TAINT",
        "Run also on nodes with this taint (a cloud pool's taints); repeatable.",
    ),
    (("--pool",), "str", None, None, "Run only on nodes of this pool (static, or a cloud pool's name)."),
    (
        ("--stage-in",),
        "append",
        None,
        "SRC:DST",
        "Copy input to the job's node before its GPUs are taken: SRC an s3:// URL (a trailing / copies the "
        "prefix) or a path on the shared storage the server allows, DST relative to $CORRAL_STAGE_DIR; the job "
        "waits pending ('staging input: 3.1 of 12 GiB') meanwhile; repeatable.",
    ),
    (
        ("--stage-out",),
        "append",
        None,
        "SRC:DST",
        "Ship output after the job ends (success or failure): SRC relative to $CORRAL_STAGE_DIR, DST an s3:// URL"
        " or an allowed shared path; `corral show` gives the outcome; repeatable.",
    ),
    (("--stage-secret",), "str", None, "NAME", "The tenant secret (corral secrets create NAME --s3) for s3:// items."),
    (
        ("--repeat",),
        "str",
        None,
        None,
        "Repeat on a schedule instead of running once: a cron line ('0 2 * * *'), '@daily' or '@every 15m'.",
    ),
    (("--timezone",), "str", "UTC", None, "With --repeat: the IANA time zone the cron line is read in."),
    (
        ("--concurrency",),
        "str",
        "forbid",
        None,
        "With --repeat, when the previous run is still active: allow, forbid (skip) or replace.",
    ),
    (
        ("--idempotency-key",),
        "str",
        None,
        None,
        "Send this Idempotency-Key (default: a fresh one, retried on connection errors): running the same command"
        " again with the same key and job returns the first job instead of a second.",
    ),
    (
        ("--array",),
        "str",
        None,
        None,
        "A job array, one task per index, as Slurm's --array: 0-999, 1,3,5-7 or 0-15:4; %%N at the end runs at "
        "most N tasks at once (0-999%%50). Each task reads its index in $CORRAL_ARRAY_INDEX; prints the array's "
        "id.",
    ),
    (("--json",), "flag", None, None, "Print JSON instead of a table."),
)


def _parser(**kw: Any) -> Any:
    """An argparse parser whose errors are UsageError (exit 2, one line); argparse is loaded only here."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise UsageError(message)

    return _Parser(**kw)


def _submit_parser() -> Any:
    import argparse

    p = _parser(
        prog="corral submit",
        description="Submit a job; prints its id. With --repeat, creates a schedule and prints its id and next run.",
    )
    for flags, kind, default, metavar, help_ in SUBMIT_OPTIONS:
        kw: dict[str, Any] = {"help": argparse.SUPPRESS if help_ is None else help_}
        if metavar is not None:
            kw["metavar"] = metavar
        if kind == "flag":
            kw["action"] = "store_true"
        elif kind == "append":
            kw.update(action="append", default=[])
        else:
            if kind == "int":
                kw["type"] = int
            if default is not None:
                kw["default"] = default
        p.add_argument(*flags, **kw)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="The command to run, after --.")
    return p


class SubmitArgs:
    """What fast_submit_args read: the attributes argparse's Namespace would have."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def _dest(flags: tuple[str, ...]) -> str:
    return flags[0][2:].replace("-", "_")


_SUBMIT_FLAGS = {flag: (_dest(flags), kind) for flags, kind, *_ in SUBMIT_OPTIONS for flag in flags}


def fast_submit_args(argv: Sequence[str]) -> SubmitArgs | None:
    """`corral submit`'s command line read without argparse (loading and building it is ~11 ms of a ~45 ms call),
    or None where argparse must read it: help, an unknown or abbreviated flag, a missing or bad value, a value that
    starts with '-' (argparse's rules for those are subtle), a short flag with its value attached, a command not
    after `--` that holds a word starting with '-'."""
    values: dict[str, Any] = {}
    for flags, kind, default, _, _ in SUBMIT_OPTIONS:
        values[_dest(flags)] = [] if kind == "append" else False if kind == "flag" else default
    values["command"] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--" or not arg.startswith("-"):
            if arg != "--" and any(later.startswith("-") for later in argv[i + 1 :]):
                return None  # argparse still reads those as its flags (an abbreviated one is an error)
            values["command"] = list(argv[i:])  # as argparse's REMAINDER: the rest
            break
        flag, eq, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        spec = _SUBMIT_FLAGS.get(flag)
        if spec is None:
            return None
        dest, kind = spec
        if kind == "flag":
            if eq:
                return None
            values[dest] = True
            i += 1
            continue
        if eq:
            value, i = attached, i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            return None
        if value.startswith("-"):
            return None
        if kind == "int":
            try:
                values[dest] = int(value)
            except ValueError:
                return None
        elif kind == "append":
            values[dest].append(value)
        else:
            values[dest] = value
    return SubmitArgs(values)


def _check_flags(a: Any) -> None:  # an argparse Namespace or a SubmitArgs
    """What the help promises, checked in the flags' own words (the server checks everything again)."""
    if a.gpu_share is not None and not 1 <= a.gpu_share <= 999:
        raise ValidationError(
            "--gpu-share", f"{a.gpu_share} is not a share of one GPU: 1..999 milli-GPUs (whole GPUs: --gpus)"
        )
    if a.gpus < 0:
        raise ValidationError("--gpus", f"{a.gpus} GPUs: ask for 0 or more")
    if a.nodes < 1:
        raise ValidationError("--nodes", f"{a.nodes} nodes: ask for 1 or more")
    if a.time_limit is not None and a.time_limit < 1:
        raise ValidationError("--time-limit", f"{a.time_limit} s: a time limit is at least 1 second")
    for flag, given in (
        ("--mount", a.mount),
        ("--shm-size", a.shm_size),
        ("--user", a.user),
        ("--registry-secret", a.registry_secret),
    ):
        if given and a.image is None:
            raise ValidationError(flag, "applies to a container job: add --image IMAGE")
    if a.container_port is not None and a.image is None:
        raise ValidationError("--container-port", "applies to a container job: add --image IMAGE")
    if a.container_port is not None and not (a.web_ui or a.port is not None):
        raise ValidationError("--container-port", "publishes a web UI: add --web-ui")


def _job_body(a: Any, command: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "command": command,
        "name": a.name or "",
        "gpus": a.gpus,
        "gpu_milli": a.gpu_share or 1000,
        "min_gpu_memory_mib": a.min_gpu_memory,
        "env": parse_env(a.env),
        "priority": a.priority,
        "queue": a.queue,
        "web_ui": a.web_ui or a.port is not None,
        "nodes": a.nodes,
        "secret_env": parse_pairs(a.secret_env, "--secret-env", "VAR=NAME"),
    }
    optional = (("gpu_model", a.gpu_model), ("workdir", a.workdir), ("time_limit_s", a.time_limit), ("array", a.array))
    for key, value in optional:
        if value is not None:
            body[key] = value
    if a.spot:
        body["spot"] = True
    if a.toleration:
        body["tolerations"] = list(a.toleration)
    if a.pool is not None:
        body["pool"] = a.pool
    if a.stage_in:
        body["stage_in"] = list(a.stage_in)
    if a.stage_out:
        body["stage_out"] = list(a.stage_out)
    if a.stage_secret is not None:
        body["stage_secret"] = a.stage_secret
    if a.image is not None:
        body.update(image=a.image, mounts=list(a.mount))
        if a.shm_size is not None:
            body["shm_size_mib"] = _parse_shm_size(a.shm_size)
        if a.user is not None:
            body["container_user"] = a.user
        if a.registry_secret is not None:
            body["registry_secret"] = a.registry_secret
        if a.container_port is not None:
            body["container_port"] = a.container_port
    return body


def _parse_shm_size(text: str) -> int:
    from corral.core.containers import parse_size_mib

    try:
        return parse_size_mib(text)
    except ValidationError as e:
        raise ValidationError("--shm-size", e.problem) from None


def _flag_error(e: Exception, prefix: str = "", flags: dict[str, str] = FLAG_OF_FIELD) -> Exception:
    """A refusal about a submitted field (the schema's 422, or the server's own checks' 400: a queue, a secret, a
    mount policy), re-worded with the flag the user typed (`flags`: field -> flag, `corral submit`'s by default)."""
    from corral.sdk.errors import CorralAPIError

    if not isinstance(e, CorralAPIError) or e.status not in (400, 422) or not e.field:
        return e
    loc = e.field.split(".")
    if prefix:
        if loc[0] != prefix:
            return e
        loc = loc[1:]
    if not loc or loc[0] not in flags:
        return e
    where = f" ({'.'.join(loc[1:])})" if len(loc) > 1 else ""
    problem = e.message.removeprefix(f"{e.field}: ").removeprefix("Value error, ")
    return ValidationError(flags[loc[0]], problem + where)


def submit(argv: list[str]) -> None:
    a: Any = fast_submit_args(argv) or _submit_parser().parse_args(argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        raise UsageError(
            "COMMAND: missing; put the command to run after --, e.g. corral submit --gpus 1 -- python train.py"
        )
    _check_flags(a)
    body = _job_body(a, command)
    if a.repeat is None and (a.timezone != "UTC" or a.concurrency != "forbid"):
        raise ValidationError("--repeat", "--timezone and --concurrency only apply to a repeating job (add --repeat)")
    from corral.cli.config import make_rest_client

    # A submission is retried with its Idempotency-Key (connection errors, 5xx) for up to a minute, each try
    # waiting at most 10 s: a server that crashed after accepting it answers the first job when it is back.
    with make_rest_client(timeout_s=10.0) as c:
        if a.repeat is not None:
            sched_in = {
                "name": a.name or "",
                "schedule": a.repeat,
                "timezone": a.timezone,
                "concurrency": a.concurrency,
                "job": body,
            }
            try:
                sched = c.request("POST", "/api/v1/schedules", json_body=sched_in).json()
            except Exception as e:
                raise _flag_error(e, "job") from None
            if a.json:
                print_json(sched)
            else:
                desc = f"schedule {sched['id']} ({sched['name']}): {sched['description']}"
                print(f"{desc}; next run {short_time(sched.get('next_run_at'))}")
            return
        from corral.sdk.retry import call_with_retries

        # A fresh random key (what uuid4 holds, without loading the uuid module: 5 ms of a 60 ms command).
        headers = {"Idempotency-Key": a.idempotency_key or os.urandom(16).hex()}
        try:
            job = call_with_retries(
                lambda: c.request("POST", "/api/v1/jobs", json_body=body, headers=headers), 60.0
            ).json()
        except Exception as e:
            raise _flag_error(e) from None
    if a.json:
        print_json(job)
    else:
        print(job["id"] if job.get("array_id") is None else job["array_id"])


MAX_JOB_ID = 2**31 - 1


def _job_id(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_JOB_ID:
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (a whole number from 1, as `corral jobs` shows)")
    return int(text)


def _id_parser(prog: str, description: str) -> Any:
    p = _parser(prog=prog, description=description)
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID", help="Job id.")
    return p


# `corral jobs`' options (all flags): each spelling -> its attribute
JOBS_FLAGS = {
    "--all": "all",
    "-a": "all",
    "--array": "array",
    "-r": "array",
    "--wide": "wide",
    "-w": "wide",
    "--json": "json",
}


def fast_flag_args(argv: Sequence[str], flags: dict[str, str]) -> SubmitArgs | None:
    """A command line of flags only, each spelled whole and apart (`-a -w`, not `-aw` nor `--al`), read without
    argparse (~10 ms of a call with `re`); None for anything else (help, a combined or abbreviated flag, an
    unknown word): argparse reads it, with its errors."""
    values = dict.fromkeys(flags.values(), False)
    for arg in argv:
        dest = flags.get(arg)
        if dest is None:
            return None
        values[dest] = True
    return SubmitArgs(values)


def fast_id_args(
    argv: Sequence[str], flags: dict[str, str], defaults: dict[str, Any] | None = None
) -> SubmitArgs | None:
    """`corral show|logs|cancel|wait JOB_ID [flags]` read without argparse: one job id (ASCII digits, 1 to
    2^31-1) and flags spelled whole and apart, in any order; an option with a value (`--timeout`, `--rank`) keeps
    its default here. None for anything else: argparse reads it, with its errors."""
    ids = [arg for arg in argv if arg.isascii() and arg.isdigit()]
    if len(ids) != 1 or not 1 <= int(ids[0]) <= MAX_JOB_ID:
        return None
    args = fast_flag_args([arg for arg in argv if arg != ids[0]], flags)
    if args is None:
        return None
    args.__dict__.update(defaults or {}, job_id=int(ids[0]))
    return args


def _jobs_parser() -> Any:
    p = _parser(
        prog="corral jobs",
        description="List pending and running jobs (all with --all), oldest first; the tasks of a job array in one "
        "line per state (ID 12_[0-999%50]) unless -r.",
    )
    p.add_argument("--all", "-a", action="store_true", help="Include finished jobs.")
    p.add_argument("--array", "-r", action="store_true", help="One line per task of a job array (as squeue -r).")
    p.add_argument(
        "--wide", "-w", action="store_true", help="Every column, full times with their zone (default: fits 80 columns)."
    )
    p.add_argument("--json", action="store_true", help="Print JSON (every job, arrays' tasks one by one).")
    return p


def jobs(argv: list[str]) -> None:
    a: Any = fast_flag_args(argv, JOBS_FLAGS) or _jobs_parser().parse_args(argv)
    from corral.cli.config import make_rest_client

    with make_rest_client() as c:
        items = list_all_pages(c, "/api/v1/jobs", {"all": str(a.all).lower()})
    if a.json:
        print_json(items)
        return
    shown = items if a.array else fold_arrays(items)
    if not shown:
        print("no jobs" if a.all else "no pending or running jobs (corral jobs --all shows finished ones)")
        return
    if a.wide:
        columns = ["ID", "NAME", "TENANT", "STATE", "POS", "NODE", "GPUS", "EXIT", "CREATED", "REASON", "ETA"]
        print_table(columns, [_job_row(j) for j in shown])
        return
    now = time.time()
    columns = ["ID", "NAME", "TENANT", "STATE", "NODE", "GPUS", "TIME", "REASON"]
    print_table(columns, fit_last_column(columns, [_compact_row(j, now) for j in shown], 80, last_min=12))


def _compact_row(j: dict[str, Any], now: float) -> list[str]:
    """squeue's habit: short columns, TIME = how long it has run (running) or waited (pending) or ran (finished)."""
    started, created, finished = (epoch(j.get(k)) for k in ("started_at", "created_at", "finished_at"))
    if j["state"] == "PENDING":
        age = now - created if created else None
    elif started:
        age = (finished or now) - started
    else:
        age = None
    reason = j.get("pending_reason") or j.get("reason") or ""
    if j["state"] == "PENDING" and j.get("queue_position") is not None:
        reason = f"#{j['queue_position'] + 1} {reason}"
    if j["state"] in ("SUCCEEDED", "FAILED") and j.get("exit_code") is not None:
        reason = f"exit {j['exit_code']}" + (f": {reason}" if reason else "")
    if j.get("phase"):  # a RUNNING job before its command starts: its GPUs are held meanwhile
        reason = j["phase"]
    return [
        str(j["id"]),
        job_name(j, 14),
        clip(j.get("tenant") or "", 10),
        j["state"],
        clip(j.get("node") or "", 10),
        ",".join(map(str, j.get("gpus") or ())) or str(j.get("gpu_count") or ""),
        "" if age is None else format_duration(age),
        reason,
    ]


def job_name(j: dict[str, Any], width: int | None = None) -> str:
    """The job's name (clipped to `width`); a service's replica says so, with its revision: `echo (replica r2)`."""
    name = j.get("name") or ""
    name = name if width is None else clip(name, width)
    if j.get("kind") == "replica":
        name += f" (replica r{j.get('service_revision')})"
    return name


def fit_last_column(columns: Sequence[str], rows: list[list[str]], width: int, last_min: int) -> list[list[str]]:
    """Clip the last column so that every line fits `width` characters (two spaces between columns)."""
    fixed = [max(len(r[i]) for r in [list(columns), *rows]) for i in range(len(columns) - 1)]
    room = max(width - sum(fixed) - 2 * len(fixed), last_min)
    return [[*r[:-1], clip(r[-1], room)] for r in rows]


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def epoch(value: Any) -> float | None:
    if not value:
        return None
    from datetime import datetime

    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def format_duration(seconds: float) -> str:
    """`45s`, `12m05s`, `3h07m`, `2d04h`: the two largest units, as `squeue`'s TIME reads at a glance."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def list_all_pages(c: Any, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every item of a paged list: follows the answers' `Link: <...>; rel="next"` until there is none."""
    out: list[dict[str, Any]] = []
    r = c.request("GET", path, params=params)
    while True:
        out += r.json()
        nxt = _next_link(r.headers.get("link", ""))
        if nxt is None:
            return out
        r = c.request("GET", nxt)


def _next_link(header: str) -> str | None:
    for part in header.split(","):
        target, _, rel = part.partition(";")
        if rel.strip() == 'rel="next"' and target.strip().startswith("<"):
            return target.strip()[1:-1]
    return None


def fold_arrays(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each job array's tasks in one row per state, at the place of its first task, its ID written as Slurm's
    squeue writes it (`12_[0-3,7%2]`: array 12, those indices, at most 2 at once); other jobs as they are."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for j in items:
        if j.get("array_id") is None:
            out.append(j)
            continue
        key = (j["array_id"], j["state"])
        if key not in groups:
            groups[key] = []
            out.append({"_fold": key})
        groups[key].append(j)
    rows = []
    for j in out:
        if "_fold" not in j:
            rows.append(j)
            continue
        from corral.core.arrays import format_indices  # with re and dataclasses: ~15 ms, only when arrays are shown

        tasks = groups[j["_fold"]]
        first = tasks[0]
        limit = f"%{first['array_limit']}" if first.get("array_limit") else ""
        indices = format_indices(t["array_index"] for t in tasks)
        one = len(tasks) == 1
        nodes = sorted({t["node"] for t in tasks if t.get("node")})
        rows.append(
            dict(
                first,
                id=f"{first['array_id']}_{indices}" if one else f"{first['array_id']}_[{indices}{limit}]",
                node=nodes[0] if len(nodes) == 1 else (f"{len(nodes)} nodes" if nodes else None),
                gpus=[] if not one else first.get("gpus"),
                gpu_count=first.get("gpu_count") if one or not first.get("gpu_count") else f"{first['gpu_count']} each",
                exit_code=first.get("exit_code") if one else None,
            )
        )
    return rows


def _job_row(j: dict[str, Any]) -> tuple[Any, ...]:
    return (
        j["id"],
        job_name(j),
        j["tenant"],
        state_text(j),
        "" if j.get("queue_position") is None else j["queue_position"] + 1,
        j.get("node"),
        ",".join(map(str, j.get("gpus") or ())) or j.get("gpu_count") or "",
        j.get("exit_code"),
        zoned(short_time(j.get("created_at"))),
        j.get("pending_reason") or j.get("reason"),
        zoned(short_time(j.get("eta"))),
    )


def _shell_join(argv: Sequence[str]) -> str:
    """The command as a shell line that runs it again (`sh -c 'echo a; sleep 1'`, not `sh -c echo a; sleep 1`)."""
    import shlex

    return shlex.join(argv)


def zoned(text: str) -> str:
    return f"{text} UTC" if text else ""  # the API's times are UTC


def _show_parser() -> Any:
    p = _id_parser("corral show", "Show one job.")
    p.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    return p


def show(argv: list[str]) -> None:
    a: Any = fast_id_args(argv, {"--json": "json"}) or _show_parser().parse_args(argv)
    from corral.cli.config import make_rest_client

    with make_rest_client() as c:
        job = c.request("GET", f"/api/v1/jobs/{a.job_id}").json()
        events = [] if a.json else c.request("GET", f"/api/v1/jobs/{a.job_id}/events").json()
    if a.json:
        print_json(job)
        return
    print_job(job)
    for e in events:
        print(f"  {e['at'][:19]}  {e['kind']:<16} {e['message']}")


def state_text(j: dict[str, Any]) -> str:
    """The state, with what a RUNNING job does before its command starts: "RUNNING (pulling 43%)"."""
    return str(j["state"]) + (f" ({j['phase']})" if j.get("phase") else "")


def describe_gpus(j: dict[str, Any]) -> str:
    """How many GPUs, and which once placed: "1 (GPU 0)", "2 (GPUs 3,5)", "2 requested", "0.5 of GPU 1",
    "8 on each of 2 nodes (a: 0-7 ...)". The indices alone ("0") read as a count of none."""
    count, milli, nodes = j.get("gpu_count") or 0, j.get("gpu_milli") or 1000, j.get("nodes") or 1
    parts = [p for p in j.get("parts") or () if p.get("gpus")] or (
        [{"node": j.get("node"), "gpus": j["gpus"]}] if j.get("gpus") else []
    )

    def which(gpus: list[int]) -> str:
        return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))}"

    if count == 0:
        return "none"
    if milli < 1000:
        share = f"{milli / 1000:g}"
        return f"{share} of {which(parts[0]['gpus'])}" if parts else f"{share} of a GPU requested"
    amount = f"{count} on each of {nodes} nodes" if nodes > 1 else str(count)
    if not parts:
        return f"{amount} requested"
    if nodes > 1:
        return f"{amount} (" + "; ".join(f"{p['node']}: {which(p['gpus'])}" for p in parts) + ")"
    return f"{amount} ({which(parts[0]['gpus'])})"


def print_job(j: dict[str, Any]) -> None:
    fields: list[tuple[str, Any]] = [
        ("id", j["id"]),
        ("name", j["name"]),
        ("state", state_text(j)),
        ("node", j.get("node")),
        ("gpus", describe_gpus(j)),
        ("command", _shell_join(j.get("command") or ())),
        ("exit code", j.get("exit_code")),
        ("reason", j.get("pending_reason") or j.get("reason")),
        ("created", zoned(short_time(j.get("created_at")))),
        ("started", zoned(short_time(j.get("started_at")))),
        ("finished", zoned(short_time(j.get("finished_at")))),
    ]
    if j.get("array_id") is not None:
        limit = f" (at most {j['array_limit']} at once)" if j.get("array_limit") else ""
        fields.append(
            ("array", f"{j['array_id']}_{j['array_index']}: task {j['array_index']} of array {j['array_id']}{limit}")
        )
    if j.get("kind") == "replica":  # its service's name is the job's name
        fields.append(
            ("service", f"{j['name']}, revision {j.get('service_revision')} (corral service show {j['name']})")
        )
    if j.get("prediction"):  # pending or running: what its tenant's earlier jobs like it ran for
        fields.append(("predicted", j["prediction"]))
    if j.get("web_url"):
        fields.append(("web UI", j["web_url"]))
    if j.get("image"):
        fields.append(("image", j["image"] + (f" ({j['image_digest']})" if j.get("image_digest") else "")))
        if j.get("registry_secret"):
            fields.append(("pulled with", f"registry secret {j['registry_secret']}"))
        if j.get("mounts"):
            fields.append(("mounts", ", ".join(j["mounts"])))
    if j.get("stage_in"):
        on = ", ".join(j.get("stage_nodes") or ([j["stage_node"]] if j.get("stage_node") else []))
        where = f" (on {on}: {j['stage_state']})" if on else ""
        fields.append(("stage in", ", ".join(j["stage_in"]) + where))
    if j.get("stage_out"):
        fields.append(("stage out", ", ".join(j["stage_out"])))
        outcome = j.get("stage_out_state") or ""
        fields.append(("output", outcome + (f": {j['stage_out_message']}" if j.get("stage_out_message") else "")))
    if j.get("secret_env"):  # names only: the values never leave the server except to the job's agent
        fields.append(("secrets", ", ".join(f"{var} <- {name}" for var, name in sorted(j["secret_env"].items()))))
    if (j.get("nodes") or 1) > 1:
        parts = j.get("parts") or ()
        fields.append(
            (
                "parts",
                "; ".join(f"rank {i}: {p['node']} GPUs {','.join(map(str, p['gpus']))}" for i, p in enumerate(parts)),
            )
        )
    print_fields(fields, 10)


def _logs_parser() -> Any:
    p = _id_parser("corral logs", "Print a job's logs (stdout and stderr).")
    p.add_argument("--follow", "-f", action="store_true", help="Keep printing until the job ends.")
    p.add_argument("--rank", type=int, default=0, help="Which part of a multi-node job.")
    return p


def logs(argv: list[str]) -> None:
    a: Any = fast_id_args(argv, {"--follow": "follow", "-f": "follow"}, {"rank": 0}) or _logs_parser().parse_args(argv)
    from corral.cli.config import make_rest_client

    offset = 0
    out = sys.stdout.buffer
    with make_rest_client() as c:

        def read(at: int) -> tuple[bytes, int, str]:
            r = c.request("GET", f"/api/v1/jobs/{a.job_id}/logs", params={"offset": at, "rank": a.rank})
            return r.content, int(r.headers.get("x-log-size", "0")), r.headers.get("x-job-state", "")

        said_pending = False
        while True:
            data, size, state = read(offset)
            if data:
                out.write(data)
                out.flush()
                offset += len(data)
            if offset < size:
                continue
            if not a.follow or state in TERMINAL_STATES:
                # a final read after the end: the agent ships all logs before it reports the exit
                if a.follow:
                    data, _, _ = read(offset)
                    out.write(data)
                    out.flush()
                    job = c.request("GET", f"/api/v1/jobs/{a.job_id}").json()
                    code = "" if job.get("exit_code") is None else f" (exit code {job['exit_code']})"
                    why = f": {job['reason']}" if job.get("reason") and job["state"] != "SUCCEEDED" else ""
                    print(f"job {a.job_id} {job['state']}{code}{why}", file=sys.stderr)
                return
            if state == "PENDING" and not said_pending:  # say what it waits for (on stderr: stdout is the log)
                job = c.request("GET", f"/api/v1/jobs/{a.job_id}").json()
                reason = job.get("pending_reason") or "waiting for the scheduler"
                print(f"job {a.job_id} is pending ({reason}); its logs follow when it starts", file=sys.stderr)
                said_pending = True
            time.sleep(0.5)


def _cancel_parser() -> Any:
    p = _id_parser("corral cancel", "Cancel a job (SIGTERM, then SIGKILL after a grace period).")
    p.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    return p


def cancel(argv: list[str]) -> None:
    a: Any = fast_id_args(argv, {"--json": "json"}) or _cancel_parser().parse_args(argv)
    from corral.cli.config import make_rest_client

    with make_rest_client() as c:
        job = c.request("POST", f"/api/v1/jobs/{a.job_id}/cancel").json()
    if a.json:
        print_json(job)
    else:
        print(f"job {job['id']}: {'cancelling' if job['state'] == 'RUNNING' else job['state'].lower()}")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def _wait_parser() -> Any:
    p = _id_parser("corral wait", "Wait for a job to end; exits with the job's exit code.")
    p.add_argument("--timeout", type=_seconds, help="Give up after S seconds (exit 124).")
    return p


def wait(argv: list[str]) -> None:
    a: Any = fast_id_args(argv, {}, {"timeout": None}) or _wait_parser().parse_args(argv)
    from corral.cli.config import make_rest_client

    deadline = None if a.timeout is None else time.monotonic() + a.timeout
    with make_rest_client() as c:
        while True:
            job = c.request("GET", f"/api/v1/jobs/{a.job_id}").json()
            state, code = job["state"], job.get("exit_code")
            if state in TERMINAL_STATES:
                print(f"job {job['id']} {state} (exit code {code})", file=sys.stderr)
                exit_code = code if code is not None else (130 if state == "CANCELLED" else 1)
                raise Exit(exit_code if 0 <= exit_code <= 255 else 1)
            if deadline is not None and time.monotonic() >= deadline:
                print(f"error: job {a.job_id} still {state} after {a.timeout:g} s", file=sys.stderr)
                raise Exit(124)
            time.sleep(0.25)


COMMANDS: dict[str, Callable[[list[str]], None]] = {
    "submit": submit,
    "jobs": jobs,
    "show": show,
    "logs": logs,
    "cancel": cancel,
    "wait": wait,
}


def print_json(data: Any) -> None:
    import json

    print(json.dumps(data, indent=2))


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Columns aligned with two spaces between them, as squeue prints (None prints as nothing)."""
    cells = [list(columns), *[["" if v is None else str(v) for v in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def print_fields(fields: Sequence[tuple[str, Any]], width: int) -> None:
    """One `name  value` line per field, names right-aligned to `width` (None prints as nothing)."""
    for k, v in fields:
        print(f"{k:>{width}}  {'' if v is None else v}".rstrip())


def short_time(value: Any) -> str:
    """ "2026-11-25 23:19:07" from the API's ISO time (or a datetime); "" for none."""
    if not value:
        return ""
    return value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else str(value)[:19].replace("T", " ")


def describe_error(e: BaseException) -> str:
    """One line naming what is wrong."""
    from corral.sdk.errors import CorralAPIError

    if isinstance(e, CorralAPIError):
        field = f" (field: {e.field})" if e.field and e.field not in e.message else ""
        return f"{e.message}{field}"
    if isinstance(e, CorralError):
        return e.message
    return str(e)


def run(command: str, argv: list[str]) -> NoReturn:
    """Run one light command and exit: 0, the command's own code, 1 on an error, 2 on a bad command line."""
    from corral.cli.config import ConfigError
    from corral.sdk.errors import CorralSDKError

    try:
        COMMANDS[command](argv)
    except Exit as e:
        sys.exit(e.code)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (CorralSDKError, ConfigError, CorralError) as e:
        print(f"error: {describe_error(e)}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(141)
    sys.exit(0)


def print_version() -> None:
    print(__version__)
