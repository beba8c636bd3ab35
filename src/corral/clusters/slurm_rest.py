"""A Slurm cluster as a pool, through slurmrestd (Slurm's REST API, v0.0.38 as Slurm 22.05 serves it) instead of the
command-line tools: for a server that has no Slurm client, munge key or slurm.conf of the cluster.

It behaves as the CLI backend (corral.clusters.slurm) does: the same batch script (`build_script`), the same
reading of job states (`map_state`), the same output file in `log_dir` (made by the server before Slurm writes it,
0600, owned by the account the job runs as), the same idempotent submit by name (a job of that name made since the
attempt was placed is that attempt's), and ClusterError(transient=True) when the cluster is out of reach.

Every call carries `X-SLURM-USER-NAME: <user_name>` and `X-SLURM-USER-TOKEN: <the JWT in token_file>`. The token
file is read at each call, so a token rotated there (`scontrol token username=<user_name> lifespan=N`) is used at
once; the token is never logged nor put in an error. slurmrestd submits every job as the token's user, so jobs run
as `user_name` (`submit_as=service`): `submit_as=job-user` needs the CLI backend, with the server as root. A job
named like Corral's but of another user of the cluster is not Corral's: it is neither listed nor taken for a
submitted one. HTTPS is checked against certifi's CAs, or SSL_CERT_FILE's where the server's environment sets it.

Slurm 22.05's slurmrestd answers any failed listing with "Unspecified error" (-1), whether slurmctld is down or
refused the token. When that happens the backend asks once more in a way that tells them apart: it cancels a job id
that no cluster can have (above Slurm's highest MaxJobId), to which slurmctld answers "Invalid job id" (it is up and
took the token), slurmrestd "Unable to contact slurm controller" (down: transient), or the controller hangs up on a
token it does not take ("Zero Bytes were transmitted": refused, not transient).
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from corral.clusters.base import (
    ClusterBackend,
    ClusterError,
    ClusterJob,
    ClusterNode,
    Submission,
)
from corral.clusters.slurm import SlurmCliBackend
from corral.clusters.slurm_common import (
    CALL_TIMEOUT_S,
    CLOCK_SLACK_S,
    SlurmJobBook,
    _int,
    build_script,
    check_settings,
    compute_time_limit,
    feature_for,
    gres_type_for,
    make_output_file,
    read_nodes,
)
from corral.core.errors import ValidationError

API = "/slurm/v0.0.38"
REST_SETTINGS = (
    "rest_url",
    "token_file",
    "user_name",
    "log_dir",
    "partitions",
    "gpu_model",
    "submit_as",
    "account",
    "qos",
)
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"  # the job's PATH until its script sets its own (as with --export=NIL)
NO_SUCH_JOB = 0x3FFFFFF  # above the highest MaxJobId Slurm allows (0x03ff0000): a job id no cluster has
# Slurm's error numbers
_INVALID_JOB_ID = 2017  # ESLURM_INVALID_JOB_ID
_ALREADY_DONE = 2021  # ESLURM_ALREADY_DONE
_UNREACHABLE_ERRNO = {1001, 1002, 1003, 1800, 1801, 1802, 1803, 1804, 5004}  # connection to slurmctld failed
_UNREACHABLE_TEXT = ("Unable to contact slurm controller", "Socket timed out", "Connection refused")
# SLURM_PROTOCOL_AUTHENTICATION_ERROR; "Zero Bytes were transmitted or received": slurmctld hung up on slurmrestd
# (reached, so not out of reach), which it does to a token it does not take
_AUTH_ERRNO = {1007, 5005}


def check_rest_settings(settings: Mapping[str, str]) -> None:
    """What only a slurmrestd pool has (corral.clusters.slurm.check_settings checks the settings it shares with a CLI
    pool: log_dir, partitions, account, qos, gpu_model). ValidationError naming `settings.<key>`."""
    if settings.get("slurm_conf") or settings.get("bin_dir"):
        raise ValidationError(
            "settings.rest_url", "give either rest_url (slurmrestd) or slurm_conf and bin_dir (the CLI tools), not both"
        )
    if "service_user" in settings:
        raise ValidationError(
            "settings.service_user", "with rest_url every job runs as user_name, the token's user: leave it out"
        )
    for key in settings:
        if key not in REST_SETTINGS:
            raise ValidationError(
                f"settings.{key}", f"not a setting of a slurm pool with rest_url: one of {', '.join(REST_SETTINGS)}"
            )
    url = settings["rest_url"]
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if (
        not port_ok
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.query
        or parts.fragment
        or any(c.isspace() for c in url)
    ):
        raise ValidationError("settings.rest_url", "slurmrestd's URL: http(s)://host:port (no user, query or fragment)")
    token_file = settings.get("token_file", "")
    if not token_file or not os.path.isabs(token_file):
        raise ValidationError(
            "settings.token_file", "give the absolute path of a file holding a JWT for user_name (read at each call)"
        )
    user = settings.get("user_name", "")
    if not _USER.fullmatch(user):
        raise ValidationError("settings.user_name", "give the Slurm user the token is for (jobs run as that user)")
    if settings.get("submit_as", "service") != "service":
        raise ValidationError(
            "settings.submit_as",
            "with rest_url every job runs as user_name (slurmrestd submits as the token's user): give service; "
            "job-user (each job as its owner's account) needs slurm_conf, the CLI tools, with the server as root",
        )


def slurm_backend(settings: Mapping[str, str]) -> ClusterBackend:
    """A slurm pool's backend: slurmrestd where `rest_url` is set, else the CLI tools."""
    if settings.get("rest_url"):
        return SlurmRestBackend(settings)
    return SlurmCliBackend(settings)


class SlurmRestBackend(SlurmJobBook):
    """A slurm pool through slurmrestd (see the module's docstring)."""

    kind = "slurm"

    def __init__(self, settings: Mapping[str, str]) -> None:
        if not settings.get("rest_url"):
            raise ValidationError("settings.rest_url", "give slurmrestd's URL (http(s)://host:port)")
        s = check_settings(settings)
        self.url = s["rest_url"].rstrip("/")
        self.token_file = s["token_file"]
        self.user_name = s["user_name"]
        super().__init__(Path(s["log_dir"]))
        self.partitions = [p.strip() for p in s.get("partitions", "").split(",") if p.strip()]
        self.gpu_model = s.get("gpu_model", "")
        self.submit_as = "service"
        self.account = s.get("account", "")
        self.qos = s.get("qos", "")
        self._uid: int | None = None  # user_name's uid on the cluster, as its jobs show it
        self._http = httpx.Client(
            base_url=self.url + API, timeout=CALL_TIMEOUT_S, headers={"Accept": "application/json"}
        )

    # ---- calls ----
    def _token(self) -> str:
        """The JWT in token_file (read now: a rotated token is used at once), checked for what can be seen without
        its key (that it is a JWT, for user_name, not expired)."""
        try:
            text = Path(self.token_file).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise ClusterError(f"cannot read token_file {self.token_file}: {e.strerror}") from e
        token = text.strip()
        if token.startswith("SLURM_JWT="):  # as `scontrol token` prints it
            token = token[len("SLURM_JWT=") :]
        how = f"(scontrol token username={self.user_name} lifespan=SECONDS prints one)"
        parts = token.split(".")
        if len(parts) != 3 or not all(re.fullmatch(r"[A-Za-z0-9_-]+", p) for p in parts[:2]):
            raise ClusterError(f"token_file {self.token_file} holds no JWT {how}")
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except ValueError as e:
            raise ClusterError(f"token_file {self.token_file} holds no JWT {how}") from e
        if isinstance(claims, dict):
            exp = claims.get("exp")
            if isinstance(exp, int | float) and not isinstance(exp, bool) and exp < time.time():
                when = datetime.fromtimestamp(exp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                raise ClusterError(
                    f"the token in token_file {self.token_file} expired at {when}: put a new one there {how}"
                )
            sun = claims.get("sun")
            if isinstance(sun, str) and sun != self.user_name:
                raise ClusterError(
                    f"the token in token_file {self.token_file} is for Slurm user {sun!r}, not user_name {self.user_name!r}"
                )
        return token

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        """(HTTP status, the answer) of one call; ClusterError when slurmrestd could not be asked or gave no JSON."""
        headers = {"X-SLURM-USER-NAME": self.user_name, "X-SLURM-USER-TOKEN": self._token()}
        try:
            r = self._http.request(method, path, json=body, headers=headers)
        except httpx.TimeoutException as e:
            raise ClusterError(f"slurmrestd at {self.url} did not answer within {CALL_TIMEOUT_S:g} s", True) from e
        except httpx.TransportError as e:
            raise ClusterError(f"slurmrestd at {self.url} is out of reach: {e}", True) from e
        except httpx.HTTPError as e:
            raise ClusterError(f"cannot call slurmrestd at {self.url}: {e}") from e
        if r.status_code in (401, 403):
            raise ClusterError(
                f"slurmrestd at {self.url} refused the login (HTTP {r.status_code}): check user_name and token_file"
            )
        try:
            data = r.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            transient = r.status_code >= 500 or r.status_code == 429  # a proxy in front of it, or it is restarting
            raise ClusterError(f"slurmrestd at {self.url} answered HTTP {r.status_code} with no JSON object", transient)
        return r.status_code, data

    @staticmethod
    def _errors(data: Mapping[str, Any]) -> list[tuple[int | None, str]]:
        """(Slurm's error number, its words) of each error in an answer."""
        out = []
        for e in data.get("errors") or []:
            if isinstance(e, dict):
                num = e.get("error_number", e.get("errno", e.get("error_code")))
                desc, err = str(e.get("description") or ""), str(e.get("error") or "")
                words = desc if err in desc else f"{desc} ({err})" if desc else err
                out.append((num if isinstance(num, int) and not isinstance(num, bool) else None, words or "error"))
        return out

    def _failure(self, what: str, data: Mapping[str, Any], status: int) -> ClusterError:
        """A ClusterError for a call that failed: out of reach (transient), the token refused, or refused."""
        errors = self._errors(data)
        nums = {n for n, _ in errors}
        words = "; ".join(w for _, w in errors) or f"HTTP {status}"
        if nums & _UNREACHABLE_ERRNO or any(t in words for t in _UNREACHABLE_TEXT):
            return ClusterError(f"{what}: slurmrestd cannot reach slurmctld ({words})", True)
        if nums & _AUTH_ERRNO or "authentication" in words.lower():
            return self._refused_token(what, words)
        if nums <= {-1, None} and status >= 500:  # 22.05's "Unspecified error": slurmctld down, or the token refused
            return self._diagnose(what, words)
        return ClusterError(f"{what}: {words}")

    def _refused_token(self, what: str, words: str) -> ClusterError:
        return ClusterError(
            f"{what}: slurmctld refused the token in token_file {self.token_file} for user {self.user_name} "
            f"(not one of this cluster's, or not for that user): {words}"
        )

    def _diagnose(self, what: str, words: str) -> ClusterError:
        """Why a call failed with no reason given: cancel a job id no cluster has (see the module's docstring)."""
        try:
            status, data = self._call("DELETE", f"/job/{NO_SUCH_JOB}")
        except ClusterError as e:
            return ClusterError(f"{what}: {words} ({e})", e.transient)
        nums = {n for n, _ in self._errors(data)}
        said = "; ".join(str(e.get("error")) for e in data.get("errors") or [] if isinstance(e, dict))
        if nums & _UNREACHABLE_ERRNO or any(t in said for t in _UNREACHABLE_TEXT):
            return ClusterError(f"{what}: slurmrestd cannot reach slurmctld ({said})", True)
        if nums & _AUTH_ERRNO:
            return self._refused_token(what, words)
        # slurmctld is up and took the token now ("Invalid job id"): it was out of reach a moment ago
        return ClusterError(f"{what}: {words} (slurmctld answers now: try again)", True)

    def _get(self, path: str, key: str) -> list[dict[str, Any]]:
        status, data = self._call("GET", path)
        if status >= 300 or self._errors(data):
            raise self._failure(f"GET {path}", data, status)
        items = data.get(key)
        if not isinstance(items, list):
            raise ClusterError(f"slurmrestd's GET {path} has no {key}")
        return [x for x in items if isinstance(x, dict)]

    # ---- inventory ----
    def list_nodes(self) -> list[ClusterNode]:
        return read_nodes(self._get("/nodes", "nodes"), self.partitions, self.gpu_model)

    def _jobs(self) -> list[dict[str, Any]]:
        return self._get("/jobs", "jobs")

    def _find(self, name: str, since_s: float) -> str | None:
        if self._known_absent(name):
            return None  # not in the list of a moment ago (the bridge lists before it submits): no need to ask
        for job in self._jobs():
            submitted = _int(job.get("submit_time")) or 0
            if job.get("name") == name and submitted >= since_s - CLOCK_SLACK_S and self._mine(job):
                return str(job["job_id"])
        return None

    def _mine(self, job: Mapping[str, Any]) -> bool:
        """Whether a job runs as user_name (every job this backend submits does): a cluster user may name a job of
        their own corral-<job>-<attempt>, which is neither followed nor stopped."""
        owner = job.get("user_name")
        if not isinstance(owner, str):  # not said: its uid is compared with runs_as() by the caller
            return True
        if owner == self.user_name and _int(job.get("user_id")) is not None:
            self._uid = _int(job.get("user_id"))
        return owner == self.user_name

    def runs_as(self, uid: int | None) -> int | None:
        """Every job runs as user_name, whoever its Corral user: its uid as the cluster shows it on its jobs (or
        this machine's account of that name), None while neither is known."""
        if self._uid is None:
            account = self._job_account()
            return account[0] if account is not None else None
        return self._uid

    def _job_account(self) -> tuple[int, int] | None:
        """(uid, gid) of user_name here, the account every job runs as; None where this machine does not know it."""
        try:
            pw = pwd.getpwnam(self.user_name)
        except KeyError:
            return None
        return pw.pw_uid, pw.pw_gid

    def _prepare_log(self, name: str) -> Path:
        """The output file, made by the server before Slurm writes it: new (never a file left under that name),
        0600, owned by user_name (the account every job runs as), so no other user of the cluster reads it. log_dir
        must be a real directory (not a link) of the server's that no one else can write; all is opened from it."""
        account = self._job_account()
        if os.geteuid() == 0 and account is None:
            raise ClusterError(
                f"user_name {self.user_name} is no account on the server: it cannot make the job's output file its own"
            )
        if os.geteuid() != 0 and account is not None and account[0] != os.geteuid():
            raise ClusterError(
                f"jobs run as {self.user_name} (the token's user) but the server does not, and is not root: the job "
                f"could not write its output file; run the server as {self.user_name} or as root"
            )
        return make_output_file(self.log_dir, name, account)

    def submit(self, sub: Submission) -> str:
        name = sub.name
        found = self._find(name, sub.since_s)
        if found is not None:  # submitted before (the server died before it wrote that down): the same job
            self._names[found] = name
            return found
        log_path = self._prepare_log(name)
        job: dict[str, Any] = {
            "name": name,
            "standard_output": str(log_path),
            "open_mode": "append",
            "environment": {"PATH": JOB_PATH},  # nothing of the server's: the script exports the job's own
            "nodes": sub.nodes,
            "tasks_per_node": 1,
            "comment": f"corral job {sub.job_id}",  # no tenant name: every user of the cluster reads comments
            "current_working_directory": sub.workdir or "/tmp",
        }
        if sub.gpus:
            nodes = self.list_nodes() if sub.gpu_model else []
            gtype = gres_type_for(nodes, sub.gpu_model, self.gpu_model)
            job["gres"] = f"gpu:{gtype}:{sub.gpus}" if gtype else f"gpu:{sub.gpus}"
            feature = "" if gtype else feature_for(nodes, sub.gpu_model)
            if feature:  # the model as a node feature where the GRES has no type
                job["constraints"] = feature
        if sub.cpus:
            job["cpus_per_task"] = sub.cpus
        if sub.memory_mib:
            job["memory_per_node"] = sub.memory_mib
        if sub.time_limit_s:
            job["time_limit"] = int(compute_time_limit(sub.time_limit_s))
        if self.partitions:
            job["partition"] = ",".join(self.partitions)
        if self.account:
            job["account"] = self.account
        if self.qos:
            job["qos"] = self.qos
        status, data = self._call("POST", "/job/submit", {"script": build_script(sub, str(log_path)), "job": job})
        job_id = data.get("job_id")
        if status >= 300 or self._errors(data) or not isinstance(job_id, int) or isinstance(job_id, bool):
            if status < 300 and not self._errors(data):
                raise ClusterError(f"slurmrestd gave no job id for {name}")
            raise self._failure("slurmrestd refused the job", data, status)
        ext = str(job_id)
        self._names[ext] = name
        return ext

    def list_jobs(self) -> list[ClusterJob]:
        listed_at = time.monotonic()
        return self._read_jobs(self._jobs(), listed_at, self._mine)

    def cancel(self, external_id: str) -> None:
        if not external_id.isdigit():
            raise ClusterError(f"{external_id!r} is not a Slurm job id")
        status, data = self._call("DELETE", f"/job/{external_id}")
        errors = self._errors(data)
        if status < 300 and not errors:
            return
        words = " ".join(w for _, w in errors)
        nums = {n for n, _ in errors}
        if nums & {_INVALID_JOB_ID, _ALREADY_DONE} or "Invalid job id" in words or "already completing" in words:
            return  # ended or gone
        raise self._failure(f"cancel {external_id}", data, status)

    def close(self) -> None:
        self._http.close()


__all__ = ["REST_SETTINGS", "SlurmRestBackend", "check_rest_settings", "slurm_backend"]
