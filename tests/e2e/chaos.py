"""Machinery of the chaos tests (issue 17): a cluster of real processes (`corral server` replicas on PostgreSQL,
`corral agent`s on simulated GPUs), a steady burst of submissions through the SDK with every replica's URL, the
faults (a private PostgreSQL to restart, a network namespace to cut an agent off, a tiny tmpfs as an agent's log
disk), and the checks that nothing was lost, doubled or stuck and that no GPU ran two runs at once, read from the
agents' own journals."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tests.realparts import missing_real_part

from corral.agent.journal import overlaps, read_intervals
from corral.api.schemas import JobSubmit
from corral.sdk.client import CorralClient
from corral.sdk.errors import CorralSDKError

from .conftest import CORRAL, Corral, free_port, wait_for

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


# ---- a PostgreSQL of the test's own, to restart --------------------------------------------------------------
class PrivatePostgres:
    """initdb + pg_ctl as the postgres user, on a free port, its data in a temp dir: the test may stop it."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not bins or os.geteuid() != 0:
            missing_real_part(
                "a private PostgreSQL server (pg_ctl, run as root to switch to the postgres user)",
                "apt-get install postgresql and run the tests as root, as CI does",
            )
        self.bin = Path(bins[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="corral-chaos-pg-"))
        os.chmod(self.dir, 0o755)
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        self.port = free_port()
        self._as_postgres([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N"])
        self.start()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/corral"
        self._as_postgres(
            [str(self.bin.parent / "bin" / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "corral"]
        )

    def _as_postgres(self, args: list[str]) -> None:
        r = subprocess.run(["runuser", "-u", "postgres", "--", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{args[0]}: {r.stdout}{r.stderr}"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._as_postgres(
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start"]
        )

    def stop(self, mode: str = "immediate") -> None:
        """`immediate`: as a crash (no checkpoint; the next start recovers from the WAL)."""
        self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def close(self) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
             "stop"], capture_output=True, check=False, timeout=60,
        )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- a network namespace for one agent -------------------------------------------------------------------------
class NetNamespace:
    """A namespace joined to the host by a veth pair on a /30 of its own: `cut()` sets the link down inside it
    (the agent's packets go nowhere, as with a pulled cable), `mend()` sets it up again."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or not shutil.which("ip"):
            missing_real_part("network namespaces (ip, as root)", "apt-get install iproute2 and run as root, as CI")
        tag = uuid.uuid4().hex[:6]
        self.name, self.host_if, self.ns_if = f"corral-{tag}", f"cvh{tag}", f"cvn{tag}"
        third = int(tag[:2], 16)
        fourth = (int(tag[2:4], 16) % 63) * 4
        self.host_ip, self.ns_ip = f"10.231.{third}.{fourth + 1}", f"10.231.{third}.{fourth + 2}"
        for args in (
            ["netns", "add", self.name],
            ["link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if],
            ["link", "set", self.ns_if, "netns", self.name],
            ["addr", "add", f"{self.host_ip}/30", "dev", self.host_if],
            ["link", "set", self.host_if, "up"],
            ["-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if],
            ["-n", self.name, "link", "set", self.ns_if, "up"],
            ["-n", self.name, "link", "set", "lo", "up"],
        ):
            subprocess.run(["ip", *args], check=True, capture_output=True)

    def wrap(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        subprocess.run(["ip", "-n", self.name, "link", "set", self.ns_if, "down"], check=True)

    def mend(self) -> None:
        subprocess.run(["ip", "-n", self.name, "link", "set", self.ns_if, "up"], check=True)

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], check=False, capture_output=True)


class Tmpfs:
    """A small tmpfs mounted where an agent keeps its job logs (mounting needs root)."""

    def __init__(self, path: Path, size: str) -> None:
        if os.geteuid() != 0:
            missing_real_part("root (to mount a tmpfs)", "run the tests as root, as CI does")
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)
        self.path = path

    def used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


# ---- the cluster -------------------------------------------------------------------------------------------------
class Replica:
    def __init__(self, cluster: ChaosCluster, name: str, port: int = 0, agent_port: int = 0) -> None:
        self.name = name
        self.port, self.agent_port, self.ui_port = port or free_port(), agent_port or free_port(), free_port()
        self.gateway_port = free_port()  # each replica serves the services' gateway on a port of its own
        self.url = f"{cluster.scheme}://{cluster.api_host}:{self.port}"
        self.agent_url = f"https://{cluster.api_host}:{self.agent_port}"
        env = dict(
            cluster.env,
            CORRAL_PORT=str(self.port),
            CORRAL_AGENT_PORT=str(self.agent_port),
            CORRAL_JOB_UI_PORT=str(self.ui_port),
            CORRAL_GATEWAY_PORT=str(self.gateway_port),
        )
        self.proc = cluster.c.spawn([CORRAL, "server"], env=env, log_name=f"server-{name}")
        wait_for(self.healthy, 60, f"replica {name} healthy")

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2, verify=False).status_code == 200  # liveness only
        except httpx.HTTPError:
            return False

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


class ChaosCluster:
    """`replicas` servers on one PostgreSQL database and one data dir; agents with every replica's agent URL."""

    def __init__(
        self, c: Corral, database_url: str, replicas: int = 2, api_host: str = "127.0.0.1", **env: str
    ) -> None:
        self.c = c
        self.api_host = api_host
        # A server bound beyond loopback serves its API over TLS too (from the cluster CA, made by the first).
        self.scheme = "http" if api_host == "127.0.0.1" else "https"
        self.verify: ssl.SSLContext | bool = True
        self.env = dict(
            c.env,
            CORRAL_DATABASE_URL=database_url,
            CORRAL_NODE_LOST_AFTER_S="8",
            CORRAL_LONG_POLL_S="2",  # the agents' heartbeat: well within the node-lost timeout
            **env,
        )
        if api_host != "127.0.0.1":
            self.env.update(CORRAL_HOST="0.0.0.0", CORRAL_TLS_NAMES=api_host)
        self.replicas = [Replica(self, "r0")]  # the first migrates the database and leads
        if self.scheme == "https":
            ca = c.data_dir / "ca" / "ca.crt"
            self.verify = ssl.create_default_context(cafile=str(ca))
            self.env["CORRAL_CA_FILE"] = str(ca)
        self.token = (c.data_dir / "admin-token").read_text().strip()
        self.replicas += [Replica(self, f"r{i}") for i in range(1, replicas)]
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.agent_dirs: dict[str, Path] = {}

    @property
    def urls(self) -> str:
        return ",".join(r.url for r in self.replicas)

    def live(self) -> Replica:
        return next(r for r in self.replicas if r.proc.poll() is None)

    def api(self, method: str, path: str, **kw: Any) -> Any:
        """Through any live replica (the first that answers)."""
        last: Exception | None = None
        for r in self.replicas:
            if r.proc.poll() is not None:
                continue
            try:
                resp = httpx.request(
                    method, f"{r.url}/api/v1{path}", headers={"Authorization": f"Bearer {self.token}"}, timeout=10,
                    verify=self.verify, **kw,
                )  # fmt: skip
            except httpx.HTTPError as e:
                last = e
                continue
            if resp.status_code >= 500:
                last = AssertionError(f"{r.name}: {resp.status_code} {resp.text}")
                continue
            assert resp.status_code < 300, resp.text
            return resp.json()
        raise AssertionError(f"no replica answered {method} {path}: {last}")

    def try_api(self, method: str, path: str, **kw: Any) -> Any:
        try:
            return self.api(method, path, **kw)
        except AssertionError:
            return None

    def agent_data_dir(self, node: str) -> Path:
        return self.c.root / f"agent-{node}"

    def agent_dir(self, node: str) -> Path:
        return self.agent_data_dir(node) / "agent" / node

    def start_agent(
        self, node: str, gpus: int = 2, netns: NetNamespace | None = None, model: str = "H100-80GB"
    ) -> None:
        r = self.c.cli("tokens", "join", "create", "--ttl", "10m", "--uses", "1",
                       env=dict(self.env, CORRAL_URL=self.urls, CORRAL_TOKEN=self.token))  # fmt: skip
        assert r.returncode == 0, r.stderr
        token_file = self.c.root / f"join-{node}"
        token_file.write_text(r.stdout.strip() + "\n")
        os.chmod(token_file, 0o600)
        argv = [CORRAL, "agent", "--join", ",".join(x.agent_url for x in self.replicas),
                "--gpus", f"sim:{gpus}x{model}", "--node-name", node, "--token-file", str(token_file)]  # fmt: skip
        self.agents[node] = self.c.spawn(
            netns.wrap(argv) if netns else argv, env=dict(self.env, CORRAL_DATA_DIR=str(self.agent_data_dir(node))),
            log_name=f"agent-{node}",
        )  # fmt: skip
        self.agent_dirs[node] = self.agent_dir(node)
        wait_for(lambda: self.node_state(node) == "READY", 60, f"agent {node} registered")

    def node_state(self, node: str) -> str | None:
        nodes = self.try_api("GET", "/nodes") or []
        return next((n["state"] for n in nodes if n["name"] == node), None)

    def leader(self) -> Replica | None:
        status = self.try_api("GET", "/status")
        if not status or not status["leader"]:
            return None
        url = next(x["url"] for x in status["replicas"] if x["id"] == status["leader"])
        return next((r for r in self.replicas if r.url == url and r.proc.poll() is None), None)

    def probe(self, timeout_s: float = 60) -> float:
        """Seconds from now until a new one-GPU job submitted now (through any replica, retrying) has run."""
        started = time.monotonic()
        with CorralClient(self.urls, self.token, timeout_s=5.0, verify=self.verify) as client:
            job = client.submit(JobSubmit(name="probe", command=["true"], gpus=1), retry_for_s=timeout_s).id
        wait_for(lambda: (self.try_api("GET", f"/jobs/{job}") or {}).get("state") == "SUCCEEDED", timeout_s, "probe")
        return time.monotonic() - started


# ---- the steady burst ----------------------------------------------------------------------------------------------
@dataclass
class Burst:
    """One thread submitting a one-GPU job every `every_s` through the SDK (every replica's URL, an idempotency
    key per job, retries for up to 30 s); every `cancel_every`-th job is a long one that it cancels right away."""

    cluster: ChaosCluster
    every_s: float = 0.25
    cancel_every: int = 8
    command: str = "sleep 0.4; echo ok-{i}"
    attempted: list[str] = field(default_factory=list)  # names, in order
    accepted: dict[str, int] = field(default_factory=dict)  # name -> job id
    cancelled: set[str] = field(default_factory=set)
    submit_errors: int = 0
    cancel_errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(90)
        assert not self._thread.is_alive(), "the burst thread did not stop"

    def _run(self) -> None:
        with CorralClient(self.cluster.urls, self.cluster.token, timeout_s=5.0, verify=self.cluster.verify) as client:
            i = 0
            while not self._stop.is_set():
                i += 1
                name = f"chaos-{i}"
                long = i % self.cancel_every == 0
                command = "sleep 120" if long else self.command.format(i=i)
                self.attempted.append(name)
                try:
                    job = client.submit(JobSubmit(name=name, command=["sh", "-c", command], gpus=1))
                except CorralSDKError:
                    self.submit_errors += 1
                    continue
                self.accepted[name] = job.id
                if long:
                    self._cancel(client, name, job.id)
                self._stop.wait(self.every_s)

    def _cancel(self, client: CorralClient, name: str, job: int) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                client.cancel(job)
                self.cancelled.add(name)
                return
            except CorralSDKError:  # a cancel is never resent to a second replica by the client: we try again
                self.cancel_errors += 1
                time.sleep(0.5)


# ---- the checks --------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    scenario: str
    accepted: int
    present: int
    finished: int
    succeeded: int
    cancelled: int
    lost: int
    duplicated: int
    stuck: int
    requeued: int
    gpu_overlaps: int
    submit_errors: int
    recovery_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        extra = "".join(f", {k} {v}" for k, v in self.extra.items())
        return (
            f"chaos {self.scenario}: recovered in {self.recovery_s:.1f} s; jobs accepted {self.accepted}, present "
            f"{self.present}, finished {self.finished} (succeeded {self.succeeded}, cancelled on purpose "
            f"{self.cancelled}), lost {self.lost}, duplicated {self.duplicated}, stuck {self.stuck}, requeued "
            f"{self.requeued}; GPUs given twice {self.gpu_overlaps}; submissions the client saw fail "
            f"{self.submit_errors}{extra}"
        )


def settle_and_check(
    cluster: ChaosCluster, burst: Burst, scenario: str, recovery_s: float, settle_s: float = 120, **extra: Any
) -> tuple[Outcome, list[dict[str, Any]]]:
    """Wait until every job is over (or `settle_s` passed), then count. Returns the outcome and the jobs."""
    names = set(burst.attempted)

    def ours() -> list[dict[str, Any]]:
        return [j for j in cluster.api("GET", "/jobs", params={"all": "true", "limit": 5000}) if j["name"] in names]

    try:
        jobs = wait_for(lambda: (js := ours()) and all(j["state"] in TERMINAL for j in js) and js, settle_s, "settled")
    except AssertionError:
        jobs = ours()
    by_name: dict[str, list[dict[str, Any]]] = {}
    for j in jobs:
        by_name.setdefault(j["name"], []).append(j)
    intervals = [i for node, d in cluster.agent_dirs.items() for i in read_intervals(node, d)]
    outcome = Outcome(
        scenario=scenario,
        accepted=len(burst.accepted),
        present=len(jobs),
        finished=sum(j["state"] in TERMINAL for j in jobs),
        succeeded=sum(j["state"] == "SUCCEEDED" for j in jobs),
        cancelled=sum(j["state"] == "CANCELLED" and j["name"] in burst.cancelled for j in jobs),
        lost=sum(1 for name, job in burst.accepted.items() if job not in {j["id"] for j in by_name.get(name, [])}),
        duplicated=sum(len(js) - 1 for js in by_name.values()),
        stuck=sum(j["state"] not in TERMINAL for j in jobs),
        requeued=sum(j["attempt"] > 1 for j in jobs),
        gpu_overlaps=len(overlaps(intervals)),
        submit_errors=burst.submit_errors,
        recovery_s=recovery_s,
        extra=extra,
    )
    return outcome, jobs


def assert_nothing_lost(
    outcome: Outcome, jobs: list[dict[str, Any]], burst: Burst, figure: Callable[[str], None], requeue_ok: bool = False
) -> None:
    figure(outcome.line())  # in the run's "figures" section, passed or failed
    assert outcome.accepted > 0
    assert outcome.lost == 0 and outcome.duplicated == 0 and outcome.stuck == 0, outcome.line()
    assert outcome.present == outcome.finished, outcome.line()
    # Every job the client never heard back about is one the client saw fail (its answer lost in the fault).
    assert outcome.present - outcome.accepted <= outcome.submit_errors, outcome.line()
    assert outcome.gpu_overlaps == 0, outcome.line()
    for j in jobs:  # the cancelled ones on purpose, the others ran to success
        expected = "CANCELLED" if j["name"] in burst.cancelled else "SUCCEEDED"
        assert j["state"] == expected, (j, outcome.line())
    if not requeue_ok:
        assert outcome.requeued == 0, outcome.line()


def job_log(cluster: ChaosCluster, job: int) -> str:
    r = cluster.live()
    resp = httpx.get(
        f"{r.url}/api/v1/jobs/{job}/logs", headers={"Authorization": f"Bearer {cluster.token}"}, verify=cluster.verify
    )
    resp.raise_for_status()
    return resp.text
