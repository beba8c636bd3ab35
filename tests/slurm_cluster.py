"""A throw-away Slurm 22.05 cluster on this machine (Debian's slurmctld, slurmd, slurm-client, munge), as
../shared/recipes/slurm-local.sh makes it, with ports of its own so that it never meets another one: N fake nodes
(one slurmd each) x G fake GPUs (character devices, the same device as /dev/null: Slurm refuses GPU GRES without
device files), partition `gpu`, cons_tres, MinJobAge 300 s. Needs root (slurmd runs jobs as their users).

`make slurm-deps` (tests/slurm_deps.sh) installs the packages. Used by the e2e tests of slurm pools and by
bench/slurm_pool.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "munge", "munged")
PACKAGES = "slurmctld slurmd slurm-client munge"


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]


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
