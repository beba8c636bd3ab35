"""A throw-away Slurm 22.05 cluster on this machine (Debian's slurmctld, slurmd, slurm-client, munge), as
../shared/recipes/slurm-local.sh makes it, with ports of its own so that it never meets another one: N fake nodes
(one slurmd each) x G fake GPUs (character devices, the same device as /dev/null: Slurm refuses GPU GRES without
device files), partition `gpu`, cons_tres, MinJobAge 300 s. Needs root (slurmd runs jobs as their users).

`make slurm-deps` (tests/slurm_deps.sh) installs the packages. Used by the e2e tests of slurm pools and by
bench/slurm_pool.py.

With `jwt=True` the cluster also takes JWTs (auth/jwt beside munge, a key of its own) and `start_rest()` runs
slurmrestd (Debian's slurmrestd and slurm-wlm-jwt-plugin) on a free port of 127.0.0.1 as an unprivileged user, as
slurmrestd requires: `token(user)` makes a token for it (`scontrol token`). Used by the slurmrestd backend's tests.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "munge", "munged")
PACKAGES = "slurmctld slurmd slurm-client munge"
REST_PACKAGES = "slurmrestd slurm-wlm-jwt-plugin"
REST_USER = "nobody"  # slurmrestd refuses to run as root (or as SlurmUser)


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]


def missing_rest_parts() -> list[str]:
    """What slurmrestd with JWT auth needs that is not installed (beside missing_tools())."""
    out = [t for t in ("slurmrestd", "scontrol") if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if not any(Path("/usr/lib").glob("*/slurm*/auth_jwt.so")) and not any(Path("/usr/lib").glob("slurm*/auth_jwt.so")):
        out.append("auth_jwt.so (slurm-wlm-jwt-plugin)")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ensure_munge() -> None:
    if subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode == 0:
        return
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", "munge:munge", "/run/munge"], check=False)
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=False)
    for _ in range(50):
        if subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("munged did not start")


@dataclass
class SlurmCluster:
    root: Path
    nodes: int = 2
    gpus: int = 4
    gres_type: str = ""  # e.g. "h100": the nodes' GPUs as gpu:h100:G
    ctld_port: int = field(default_factory=_free_port)
    pids: list[int] = field(default_factory=list)
    jwt: bool = False  # also take JWTs (AuthAltTypes=auth/jwt): slurmrestd's tokens
    rest_port: int = field(default_factory=_free_port)
    rest: subprocess.Popen[bytes] | None = None  # slurmrestd, once start_rest() ran it

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def jwt_key(self) -> Path:
        return self.root / "jwt.key"

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    def write_config(self) -> None:
        d = self.root
        for sub in ("state", "log", "spool", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
        subprocess.run(["chown", "-R", "slurm:slurm", str(d / "state"), str(d / "log")], check=True)
        for i in range(self.gpus):
            dev = d / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
        host = socket.gethostname().split(".")[0]
        ports = [_free_port() for _ in range(self.nodes)]
        gres = f"gpu:{self.gres_type}:{self.gpus}" if self.gres_type else f"gpu:{self.gpus}"
        lines = [
            "ClusterName=corraltest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=slurm",
            "AuthType=auth/munge",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/slurmd-%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=1000",
            "GresTypes=gpu",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "SlurmdTimeout=30",
            "MinJobAge=300",
            "KillWait=5",
        ]
        if self.jwt:  # the key: readable by SlurmUser only (slurmctld checks the tokens' signatures)
            if not self.jwt_key.exists():
                fd = os.open(self.jwt_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, os.urandom(32))
                os.close(fd)
            subprocess.run(["chown", "slurm:slurm", str(self.jwt_key)], check=True)
            lines += ["AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={self.jwt_key}"]
        for name, port in zip(self.node_names(), ports, strict=True):
            lines.append(
                f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=16 Sockets=2 "
                f"CoresPerSocket=8 ThreadsPerCore=1 RealMemory=64000 Gres={gres} State=UNKNOWN"
            )
        lines.append(f"PartitionName=gpu Nodes={','.join(self.node_names())} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        typed = f" Type={self.gres_type}" if self.gres_type else ""
        (d / "gres.conf").write_text(
            f"NodeName={','.join(self.node_names())} Name=gpu{typed} File={d}/dev/nvidia[0-{self.gpus - 1}]\n"
        )

    def start(self, timeout_s: float = 60.0) -> None:
        if not self.conf.exists():
            self.write_config()
        _ensure_munge()
        subprocess.run(["slurmctld"], env=self.env, check=True)
        for name in self.node_names():
            (self.root / "spool" / f"slurmd-{name}").mkdir(parents=True, exist_ok=True)
            subprocess.run(["slurmd", "-N", name], env=self.env, check=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            r = subprocess.run(["sinfo", "-h", "-t", "idle,mixed,alloc", "-o", "%D"], env=self.env,
                               capture_output=True, text=True, check=False)  # fmt: skip
            if r.returncode == 0 and sum(int(x) for x in r.stdout.split() if x.isdigit()) == self.nodes:
                return
            time.sleep(0.2)
        raise RuntimeError(f"slurm did not come up; see {self.root}/log")

    def _pids(self) -> list[int]:
        out = []
        for f in [*self.root.glob("slurmd-*.pid"), self.root / "slurmctld.pid"]:
            try:
                out.append(int(f.read_text().strip()))
            except (OSError, ValueError):
                pass
        return out

    def stop_controller(self) -> None:
        """slurmctld only (its state is saved: a restart brings its jobs back)."""
        self._kill([int((self.root / "slurmctld.pid").read_text().strip())])

    def start_controller(self) -> None:
        subprocess.run(["slurmctld"], env=self.env, check=True)

    def start_rest(self, timeout_s: float = 30.0) -> None:
        """slurmrestd on 127.0.0.1:rest_port, as REST_USER, taking the JWTs of the X-SLURM-USER-* headers and
        passing them on to slurmctld (SLURM_JWT=daemon); only the v0.0.38 API (the dbv0.0.38 one needs slurmdbd)."""
        assert self.jwt, "slurmrestd needs a cluster made with jwt=True"
        log = open(self.root / "log" / "slurmrestd.log", "ab")
        env = dict(self.env, SLURM_JWT="daemon")
        gid = str(pwd.getpwnam(REST_USER).pw_gid)
        args = ["slurmrestd", "-u", REST_USER, "-g", gid, "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38"]
        self.rest = subprocess.Popen([*args, f"127.0.0.1:{self.rest_port}"], env=env, stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.rest.poll() is not None:
                raise RuntimeError(f"slurmrestd exited ({self.rest.returncode}); see {self.root}/log/slurmrestd.log")
            try:
                with socket.create_connection(("127.0.0.1", self.rest_port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"slurmrestd did not listen on {self.rest_port}; see {self.root}/log/slurmrestd.log")

    def stop_rest(self) -> None:
        if self.rest is not None and self.rest.poll() is None:
            self.rest.terminate()
            try:
                self.rest.wait(5)
            except subprocess.TimeoutExpired:
                self.rest.kill()
                self.rest.wait()
        self.rest = None

    def token(self, user: str, lifespan_s: int = 3600) -> str:
        """A JWT for `user` (`scontrol token`, as root), signed with this cluster's key."""
        r = subprocess.run(["scontrol", "token", f"username={user}", f"lifespan={lifespan_s}"], env=self.env,
                           capture_output=True, text=True, check=True)  # fmt: skip
        return r.stdout.strip().removeprefix("SLURM_JWT=")

    def stop(self) -> None:
        """Its jobs first (scancel: their slurmstepd and processes would outlive the daemons), then the daemons."""
        ids = subprocess.run(["squeue", "-h", "-t", "pending,running,suspended", "-o", "%i"], env=self.env,
                             capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
        if ids:
            subprocess.run(["scancel", *ids], env=self.env, capture_output=True, check=False)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                left = subprocess.run(["squeue", "-h", "-t", "running,completing", "-o", "%i"], env=self.env,
                                      capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
                if not left:
                    break
                time.sleep(0.2)
        self.stop_rest()
        self._kill(self._pids())

    @staticmethod
    def _kill(pids: list[int]) -> None:
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        for p in pids:  # slurmd ignores SIGTERM while it retries a dead controller
            if _alive(p):
                os.kill(p, signal.SIGKILL)

    def sbatch(self, *args: str, script: str) -> str:
        r = subprocess.run(["sbatch", "--parsable", *args], input=script, env=self.env,
                           capture_output=True, text=True, check=True)  # fmt: skip
        return r.stdout.strip().split(";")[0]

    def squeue_state(self, job_id: str) -> str:
        r = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], env=self.env,
                           capture_output=True, text=True, check=False)  # fmt: skip
        return r.stdout.strip()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
