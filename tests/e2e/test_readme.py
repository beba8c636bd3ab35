"""README.md runs as written: every ```sh / ```console block, in order, against a real `corral up` (a server and a
local agent, eight simulated H100s), so a walkthrough that no longer works, or whose shown output no longer
matches, fails here with the README line. The convention (blocks, `<!-- readme-test: skip ... (why) -->`) is in
`readme_doc.py` and CONTRIBUTING.md.

What the test supplies, as a reader would:
- The CLI session is the admin's (`corral up` wrote its config) until `corral login USER` succeeds: that runs on
  USER's own machine (a HOME of its own, CORRAL_URL set to the server, the password the README's
  `CORRAL_PASSWORD=... corral users create USER` got), and the lines after it run as USER. A line whose comment
  starts with `admins` or `as admin` runs as the admin.
- Placeholders: `CORRAL_PASSWORD=...` gets a fresh password; `$WANDB_API_KEY` and `$NEW_KEY` are set;
  `head:8600` / `head:8602` are this server's ports; `python train.py ARGS` is the reader's program, here a
  stand-in (`train.py` below, a few printed epochs) run by the system Python, which a job's user can execute.
- `corral submit` prints the job id: it must print one integer, and a job id the README uses later (`corral logs
  1`) must be one a submit printed.
- Each command runs in a scratch working directory (with `.venv` linked, so `. .venv/bin/activate` works) and
  must exit 0; a failure names the README line, the command as run, and its stderr. A `background` command (the
  README's `corral agent --join ...`) runs as a second machine (a HOME of its own) and must add a node.

Then, against the same cluster, the facts the sections without a block state (the first start's files, the CLI's
one-line errors, a job's JSON fields, /metrics with a metrics token, the API's endpoints, error shape and pages).
Without a cluster: every `corral ...` the prose and the CLI table name must exist with its flags (checked against
`corral ... --help`), and every file, link and `make` target the README names must exist.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.api.tls import parse_join_token

from .conftest import Corral, free_port, wait_for
from .readme_doc import (
    Block,
    Command,
    ReadmeFormatError,
    check_command_span,
    inline_commands,
    load,
    output_matches,
    parse_readme,
)

README = Path(__file__).resolve().parents[2] / "README.md"
VENV = Path(sys.executable).parent.parent
COMMAND_TIMEOUT_S = 90

TRAIN_PY = """\
import sys, time
args = sys.argv[1:]
epochs = int(args[args.index("--epochs") + 1]) if "--epochs" in args else 2
for epoch in range(1, epochs + 1):
    time.sleep(0.2)
    print(f"epoch {epoch}/{epochs}", flush=True)
"""

JOB_REF = re.compile(r"\bcorral (?:logs|wait|cancel|show) (\d+)\b")
LOGIN = re.compile(r"^corral login (\S+)")
NEW_PASSWORD = re.compile(r"CORRAL_PASSWORD=\.\.\. corral users (?:create|set) (\S+)")
COMMENT = re.compile(r"\s#\s*(.*)$")


class Session:
    """A reader at a shell: who the CLI is (admin, or a user logged in on a machine of their own), what the
    walkthrough has made so far (passwords, job ids)."""

    def __init__(self, c: Corral, work: Path) -> None:
        self.c = c
        self.work = work
        (work / ".venv").symlink_to(VENV)
        self.train_py = c.shared / "train.py"
        self.train_py.write_text(TRAIN_PY)
        self.train_py.chmod(0o644)
        path = f"{VENV / 'bin'}{os.pathsep}{c.env.get('PATH', '')}"
        reader = {"PATH": path, "WANDB_API_KEY": "readme-wandb-key", "NEW_KEY": "readme-new-key"}
        self.envs: dict[str, dict[str, str]] = {"admin": dict(c.env, **reader)}
        self.base = {k: v for k, v in c.env.items() if not k.startswith("CORRAL_")} | reader
        self.user = "admin"
        self.passwords: dict[str, str] = {}
        self.job_ids: list[int] = []
        self.ran = 0

    def substitute(self, text: str) -> str:
        """The command as it runs here: the README's placeholders filled in (a password is remembered for its user)."""
        made = NEW_PASSWORD.search(text)
        if made:
            user = made[1]
            self.passwords[user] = self.passwords.get(user) or f"readme-{secrets.token_hex(8)}"
            text = text.replace("CORRAL_PASSWORD=...", f"CORRAL_PASSWORD={self.passwords[user]}", 1)
        text = re.sub(r"\bpython train\.py\b", f"/usr/bin/python3 {self.train_py}", text)
        text = text.replace("head:8600", f"127.0.0.1:{self.c.port}").replace(
            "head:8602", f"127.0.0.1:{self.c.agent_port}"
        )
        return text

    def env_for(self, cmd: Command) -> tuple[str, dict[str, str]]:
        comment = COMMENT.search(cmd.text)
        if comment and re.match(r"(admins\b|as admin\b)", comment[1]):
            return "admin", self.envs["admin"]
        login = LOGIN.match(cmd.text)
        if login and login[1] != "admin":  # on the user's own machine
            user = login[1]
            assert user in self.passwords, f"README.md:{cmd.line}: `corral login {user}` before {user} has a password"
            home = self.work / f"home-{user}"
            env = dict(self.base, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), CORRAL_URL=self.c.url)
            self.envs[user] = env
            return user, dict(env, CORRAL_PASSWORD=self.passwords[user])
        return self.user, self.envs[self.user]

    def start_background(self, cmd: Command) -> None:
        """A program that does not end (`corral agent --join ...`), on a machine of its own: a HOME of its own (so its
        own default data dir), jobs' dirs where their users can reach them (as the e2e fixture's are). A `corral
        agent` must bring a new node within 60 s, or the test fails with its output."""
        text = self.substitute(cmd.text)
        home = self.work / f"machine-{len(self.c.procs) + 1}"
        home.mkdir()
        env = dict(self.base, HOME=str(home), CORRAL_JOBS_DIR=str(self.c.jobs_dir))
        log = home / "output.log"
        before = len(self.c.cli_json("nodes"))
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", text],
                cwd=self.work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.c.procs.append(proc)  # ended by the fixture, with the cluster
        if re.match(r"corral agent\b", text):

            def settled() -> bool:  # joined, or ended
                return proc.poll() is not None or len(self.c.cli_json("nodes")) > before

            try:
                wait_for(settled, 60, "a new node")
                problem = None if proc.poll() is None else f"exited {proc.returncode}"
            except AssertionError as e:
                problem = str(e)
            if problem:
                raise AssertionError(f"README.md:{cmd.line}: `{cmd.text}` {problem}\nran: {text}\n{log.read_text()}")
        self.ran += 1

    def run(self, cmd: Command, as_admin: bool = False) -> subprocess.CompletedProcess[str]:
        for ref in JOB_REF.findall(cmd.text):
            assert int(ref) in self.job_ids, (
                f"README.md:{cmd.line}: `{cmd.text}` uses job {ref}, but the README's submits printed {self.job_ids}"
            )
        text = self.substitute(cmd.text)
        user, env = ("admin", self.envs["admin"]) if as_admin else self.env_for(cmd)
        try:
            r = subprocess.run(
                ["bash", "-c", text],
                cwd=self.work,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as e:
            raise AssertionError(
                f"README.md:{cmd.line}: `{cmd.text}` (as {user}) did not end within {COMMAND_TIMEOUT_S} s\n"
                f"ran: {text}\nstdout:\n{e.stdout!r}\nstderr:\n{e.stderr!r}"
            ) from None
        assert r.returncode == 0, (
            f"README.md:{cmd.line}: `{cmd.text}` (as {user}) exited {r.returncode}\n"
            f"ran: {text}\nstderr:\n{r.stderr}\nstdout:\n{r.stdout}"
        )
        if cmd.output is not None:
            assert output_matches(cmd.output, r.stdout), (
                f"README.md:{cmd.line}: `{cmd.text}` printed what the README does not show\n"
                "README shows:\n" + "\n".join(cmd.output) + f"\nit printed:\n{r.stdout}"
            )
        if re.search(r"\bcorral submit\b", text) and "--repeat" not in text:  # (--repeat prints a schedule)
            printed = r.stdout.strip()
            assert printed.isdigit(), f"README.md:{cmd.line}: `corral submit` printed {printed!r}, not a job id"
            self.job_ids.append(int(printed))
        if LOGIN.match(cmd.text) and user != "admin":
            self.user = user
        self.ran += 1
        return r


@pytest.mark.e2e
def test_every_readme_block_runs_in_order(corral_factory: Any, tmp_path: Path) -> None:
    blocks = load(README)
    c: Corral = corral_factory()
    c.start()
    work = tmp_path / "work"
    work.mkdir()
    s = Session(c, work)
    skipped: list[str] = []
    for block in blocks:
        if block.skipped:
            skipped.append(f"README.md:{block.line} block: {block.skipped}")
            continue
        for cmd in block.commands:
            if cmd.skipped:
                skipped.append(f"README.md:{cmd.line} `{cmd.text.split('  #')[0].strip()}`: {cmd.skipped}")
            elif cmd.background:
                s.start_background(cmd)
            else:
                s.run(cmd)
    ran_blocks = sum(1 for b in blocks if not b.skipped)
    print(f"README: {ran_blocks} blocks run ({s.ran} commands), {len(skipped)} skipped:")
    for line in skipped:
        print(f"  {line}")
    # what the walkthrough says it leaves behind (a run that silently did nothing would not get here)
    assert s.ran >= 10 and ran_blocks >= 4, (s.ran, ran_blocks)
    assert (work / "join-token").read_text().strip(), "`corral tokens join create ... > join-token` wrote nothing"
    assert s.user == "alice" and "alice" in s.passwords
    assert len(c.cli_json("nodes")) == 2, "the README's `corral agent --join` did not add a node"
    check_prose_claims(c, s, README.read_text())


def check_prose_claims(c: Corral, s: Session, text: str) -> None:
    """The sections without a block (The CLI, Health and monitoring, The API) state facts a reader relies on:
    checked here against the same cluster, each failure naming the README line."""

    def line_of(needle: str) -> int:
        return text[: text.index(needle)].count("\n") + 1

    # Quick start and More machines: what the first start leaves (`make up` is `corral up`), and the join tokens
    up_log = next(c.root.glob("up-*.log")).read_text()
    assert f"Corral is up at {c.url}" in up_log, f"README.md:{line_of('prints the URL')}: `corral up` printed {up_log}"
    for name in ("admin-token", "join-token", "secrets.key"):
        mode = (c.data_dir / name).stat().st_mode & 0o777
        assert mode == 0o600, f"README.md: {name} in the data dir is {oct(mode)}, not 0600"
    assert (c.home / ".config/corral/config.json").is_file(), "`corral up` wrote no ~/.config/corral/config.json"
    ca = re.search(r"CA (sha256:[0-9a-f]{64})", up_log)
    for token_file in (c.data_dir / "join-token", s.work / "join-token"):
        token = parse_join_token(token_file.read_text())  # "it carries the CA's fingerprint"
        assert ca and token.ca_fingerprint == ca[1], f"README.md:{line_of('> join-token')}: {token_file}"

    # The CLI: "A job's JSON has at least `id, name, ...`" (of the first job the walkthrough made)
    m = re.search(r"A job's JSON has at least `([^`]+)`", text.replace("\n", " "))
    assert m, "README.md: the sentence listing a job's JSON fields is gone"
    job = json.loads(
        subprocess.run(
            ["corral", "show", str(s.job_ids[0]), "--json"], env=s.envs["admin"], capture_output=True, text=True
        ).stdout
    )
    missing = [f for f in re.split(r",\s*", m[1]) if f not in job]
    assert not missing, f"README.md:{line_of('has at least')}: a job's JSON lacks {missing}"

    # The CLI: "Every mistake (an unknown flag, more GPUs than any node has, a malformed `--env` pair, an unknown
    # job, an unreachable server, a bad token) ends in one `error: ...` line and a non-zero exit; nothing is
    # half-created", and the refusal of an impossible job reads as the README quotes it
    quoted = re.search(r"`(--gpus: 9 GPUs requested but the largest node has 8)`\)", text.replace("\n", " "))
    assert quoted, "README.md: the quoted refusal of `--gpus 9` is gone"
    admin_env = s.envs["admin"]
    mistakes = {
        "corral jobs --no-such-flag": admin_env,
        "corral submit --gpus 9 -- true": admin_env,
        "corral submit --env NOEQUALS -- true": admin_env,
        "corral show 999999": admin_env,
        "corral jobs": dict(admin_env, CORRAL_URL=f"http://127.0.0.1:{free_port()}"),
        "corral whoami": dict(admin_env, CORRAL_TOKEN="not-a-token"),
    }
    for mistake, env in mistakes.items():
        r = subprocess.run(["bash", "-c", mistake], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and re.fullmatch(r"error: [^\n]+\n", r.stderr), (
            f"README.md:{line_of('Every mistake')}: `{mistake}` exited {r.returncode}, stderr {r.stderr!r}"
        )
        if "--gpus 9" in mistake:
            assert r.stderr == f"error: {quoted[1]}\n", f"README.md:{line_of(quoted[1][:20])}: {r.stderr!r}"
    assert len(c.api_jobs()) == len(s.job_ids), "a refused submission left a job behind"

    # Commands the prose names, run by the admin with its placeholders filled from this cluster: giving the
    # admin a password (Quick start); listing and revoking join tokens, cutting a node off (More machines)
    def prose(span: str, **placeholders: str) -> subprocess.CompletedProcess[str]:
        said = re.search("`" + r"\s+".join(map(re.escape, span.split())) + "`", text)  # (prose wraps lines)
        assert said, f"README.md no longer says `{span}`"
        line, command = text.count("\n", 0, said.start()) + 1, span
        for name, value in placeholders.items():
            command = re.sub(rf"\b{name}\b", value, command)
        return s.run(Command(line, command), as_admin=True)

    prose("CORRAL_PASSWORD=... corral users set admin --password")
    assert prose("corral tokens join list").returncode == 0
    tokens = c.cli_json("tokens", "join", "list")
    used = [t for t in tokens if t["max_uses"] == 10 and t["uses"] == 1 and t["created_by"] == "admin"]
    assert used, f"the README's join token (10 uses, one by its agent) is not listed: {tokens}"
    prose("corral tokens join revoke ID", ID=str(used[0]["id"]))
    joined = [n["name"] for n in c.cli_json("nodes") if n["name"] != "node-a"]
    prose("corral nodes revoke NODE", NODE=joined[0])
    wait_for(lambda: {n["name"]: n["state"] for n in c.cli_json("nodes")}[joined[0]] == "LOST", 30, "LOST")

    # Health and monitoring: a metrics token from `corral tokens create --metrics` scrapes /metrics, in
    # dcgm-exporter's names; the dashboard file exists
    r = subprocess.run(["corral", "tokens", "create", "--metrics"], env=s.envs["admin"], capture_output=True, text=True)
    assert r.returncode == 0, f"README.md:{line_of('tokens create --metrics')}: {r.stderr}"
    scrape = httpx.get(f"{c.url}/metrics", headers={"Authorization": f"Bearer {r.stdout.strip()}"}, timeout=10)
    assert scrape.status_code == 200 and "DCGM_FI_DEV_" in scrape.text, (
        f"README.md:{line_of('`/metrics` speaks')}: /metrics with a metrics token: {scrape.status_code}"
    )
    assert (README.parent / "deploy/grafana/corral-gpus.json").is_file()

    # The API: the endpoints it names, without auth where it says so, errors in the stated shape, pages
    admin = {"Authorization": f"Bearer {(c.data_dir / 'admin-token').read_text().strip()}"}
    for path in ("/healthz", "/openapi.json", "/docs", "/"):
        assert httpx.get(f"{c.url}{path}", timeout=10).status_code == 200, (
            f"README.md:{line_of('/openapi.json')}: {path}"
        )
    spec = httpx.get(f"{c.url}/openapi.json", timeout=10).json()
    for method, path in re.findall(r"\b(GET|POST|PUT|DELETE|PATCH) (/api/v1/[\w/{}]*)", text):
        assert method.lower() in spec["paths"].get(path, {}), (
            f"README.md:{line_of(f'{method} {path}')}: no {method} {path}"
        )
    wrong = httpx.get(f"{c.url}/api/v1/jobs/999999", headers=admin, timeout=10)
    assert 400 <= wrong.status_code < 500 and {"code", "message"} <= set(wrong.json()["error"]), (
        f"README.md:{line_of('Errors are')}: {wrong.status_code} {wrong.text}"
    )
    pages = text[text.index("**Pages.**") :].split("\n\n")[0]
    documented = {p["name"] for p in spec["paths"]["/api/v1/jobs"]["get"].get("parameters", [])}
    named = {n for n in re.findall(r"`([a-z_]+)(?:=[^`]*)?`", pages)}
    assert named and named <= documented, (
        f"README.md:{line_of('**Pages.**')}: {sorted(named - documented)} not parameters"
    )
    page = httpx.get(f"{c.url}/api/v1/jobs", params={"all": "true", "limit": 1}, headers=admin, timeout=10)
    assert page.status_code == 200 and len(page.json()) == 1, page.text
    assert int(page.headers["X-Total-Count"]) == len(s.job_ids) and 'rel="next"' in page.headers.get("Link", ""), (
        f"README.md:{line_of('**Pages.**')}: {dict(page.headers)}"
    )


# ---- the convention itself (no cluster) ---------------------------------------------------------------------


def test_the_readme_markers_parse_and_every_skip_says_why() -> None:
    blocks = load(README)
    assert blocks, "README.md has no ```sh or ```console block"
    for block in blocks:
        assert block.commands, f"README.md:{block.line}: a ```{block.lang} block with no command"
        for why in [block.skipped] + [cmd.skipped for cmd in block.commands]:
            assert why is None or why.strip(), f"README.md:{block.line}: a skip without a reason"


def test_blocks_markers_and_continuations() -> None:
    text = "\n".join(
        [
            "intro",  # 1
            "```sh",  # 2
            "# a comment line",  # 3
            "corral nodes   # the nodes",  # 4
            "",  # 5
            "corral submit --gpus 1 \\",  # 6
            "  -- true",  # 7
            "```",  # 8
            "<!-- readme-test: skip (needs a second machine (over the network)) -->",  # 9
            "```sh",  # 10
            "make up",  # 11
            "```",  # 12
            '<!-- readme-test: skip "corral up" (already up) -->',  # 13
            "```console",  # 14
            "$ corral up --host 0.0.0.0",  # 15
            "$ corral jobs",  # 16
            "ID  NAME",  # 17
            "1   train",  # 18
            "```",  # 19
            "```",  # 20: not a command block
            "src/",  # 21
            "```",  # 22
        ]
    )
    blocks: list[Block] = parse_readme(text)
    assert [(b.line, b.lang, b.skipped) for b in blocks] == [
        (2, "sh", None),
        (10, "sh", "needs a second machine (over the network)"),
        (14, "console", None),
    ]
    assert [(c.line, c.text) for c in blocks[0].commands] == [
        (4, "corral nodes   # the nodes"),
        (6, "corral submit --gpus 1 -- true"),
    ]
    up, jobs = blocks[2].commands
    assert (up.line, up.skipped, up.output) == (15, "already up", [])
    assert (jobs.line, jobs.skipped, jobs.output) == (16, None, ["ID  NAME", "1   train"])


@pytest.mark.parametrize(
    "text",
    [
        "<!-- readme-test: skip -->\n```sh\nmake up\n```",  # no reason
        "<!-- readme-test: skipp (typo) -->\n```sh\nmake up\n```",
        "<!-- readme-test: skip (why) -->\n\nprose\n```sh\nmake up\n```",  # not right before the fence
        '<!-- readme-test: skip "corral up" (why) -->\n```sh\nmake up\n```',  # the prefix matches nothing
        "<!-- readme-test: skip (why) -->\n```\nsrc/\n```",  # not a command block
    ],
)
def test_a_marker_the_test_cannot_honour_is_an_error(text: str) -> None:
    with pytest.raises(ReadmeFormatError):
        parse_readme(text)


def test_shown_output_is_compared_loosely() -> None:
    shown = ["ID  NAME   STATE    CREATED", "...", "12  train  RUNNING  2026-11-26T03:44:52Z"]
    printed = "ID   NAME    STATE      CREATED\n7    prep    SUCCEEDED  2026-11-25T01:02:03Z\n3 train RUNNING 2026-01-01T00:00:00Z\n"
    assert output_matches(shown, printed)  # ids, times and spacing differ; `...` spans a line
    assert not output_matches(shown, printed.replace("RUNNING", "PENDING"))
    assert not output_matches(["1 train"], "1 train\n2 eval\n")  # an unexpected line is a difference


# ---- commands named in the prose and the CLI table (no cluster) -----------------------------------------------


@functools.cache
def corral_help(path: tuple[str, ...]) -> str:
    """`corral PATH --help`, in this process (the light commands' argparse help and the typer app's alike)."""
    from corral.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([*path, "--help"])
        except SystemExit:
            pass
    return out.getvalue()


def test_every_command_the_readme_names_exists_with_its_flags() -> None:
    spans = inline_commands(README.read_text())
    assert len(spans) > 30, spans  # the CLI table alone names more
    problems = [f"README.md:{line}: {p}" for line, span in spans for p in check_command_span(span, corral_help)]
    assert not problems, "\n".join(problems)


def test_a_command_or_flag_the_cli_lacks_is_found() -> None:
    assert check_command_span("corral nodes [cordon\\|uncordon NODE] [--json]", corral_help) == []
    assert check_command_span("corral tenants|users|tokens ...", corral_help) == []
    assert check_command_span("corral nodes evict NODE", corral_help) == ["`corral nodes evict`: no such command"]
    assert check_command_span("corral wait 1 --deadline 5", corral_help) == ["`corral wait` has no flag --deadline"]


def test_the_files_links_and_make_targets_the_readme_names_exist() -> None:
    """Skipped blocks too: `make test` and the benchmarks are not run here, but what they name must exist."""
    text = README.read_text()
    root = README.parent

    def line(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    problems = []
    for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):  # relative links
        if "://" not in m[1] and not (root / m[1]).exists():
            problems.append(f"README.md:{line(m.start())}: link to {m[1]}, which does not exist")
    for m in re.finditer(r"(?<![\w/.<>-])((?:bench|deploy|docs|tests|src)/[\w./-]*\w\.\w+)", text):  # repo files
        if not (root / m[1]).exists():
            problems.append(f"README.md:{line(m.start())}: {m[1]} does not exist")
    targets = set(re.findall(r"^([\w.-]+):", (root / "Makefile").read_text(), re.MULTILINE))
    for m in re.finditer(r"(?:`|^)make ([a-z][\w-]*)", text, re.MULTILINE):
        if m[1] not in targets:
            problems.append(f"README.md:{line(m.start())}: `make {m[1]}`: no such target in the Makefile")
    assert not problems, "\n".join(problems)
