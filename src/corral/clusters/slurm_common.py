"""A slurm pool's shared half, for the CLI backend (slurm.py) and the slurmrestd one (slurm_rest.py): its settings,
Slurm's node and job records read into Corral's, the batch script, and the job's output file in log_dir."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from corral.clusters.base import (
    CANCELLED,
    FAILED,
    QUEUED,
    STARTED,
    SUCCEEDED,
    ClusterError,
    ClusterJob,
    ClusterNode,
    Submission,
    parse_job_name,
)
from corral.core.errors import ValidationError

SETTINGS = (
    "slurm_conf", "log_dir", "partitions", "gpu_model", "submit_as", "service_user", "account", "qos", "bin_dir",
    "rest_url",
)  # fmt: skip
SUBMIT_AS = ("job-user", "service")
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_GRES = re.compile(r"^gpu(?::(?P<type>[A-Za-z0-9_.-]+))?:(?P<count>\d+)")
_FEATURE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # a feature name we pass to --constraint (never an expression)
_IDX = re.compile(r"IDX:([0-9,\-]+)")
CALL_TIMEOUT_S = 30.0
LISTED_FRESH_S = 10.0  # a name missing from a list this recent was never submitted (one leader submits)
CLOCK_SLACK_S = 5.0  # the server's and the controller's clocks may differ this much
# What the tools print when the controller is out of reach (try again), as against a refusal of the job
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "Zero Bytes were")
# Slurm job states -> Corral's (squeue's names; anything else unknown is read as still queued)
_STARTED = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}
_SUCCEEDED = {"COMPLETED"}
_CANCELLED = {"CANCELLED"}
_FAILED = {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED"}


def check_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """A slurm pool's settings, checked (ValidationError naming `settings.<key>`); returns them."""
    rest = bool(settings.get("rest_url"))
    if rest:  # slurmrestd (corral.clusters.slurm_rest): its own settings instead of slurm_conf and bin_dir
        from corral.clusters.slurm_rest import check_rest_settings

        check_rest_settings(settings)
    for key in settings:
        if key in ("token_file", "user_name") and not rest:
            raise ValidationError(f"settings.{key}", "a setting of slurmrestd pools only: give rest_url with it")
        if key not in SETTINGS and not rest:
            raise ValidationError(f"settings.{key}", f"not a slurm pool setting: one of {', '.join(SETTINGS)}")
    conf = settings.get("slurm_conf", "")
    if not rest and (not conf or not os.path.isabs(conf)):
        raise ValidationError("settings.slurm_conf", "give the absolute path of the cluster's slurm.conf")
    log_dir = settings.get("log_dir", "")
    if not log_dir or not os.path.isabs(log_dir) or ".." in Path(log_dir).parts:
        raise ValidationError(
            "settings.log_dir", "give an absolute directory that the server and the Slurm nodes share (job output)"
        )
    for p in filter(None, settings.get("partitions", "").split(",")):
        if not _PARTITION.fullmatch(p.strip()):
            raise ValidationError("settings.partitions", f"{p!r} is not a partition name")
    if settings.get("submit_as", "job-user") not in SUBMIT_AS:
        raise ValidationError("settings.submit_as", f"one of {', '.join(SUBMIT_AS)}")
    if settings.get("submit_as") == "service" and not rest:  # with rest_url, jobs run as user_name
        service_account(settings)
    for key in ("account", "qos"):
        if settings.get(key) and not _ACCOUNT.fullmatch(settings[key]):
            raise ValidationError(f"settings.{key}", f"{settings[key]!r}: letters, digits, '_', '.', '-'")
    bin_dir = settings.get("bin_dir", "")
    if bin_dir and not os.path.isabs(bin_dir):
        raise ValidationError("settings.bin_dir", "an absolute directory holding sbatch, squeue, sinfo, scancel")
    model = settings.get("gpu_model", "")
    if model and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}", model):
        raise ValidationError("settings.gpu_model", f"{model!r} is not a GPU model such as A100-80GB")
    return dict(settings)


def service_account(settings: Mapping[str, str]) -> tuple[int, int] | None:
    """(uid, gid) every job of a `submit_as=service` pool runs as: `service_user`'s; None: the server's own account
    (sbatch without --uid). A server that runs as root must name one: its jobs would run as root."""
    name = settings.get("service_user", "")
    if not name:
        if os.geteuid() == 0:
            raise ValidationError(
                "settings.service_user",
                "the server runs as root: name the account every job of this pool runs as (never root)",
            )
        return None
    try:
        pw = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError) as e:
        raise ValidationError("settings.service_user", f"no account {name!r} on the server") from e
    if pw.pw_uid == 0:
        raise ValidationError("settings.service_user", "never root: jobs run as this account")
    return pw.pw_uid, pw.pw_gid


def parse_gres(gres: str) -> tuple[int, str]:
    """(GPU count, GRES type) of a node's GRES string: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a100:2,gpu:v100:2`."""
    count, types = 0, []
    for item in filter(None, (x.strip() for x in gres.split(","))):
        m = _GRES.match(item)
        if m:
            count += int(m["count"])
            if m["type"]:
                types.append(m["type"])
    return count, (types[0] if len(set(types)) == 1 else "")


def parse_indices(text: str) -> tuple[int, ...]:
    """`0-1,3` -> (0, 1, 3)."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        if a.isdigit() and (not b or b.isdigit()):
            out.extend(range(int(a), int(b or a) + 1))
    return tuple(out)


def _node_state(state: str, flags: list[str]) -> str:
    words = {state.upper(), *(f.upper() for f in flags)}
    if words & {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "UNKNOWN", "FUTURE", "POWERED_DOWN", "INVALID"}:
        return "down"
    if words & {"DRAIN", "DRAINING", "DRAINED", "MAINTENANCE", "RESERVED", "REBOOT_REQUESTED"}:
        return "drain"
    return "up"


def compute_time_limit(seconds: int) -> str:
    """Slurm's `--time` (minutes, rounded up: Slurm counts in minutes)."""
    return str(max(1, -(-seconds // 60)))


def build_script(sub: Submission, log_path: str) -> str:
    """The batch script: the job's environment (and Corral's variables), its workdir, its command; one task per
    node (srun) for a multi-node job. Everything a user gave is quoted."""
    env = dict(sub.env)
    env.update(CORRAL_JOB_ID=str(sub.job_id), CORRAL_ATTEMPT=str(sub.attempt), CORRAL_LOG=log_path)
    lines = ["#!/bin/bash", f"# corral job {sub.job_id}, attempt {sub.attempt}"]
    lines.append('export PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"')
    lines.extend(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items()) if re.fullmatch(r"[A-Za-z_]\w*", k))
    if sub.workdir:
        lines.append(f"cd {shlex.quote(sub.workdir)} || exit 1")
    command = " ".join(shlex.quote(c) for c in sub.command)
    if sub.nodes > 1:
        lines += [
            'export CORRAL_NUM_NODES="$SLURM_NNODES"',
            'export CORRAL_NODES="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)"',
            'export CORRAL_MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"',
            f"export CORRAL_MASTER_PORT={29500 + sub.job_id % 20000}",
            'exec srun --export=ALL --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 '
            + (f"--gres=gpu:{sub.gpus} " if sub.gpus else "")
            + "bash -c 'export CORRAL_NODE_RANK=$SLURM_NODEID; exec \"$@\"' corral "
            + command,
        ]
    else:
        lines += ["export CORRAL_NODE_RANK=0", f"exec {command}"]
    return "\n".join(lines) + "\n"


def map_state(state: str, exit_code: int | None) -> tuple[str, int | None]:
    """(Corral's cluster state, exit code) of a Slurm job state and its wait status (squeue's `exit_code`)."""
    s = state.upper()
    code = None
    if exit_code is not None:
        sig = exit_code & 0x7F
        code = 128 + sig if sig else exit_code >> 8
    if s in _SUCCEEDED:
        return SUCCEEDED, code if code is not None else 0
    if s in _CANCELLED:
        return CANCELLED, code
    if s in _FAILED:
        return FAILED, code if code else (137 if s == "OUT_OF_MEMORY" else 1)
    if s in _STARTED:
        return STARTED, None
    return QUEUED, None


def read_nodes(records: list[dict[str, Any]], partitions: list[str], gpu_model: str) -> list[ClusterNode]:
    """The pool's nodes from Slurm's node records (`sinfo --json`, slurmrestd's /nodes: the same v0.0.38 shape),
    those of `partitions` only when given. `gpu_model`: the model of nodes whose GRES has no type."""
    nodes = []
    for n in records:
        parts = [str(p) for p in n.get("partitions") or []]
        if partitions and not set(parts) & set(partitions):
            continue
        count, gres_type = parse_gres(str(n.get("gres") or ""))
        features = [f for f in str(n.get("active_features") or n.get("features") or "").split(",") if f]
        nodes.append(
            ClusterNode(
                name=str(n["name"]),
                gpus=count,
                gpu_model=gres_type or gpu_model,
                cpus=int(n.get("cpus") or 0),
                memory_mib=int(n.get("real_memory") or 0),
                state=_node_state(str(n.get("state") or ""), list(n.get("state_flags") or [])),
                labels={
                    "slurm.partitions": ",".join(parts),
                    **({"slurm.features": ",".join(features)} if features else {}),
                },
            )
        )
    return nodes


def read_job(j: Mapping[str, Any]) -> ClusterJob | None:
    """One of Slurm's job records (`squeue --json`, slurmrestd's /jobs) as a ClusterJob; None for a job whose name
    Corral did not give."""
    ids = parse_job_name(str(j.get("name") or ""))
    if ids is None or j.get("job_id") is None:
        return None
    state, code = map_state(str(j.get("job_state") or ""), _int(j.get("exit_code")))
    detail = str(j.get("job_state") or "")
    reason = str(j.get("state_reason") or "")
    if reason and reason != "None":
        detail += f" ({reason})"
    return ClusterJob(
        external_id=str(j["job_id"]),
        job_id=ids[0],
        attempt=ids[1],
        state=state,
        exit_code=code,
        detail=detail,
        placement=_placement(j) if state != QUEUED else {},
        submitted_s=float(_int(j.get("submit_time")) or 0) or None,
        uid=_int(j.get("user_id")),
    )


def gres_type_for(nodes: list[ClusterNode], model: str, fallback: str) -> str:
    """The GRES type to ask for a GPU model: the type the nodes report that names it (case-blind), else ""
    (any GPU: the pool's nodes are of one model). `fallback`: the pool's gpu_model (no GRES type of its own)."""
    if not model:
        return ""
    want = model.lower()
    for n in nodes:
        t = n.gpu_model.lower()
        if t and (t == want or want.startswith(t + "-") or t.startswith(want)) and n.gpu_model != fallback:
            return n.gpu_model
    return ""


def feature_for(nodes: list[ClusterNode], model: str) -> str:
    """The node feature that names a GPU model (`a100` for A100-80GB), where the nodes say their model by feature
    instead of a GRES type: the job asks for it with --constraint. "" when none does."""
    if not model:
        return ""
    want = model.lower()
    for n in nodes:
        for f in filter(None, n.labels.get("slurm.features", "").split(",")):
            t = f.lower()
            if _FEATURE.fullmatch(f) and (t == want or want.startswith(t + "-") or (len(t) > 2 and t.startswith(want))):
                return f
    return ""


def make_output_file(log_dir: Path, name: str, account: tuple[int, int] | None) -> Path:
    """A job's output file, made by the server before Slurm writes it: new (never a file left under that name),
    0600, owned by the account the job runs as, so no other user of the cluster reads it. log_dir must be a real
    directory (not a link) of the server's that no one else can write; everything is opened from it."""
    if not os.path.lexists(log_dir):  # made here: 0755 whatever the server's umask
        log_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(log_dir, 0o755, follow_symlinks=False)
    try:
        dfd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise ClusterError(f"log_dir {log_dir}: {e.strerror} (a real directory, not a link)") from e
    filename = f"{name}.out"
    try:
        st = os.fstat(dfd)
        if st.st_mode & 0o022 or st.st_uid not in (0, os.geteuid()):
            # another user could make the next job's file first (and keep it open) or link it elsewhere
            raise ClusterError(f"log_dir {log_dir} must be the server's and writable by it only")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(filename, dir_fd=dfd)  # left by an earlier try, another installation or a reset store
        try:
            fd = os.open(filename, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        except OSError as e:
            raise ClusterError(f"cannot make the job's output file in {log_dir}: {e.strerror}") from e
        try:
            if account is not None and os.geteuid() == 0:
                os.fchown(fd, *account)
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
    return log_dir / filename


def read_output(path: Path, offset: int, limit: int) -> bytes:
    """A job's output from `offset` (b"" when there is none), never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return b""
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, limit)
    finally:
        os.close(fd)


class SlurmJobBook:
    """What both slurm backends keep of the jobs they see: each Slurm job id's name (its output file in log_dir), and
    the names in their last list, so that a submit need not ask again about a name that was not there a moment ago
    (one leader submits)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._names: dict[str, str] = {}  # Slurm job id -> its name (corral-<job>-<attempt>)
        self._listed: tuple[float, frozenset[str]] | None = None  # (when, names) of the last list_jobs

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.out"

    def _known_absent(self, name: str) -> bool:
        listed = self._listed
        return listed is not None and time.monotonic() - listed[0] < LISTED_FRESH_S and name not in listed[1]

    def _read_jobs(
        self, records: list[dict[str, Any]], listed_at: float, keep: Callable[[dict[str, Any]], bool]
    ) -> list[ClusterJob]:
        """Corral's jobs among Slurm's `records` (those `keep` accepts), noting the names that were listed."""
        self._listed = (listed_at, frozenset(str(j.get("name") or "") for j in records))
        out = []
        for j in records:
            cj = read_job(j)
            if cj is not None and keep(j):
                self._names[cj.external_id] = str(j["name"])
                out.append(cj)
        return out

    def read_log(self, external_id: str, offset: int, limit: int) -> bytes:
        name = self._names.get(external_id)
        return b"" if name is None else read_output(self.log_path(name), offset, limit)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, dict):  # newer squeue: {"set": true, "number": N}
        n = v.get("number")
        return n if isinstance(n, int) else None
    return None


def _placement(j: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """node -> the GPU indices Slurm gave the job there (`gres_detail`, one entry per node in node order)."""
    res = j.get("job_resources") or {}
    nodes = [str(n.get("nodename")) for n in res.get("allocated_nodes") or [] if isinstance(n, dict)]
    if not nodes and j.get("nodes"):
        nodes = [str(j["nodes"])] if "," not in str(j["nodes"]) and "[" not in str(j["nodes"]) else []
    details = [str(d) for d in j.get("gres_detail") or []]
    out: dict[str, tuple[int, ...]] = {}
    for i, node in enumerate(nodes):
        m = _IDX.search(details[i]) if i < len(details) else None
        out[node] = parse_indices(m[1]) if m else ()
    return out
