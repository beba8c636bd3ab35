"""The everyday CLI commands take the light path (issue 13): guarded by the modules they load, never by time
(bench/cli_speed.py measures the time). Their answers against a real server are covered by tests/e2e."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.cli import light
from corral.core.errors import ValidationError
from corral.sdk.errors import CorralAPIError

CORRAL = str(Path(sys.executable).with_name("corral"))
# What a submission must not load: each costs tens of milliseconds, and none is needed to send a job.
HEAVY = ("typer", "click", "httpx", "pydantic", "rich", "multiprocessing", "corral.api.schemas", "corral.scheduler")
HEAVY += ("typing",)  # with re and its friends a few ms of every call: annotations only, under TYPE_CHECKING
HEAVY += (
    "corral.sim",
    "corral.server",
    "corral.store",
    "corral.agent",
    "corral.sdk.client",
    "fastapi",
    "sqlalchemy",
    "uuid",
)
HEAVY += ("http.client", "email", "ssl")  # ~17 ms: corral.sdk.wire speaks HTTP/1.1 itself; ssl only for https://
HEAVY += ("pathlib", "encodings.idna")  # ~2.5 and ~2 ms: the config file's path by os.path, an ASCII host as bytes
# What a usual submission (read without argparse, which loads re) does not load either: ~15 ms together on this host,
# json's and urllib.parse's regular expressions (re, with enum, functools and collections) and socket's enums;
# corral.sdk.litejson, corral.sdk.endpoints.split_url and _socket stand in for them.
LEAN = ("re", "enum", "json", "urllib", "socket", "collections", "functools", "argparse")


class _Refuses(http.server.BaseHTTPRequestHandler):
    """A server that answers every request 401 with Corral's error body: the command got as far as the network."""

    def _refuse(self) -> None:
        body = json.dumps({"error": {"code": "unauthorized", "message": "invalid token", "field": None}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def refusing_url() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _loaded_modules(*args: str, url: str = "http://127.0.0.1:9") -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `corral ARGS` under -X importtime against `url`; the modules it imported."""
    env = dict(os.environ, CORRAL_URL=url, CORRAL_TOKEN="crl_test")
    r = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "import sys; from corral.cli.main import main; main(sys.argv[1:])",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    mods = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, mods


@pytest.mark.parametrize(
    "args",
    [
        ("submit", "--gpus", "1", "--env", "A=1", "--", "python", "train.py"),
        ("submit", "--repeat", "@daily", "--", "true"),
        ("jobs", "--all"),
        ("show", "7"),
        ("logs", "7", "--follow"),
        ("cancel", "7"),
        ("wait", "7", "--timeout", "1"),
    ],
)
def test_everyday_commands_load_no_heavy_library(args: tuple[str, ...], refusing_url: str) -> None:
    r, mods = _loaded_modules(*args, url=refusing_url)
    # It got as far as the server (so everything the command needs was loaded), and failed there in one line.
    errors = [line for line in r.stderr.splitlines() if not line.startswith("import time:")]
    assert r.returncode == 1 and errors == ["error: authentication failed: invalid token"], r.stderr
    assert "corral.sdk.rest" in mods and "corral.cli.light" in mods
    heavy = sorted(m for m in mods if m.split(".")[0] in HEAVY or any(m.startswith(h + ".") or m == h for h in HEAVY))
    assert heavy == [], f"`corral {args[0]}` loads {heavy}"


def test_a_usual_submission_loads_neither_argparse_nor_re_json_or_socket(refusing_url: str) -> None:
    # ~11 ms of a ~45 ms call: the usual command lines are read by light.fast_submit_args (what argparse would read:
    # tests/unit/cli/test_fast_submit_args.py); argparse is loaded for help, errors and the unusual
    r, mods = _loaded_modules(
        "submit", "--gpus", "1", "--name=a", "-e", "A=1", "--", "python", "-c", "1", url=refusing_url
    )
    assert r.returncode == 1 and "corral.sdk.rest" in mods, r.stderr
    assert sorted(m for m in mods if m.split(".")[0] in LEAN) == []
    r, mods = _loaded_modules("submit", "--gpu", "1", "--", "true", url=refusing_url)  # an abbreviation
    assert r.returncode == 2 and "argparse" in mods and "ambiguous option: --gpu" in r.stderr


def test_a_usual_job_list_or_job_command_loads_neither_argparse_nor_re_json_or_socket(refusing_url: str) -> None:
    r, mods = _loaded_modules("jobs", "--all", "-w", url=refusing_url)
    assert r.returncode == 1 and "corral.sdk.rest" in mods, r.stderr
    assert sorted(m for m in mods if m.split(".")[0] in LEAN) == []
    r, mods = _loaded_modules("jobs", "-aw", url=refusing_url)  # combined short flags: argparse's to read
    assert r.returncode == 1 and "argparse" in mods, r.stderr
    for args in (("show", "7"), ("cancel", "7", "--json"), ("logs", "7", "-f"), ("wait", "7")):
        r, mods = _loaded_modules(*args, url=refusing_url)
        assert r.returncode == 1 and "corral.sdk.rest" in mods, r.stderr
        assert sorted(m for m in mods if m.split(".")[0] in LEAN) == [], args
    r, mods = _loaded_modules("wait", "7", "--timeout", "1", url=refusing_url)  # a value: argparse reads it
    assert r.returncode == 1 and "argparse" in mods, r.stderr


def test_version_loads_neither_argparse_nor_the_client() -> None:
    r, mods = _loaded_modules("--version")
    assert r.returncode == 0 and r.stdout.strip() == __import__("corral").__version__
    assert not {"argparse", "corral.cli.light", "corral.sdk.rest", "typer"} & mods


def test_other_commands_still_load_the_typer_app() -> None:
    r, mods = _loaded_modules("tenants", "--help")
    assert r.returncode == 0 and "typer" in mods and "tenants [OPTIONS] COMMAND" in r.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("submit", "--bogus", "--", "true"), "unrecognized arguments: --bogus"),
        (("submit",), "COMMAND: missing"),
        (("submit", "--"), "COMMAND: missing"),
        (("submit", "--gpus", "two", "--", "true"), "argument --gpus: invalid int value: 'two'"),
        (("submit", "--env", "NOEQUALS", "--", "true"), "--env: 'NOEQUALS' is not KEY=VALUE"),
        (("submit", "--secret-env", "DB", "--", "true"), "--secret-env: 'DB' is not VAR=NAME"),
        (("submit", "--timezone", "Europe/Paris", "--", "true"), "--repeat: --timezone and --concurrency only apply"),
        (("show", "abc"), "argument JOB_ID: 'abc' is not a job id (a whole number from 1"),
        (("show", "-1"), "argument JOB_ID: '-1' is not a job id"),
        (("cancel", "0"), "argument JOB_ID: '0' is not a job id"),
        (("submit", "--gpus", "1", "--gpu-share", "1500", "--", "x"), "--gpu-share: 1500 is not a share of one GPU"),
        (("submit", "--gpus", "-2", "--", "x"), "--gpus: -2 GPUs: ask for 0 or more"),
        (("submit", "--nodes", "0", "--", "x"), "--nodes: 0 nodes"),
        (("submit", "--time-limit", "0", "--", "x"), "--time-limit: 0 s"),
        (("wait", "7", "--timeout", "-1"), "argument --timeout: '-1' is not a number of seconds >= 0"),
    ],
)
def test_a_bad_command_line_is_one_line_before_any_request(args: tuple[str, ...], words: str) -> None:
    r, _ = _loaded_modules(*args)
    lines = r.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("import time:")]
    assert errors == [f"error: {errors[0].removeprefix('error: ')}"] and words in errors[0], r.stderr
    assert "cannot reach" not in r.stderr  # refused on the command line, nothing was sent
    assert r.returncode in (1, 2)


def test_the_typer_entry_hands_light_commands_over_with_their_arguments() -> None:
    # Someone calling the typer app directly (corral.cli.app.main) gets the same command, same errors.
    env = dict(os.environ, CORRAL_URL="http://127.0.0.1:9", CORRAL_TOKEN="crl_test")
    code = "from corral.cli.app import main; main(['submit', '--bogus', '--', 'true'])"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr == "error: unrecognized arguments: --bogus\n"
    code = "from corral.cli.app import main; main(['jobs', '--all'])"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "cannot reach the Corral server" in r.stderr


def test_the_command_after_its_options_is_kept_whole() -> None:
    a = light._submit_parser().parse_args(["--gpus", "2", "python", "train.py", "--gpus", "8", "--", "x"])
    assert a.gpus == 2 and a.command == ["python", "train.py", "--gpus", "8", "--", "x"]
    a = light._submit_parser().parse_args(["--name", "n", "--", "python", "-c", "1"])
    assert a.command == ["--", "python", "-c", "1"]  # submit() drops the leading "--"
    body = light._job_body(light._submit_parser().parse_args(["--gpu-share", "250", "--port", "1", "x"]), ["x"])
    assert body["gpu_milli"] == 250 and body["web_ui"] is True and "time_limit_s" not in body


@pytest.mark.parametrize(
    ("field", "message", "prefix", "flag", "problem"),
    [
        (
            "gpus",
            "gpus: Input should be less than or equal to 8",
            "",
            "--gpus",
            "Input should be less than or equal to 8",
        ),
        (
            "env.A",
            "env.A: String should have at most 4096 characters",
            "",
            "--env",
            "String should have at most 4096 characters (A)",
        ),
        ("time_limit_s", "time_limit_s: Value error, too long", "", "--time-limit", "too long"),
        ("job.gpu_milli", "job.gpu_milli: bad", "job", "--gpu-share", "bad"),
    ],
)
def test_a_refused_field_is_named_by_its_flag(field: str, message: str, prefix: str, flag: str, problem: str) -> None:
    e = light._flag_error(CorralAPIError(422, "invalid", message, field, {}), prefix)
    assert isinstance(e, ValidationError) and (e.field, e.problem) == (flag, problem)


def test_the_servers_own_checks_name_the_flag_too() -> None:
    domain = CorralAPIError(400, "invalid", "gpu_model: no B200 GPUs in the pool", "gpu_model", {})
    e = light._flag_error(domain)  # a check of the server's (the pool, a secret, a mount policy), not the schema's
    assert isinstance(e, ValidationError) and (e.field, e.problem) == ("--gpu-model", "no B200 GPUs in the pool")
    secret = CorralAPIError(400, "invalid", "registry_secret: no secret 'x' in this tenant", "registry_secret", {})
    assert str(light._flag_error(secret)) == "--registry-secret: no secret 'x' in this tenant"


def test_errors_that_are_not_about_a_flag_keep_their_words() -> None:
    tenant = CorralAPIError(400, "invalid", "tenant: the caller belongs to no tenant", "tenant", {})
    assert light._flag_error(tenant) is tenant  # no flag sets it
    other = CorralAPIError(422, "invalid", "schedule: bad cron", "schedule", {})
    assert light._flag_error(other, "job") is other
    assert light.describe_error(CorralAPIError(404, "not_found", "job '7' not found", None, {})) == "job '7' not found"
    assert light.describe_error(CorralAPIError(400, "x", "too many", "gpus", {})) == "too many (field: gpus)"


def test_tables_and_fields_print_as_plain_aligned_text(capsys: pytest.CaptureFixture[str]) -> None:
    light.print_table(["ID", "NAME"], [(1, "a-long-name"), (22, None)])
    light.print_fields([("id", 5), ("node", None)], 6)
    assert capsys.readouterr().out.splitlines() == ["ID  NAME", "1   a-long-name", "22", "    id  5", "  node"]
    assert light.short_time("2026-11-25T23:19:07.123456Z") == "2026-11-25 23:19:07" and light.short_time(None) == ""


JOB = {
    "id": 1234,
    "name": "a-rather-long-training-run-name",
    "tenant": "computer-vision",
    "state": "PENDING",
    "queue_position": 2,
    "node": None,
    "gpus": [],
    "gpu_count": 8,
    "created_at": "2026-11-26T00:00:00Z",
    "started_at": None,
    "finished_at": None,
    "pending_reason": "capacity: waiting for 8 free GPUs on one node; 3 are free on node gpu-a, the next frees at 14:05 UTC",
}


def test_the_default_job_table_fits_80_columns_with_ages(capsys: pytest.CaptureFixture[str]) -> None:
    now = light.epoch("2026-11-26T01:02:03Z")
    assert now is not None
    running = dict(JOB, id=7, state="RUNNING", node="gpu-a", gpus=[0, 1], started_at="2026-11-26T00:59:58Z")
    running.update(pending_reason=None, queue_position=None)
    done = dict(running, id=8, state="FAILED", exit_code=3, finished_at="2026-11-26T01:00:00Z", reason="crashed")
    rows = [light._compact_row(j, now) for j in (JOB, running, done)]
    columns = ["ID", "NAME", "TENANT", "STATE", "NODE", "GPUS", "TIME", "REASON"]
    light.print_table(columns, light.fit_last_column(columns, rows, 80, 12))
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[1].startswith("1234  a-rather-long…  computer-…  PENDING") and "1h02m  #3 capacity: wai" in lines[1]
    assert lines[1].endswith("…")  # the reason, clipped to what is left of 80 columns
    assert "2m05s" in lines[2] and "0,1" in lines[2]  # running for 2m05s on GPUs 0 and 1
    assert lines[3].rstrip().endswith("exit 3: crashed") and "2s" in lines[3]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m00s"),
        (725, "12m05s"),
        (3600 * 3 + 420, "3h07m"),
        (86400 * 2 + 3600 * 4, "2d04h"),
    ],
)
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    assert light.format_duration(seconds) == text


def test_show_prints_the_command_as_a_shell_line_and_times_in_utc(capsys: pytest.CaptureFixture[str]) -> None:
    job = dict(JOB, command=["sh", "-c", "echo $X; sleep 1"], exit_code=None, reason="", nodes=1)
    light.print_job(job)
    out = capsys.readouterr().out
    assert "   command  sh -c 'echo $X; sleep 1'" in out
    assert "   created  2026-11-26 00:00:00 UTC" in out and "   started\n" in out


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"gpu_count": 1, "gpus": [0], "gpu_milli": 1000}, "1 (GPU 0)"),  # not "0": GPU 0 read as no GPU at all
        ({"gpu_count": 2, "gpus": [3, 5], "gpu_milli": 1000}, "2 (GPUs 3,5)"),
        ({"gpu_count": 2, "gpus": [], "gpu_milli": 1000}, "2 requested"),
        ({"gpu_count": 1, "gpus": [1], "gpu_milli": 250}, "0.25 of GPU 1"),
        ({"gpu_count": 0, "gpus": [], "gpu_milli": 1000}, "none"),
        (
            {
                "gpu_count": 2,
                "nodes": 2,
                "gpus": [0, 1],
                "gpu_milli": 1000,
                "parts": [{"node": "a", "gpus": [0, 1]}, {"node": "b", "gpus": [6, 7]}],
            },
            "2 on each of 2 nodes (a: GPUs 0,1; b: GPUs 6,7)",
        ),
    ],
)
def test_show_says_how_many_gpus_and_which(
    fields: dict[str, object], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    light.print_job(dict(JOB, **fields))
    assert f"      gpus  {text}\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"xid": 79}, "Xid 79 raised"),
        ({"xid": 48, "ecc": True}, "Xid 48 raised, a double-bit ECC error raised"),
        ({"off_bus": True, "temperature_c": 95.0}, "fallen off the bus, temperature set to 95 °C"),
        ({"clear": True}, "faults cleared"),
    ],
)
def test_a_simulated_fault_is_confirmed_in_words_not_as_a_dict(body: dict[str, object], words: str) -> None:
    from corral.cli.nodes import describe_fault

    assert describe_fault(body) == words
