"""A Slurm cluster as a pool, through Slurm's own command-line tools (`sinfo --json`, `squeue --json`, `sbatch`,
`scancel`) with the cluster's `SLURM_CONF`.

Corral admits a job (quotas, fair share, budgets, priorities); `sbatch` hands it to Slurm, which places it on its
nodes and gives it its GPUs (`--gres=gpu[:TYPE]:N`, `CUDA_VISIBLE_DEVICES` as Slurm sets it). The batch script is
made here: the job's environment only (`--export=NIL`: nothing of the server's own environment reaches a job),
its workdir, and for a multi-node job one `srun` task per node with the rank in `CORRAL_NODE_RANK`. Its output goes
to `<log_dir>/corral-<job>-<attempt>.out`, a directory the server and the Slurm nodes share; the server reads it
from there as it grows. With `submit_as=job-user` (the default) each job runs as its owner's Unix account (the
account Corral maps the user to, which must exist on the Slurm nodes): the server submits with `--uid/--gid`, so
it must run as root (or SlurmUser); `submit_as=service` runs every job as the account the server runs as.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corral.clusters.base import (
    ClusterError,
    ClusterJob,
    ClusterNode,
    Submission,
    job_name,
)
from corral.clusters.slurm_common import (
    _UNREACHABLE,
    CALL_TIMEOUT_S,
    CLOCK_SLACK_S,
    SETTINGS,
    SlurmJobBook,
    _int,
    build_script,
    check_settings,
    compute_time_limit,
    feature_for,
    gres_type_for,
    make_output_file,
    map_state,
    parse_gres,
    read_nodes,
    service_account,
)


class SlurmCliBackend(SlurmJobBook):
    """A slurm pool through the CLI tools (see the module's docstring)."""

    kind = "slurm"

    def __init__(self, settings: Mapping[str, str]) -> None:
        s = check_settings(settings)
        super().__init__(Path(s["log_dir"]))
        self.conf = s["slurm_conf"]
        self.partitions = [p.strip() for p in s.get("partitions", "").split(",") if p.strip()]
        self.gpu_model = s.get("gpu_model", "")
        self.submit_as = s.get("submit_as", "job-user")
        self.service = service_account(s) if self.submit_as == "service" else None
        self.account = s.get("account", "")
        self.qos = s.get("qos", "")
        self.bin_dir = s.get("bin_dir", "")

    # ---- calls ----
    def _tool(self, name: str) -> str:
        return os.path.join(self.bin_dir, name) if self.bin_dir else name

    def _run(self, args: list[str], stdin: str | None = None) -> str:
        env = {"SLURM_CONF": self.conf, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        try:
            done = subprocess.run(
                [self._tool(args[0]), *args[1:]],
                input=stdin,
                capture_output=True,
                text=True,
                env=env,
                timeout=CALL_TIMEOUT_S,
                check=False,
            )
        except FileNotFoundError as e:
            raise ClusterError(f"{args[0]} not found (install Slurm's client tools, or set bin_dir)", True) from e
        except subprocess.TimeoutExpired as e:
            raise ClusterError(f"{args[0]} did not answer within {CALL_TIMEOUT_S:g} s", True) from e
        if done.returncode != 0:
            text = (done.stderr or done.stdout).strip()
            why = text.splitlines()
            transient = any(w in text for w in _UNREACHABLE)
            raise ClusterError(f"{args[0]} failed: {why[-1] if why else f'exit {done.returncode}'}", transient)
        return done.stdout

    def _json(self, args: list[str]) -> dict[str, Any]:
        out = self._run(args)
        try:
            data = json.loads(out)
        except ValueError as e:
            raise ClusterError(f"{args[0]} --json printed no JSON") from e
        if not isinstance(data, dict):
            raise ClusterError(f"{args[0]} --json printed no object")
        errors = [e for e in data.get("errors") or [] if isinstance(e, dict)]
        if errors:  # exit 0 and an empty list: the controller did not answer (never "no jobs")
            what = "; ".join(str(e.get("description") or e.get("error") or "error") for e in errors)[:300]
            raise ClusterError(f"{args[0]} --json: {what} (is slurmctld up?)", transient=True)
        return data

    # ---- inventory ----
    def list_nodes(self) -> list[ClusterNode]:
        return read_nodes(list(self._json(["sinfo", "--json"]).get("nodes", [])), self.partitions, self.gpu_model)

    def _find(self, name: str, since_s: float, uid: int | None) -> str | None:
        if self._known_absent(name):
            return None  # not in the list of a moment ago (the bridge lists before it submits): no need to ask
        for job in self._squeue(["--name", name]):
            submitted = _int(job.get("submit_time")) or 0
            owner = _int(job.get("user_id"))
            if job.get("name") == name and submitted >= since_s - CLOCK_SLACK_S and owner == uid:
                return str(job["job_id"])
        return None

    def _squeue(self, extra: list[str]) -> list[dict[str, Any]]:
        jobs = self._json(["squeue", "--json", "--states=all", *extra]).get("jobs", [])
        return [j for j in jobs if isinstance(j, dict)]

    def _account(self, sub: Submission) -> tuple[int, int] | None:
        """(uid, gid) the job runs as: its user's mapped account (job-user), the service account, or None (the
        server's own). ClusterError for a user with no mapped account: a UID from Corral's own range may be
        another person's account on the cluster."""
        if self.submit_as == "service":
            return self.service
        if sub.uid is None or not sub.uid_mapped:
            raise ClusterError(
                "its user has no Unix account mapping (corral users unix NAME --uid UID): a slurm pool runs each "
                "job as its user's own account on the cluster"
            )
        return sub.uid, sub.gid if sub.gid is not None else sub.uid

    def runs_as(self, uid: int | None) -> int | None:
        if self.submit_as == "service":
            return self.service[0] if self.service is not None else os.geteuid()
        return uid

    def _prepare_log(self, name: str, account: tuple[int, int] | None) -> Path:
        return make_output_file(self.log_dir, name, account)

    def submit(self, sub: Submission) -> str:
        name = sub.name
        account = self._account(sub)
        found = self._find(name, sub.since_s, account[0] if account is not None else os.geteuid())
        if found is not None:  # submitted before (the server died before it wrote that down): the same job
            self._names[found] = name
            return found
        log_path = self._prepare_log(name, account)
        args = [
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--output={log_path}",
            "--open-mode=append",
            "--export=NIL",  # only SLURM_* variables; unlike NONE, no --get-user-env (a login shell per job)
            f"--nodes={sub.nodes}",
            "--ntasks-per-node=1",
            f"--comment=corral job {sub.job_id}",  # no tenant name: every user of the cluster reads comments
        ]
        if sub.gpus:
            nodes = self.list_nodes() if sub.gpu_model else []
            gtype = gres_type_for(nodes, sub.gpu_model, self.gpu_model)
            args.append(f"--gres=gpu:{gtype}:{sub.gpus}" if gtype else f"--gres=gpu:{sub.gpus}")
            feature = "" if gtype else feature_for(nodes, sub.gpu_model)
            if feature:  # the model as a node feature where the GRES has no type
                args.append(f"--constraint={feature}")
        if sub.cpus:
            args.append(f"--cpus-per-task={sub.cpus}")
        if sub.memory_mib:
            args.append(f"--mem={sub.memory_mib}M")
        if sub.time_limit_s:
            args.append(f"--time={compute_time_limit(sub.time_limit_s)}")
        if self.partitions:
            args.append(f"--partition={','.join(self.partitions)}")
        if self.account:
            args.append(f"--account={self.account}")
        if self.qos:
            args.append(f"--qos={self.qos}")
        if account is not None:
            args += [f"--uid={account[0]}", f"--gid={account[1]}"]
        args.append(f"--chdir={sub.workdir or '/tmp'}")
        out = self._run(args, stdin=build_script(sub, str(log_path))).strip()
        job_id = out.split(";")[0]
        if not job_id.isdigit():
            raise ClusterError(f"sbatch printed no job id: {out[:200]!r}")
        self._names[job_id] = name
        return job_id

    def list_jobs(self) -> list[ClusterJob]:
        listed_at = time.monotonic()
        return self._read_jobs(self._squeue([]), listed_at, lambda _j: True)

    def cancel(self, external_id: str) -> None:
        if not external_id.isdigit():
            raise ClusterError(f"{external_id!r} is not a Slurm job id")
        try:
            self._run(["scancel", external_id])
        except ClusterError as e:
            if "Invalid job id" in str(e) or "already completing or completed" in str(e):
                return
            raise

    def close(self) -> None:
        pass


__all__ = ["SETTINGS", "SlurmCliBackend", "build_script", "check_settings", "job_name", "map_state", "parse_gres"]
