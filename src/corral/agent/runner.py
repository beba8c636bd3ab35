"""The agent's loops: register, long-poll for work, launch, watch exits, ship logs, report."""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path

import psutil

from corral import __version__
from corral.agent.gpu.base import GpuBackend
from corral.agent.logship import LogShipper
from corral.executors.base import Executor, ExitRecord, LaunchSpec
from corral.sdk.client import AgentClient, CorralAPIError, CorralSDKError
from corral.server.schemas import AgentRegister, AgentSync, Assignment, ExitReport, GpuReport

log = logging.getLogger("corral.agent")


class Agent:
    """One node's agent. `run()` blocks until `stop()`; jobs keep running across agent restarts."""

    def __init__(self, client: AgentClient, node: str, backend: GpuBackend, executor: Executor, log_dir: Path,
                 poll_wait_s: float = 20.0, watch_interval_s: float = 0.25, labels: dict[str, str] | None = None) -> None:
        self.client = client
        self.node = node
        self.backend = backend
        self.executor = executor
        self.log_dir = log_dir
        self.poll_wait_s = poll_wait_s
        self.watch_interval_s = watch_interval_s
        self.labels = labels or {}
        self.shipper = LogShipper(client, node)
        self._lock = threading.Lock()  # launches and the running/exits view happen under it
        self._cancelled: set[int] = set()
        self._stop = threading.Event()
        self.log_dir.mkdir(parents=True, exist_ok=True)

    # ---- registration -------------------------------------------------------
    def registration(self) -> AgentRegister:
        gpus = [GpuReport(index=g.index, uuid=g.uuid, model=g.model, memory_mib=g.memory_mib, pci_bus_id=g.pci_bus_id,
                          numa_node=g.numa_node, nvlink_peers=list(g.nvlink_peers), pcie_switch=g.pcie_switch,
                          ecc_enabled=g.ecc_enabled, healthy=g.healthy) for g in self.backend.discover()]
        return AgentRegister(name=self.node, hostname=socket.gethostname(), backend=self.backend.name,
                             cpu_milli=(os.cpu_count() or 1) * 1000,
                             memory_mib=psutil.virtual_memory().total // (1 << 20),
                             labels=self.labels, gpus=gpus, agent_version=__version__)

    def register(self, retry_s: float = 1.0) -> None:
        """Register, retrying while the server is unreachable; auth and validation errors are fatal."""
        body = self.registration()
        while not self._stop.is_set():
            try:
                self.client.register(body)
                log.info("registered node %s with %d GPU(s) (%s)", self.node, len(body.gpus), self.backend.name)
                return
            except CorralAPIError:
                raise
            except CorralSDKError as e:
                log.warning("server not reachable yet (%s); retrying", e)
                self._stop.wait(retry_s)

    # ---- loops ----------------------------------------------------------------
    def run(self) -> None:
        self.register()
        watcher = threading.Thread(target=self._watch_loop, name="corral-agent-watch", daemon=True)
        watcher.start()
        self._poll_loop()
        watcher.join(timeout=5)

    def stop(self) -> None:
        self._stop.set()

    def _poll_loop(self) -> None:
        """Long-poll the server for assignments and cancels; this is also the heartbeat."""
        while not self._stop.is_set():
            try:
                self.sync_once(self.poll_wait_s)
            except CorralAPIError as e:
                if e.status == 404:  # the server forgot us (e.g. a fresh database): register again
                    self.register()
                else:
                    log.error("sync refused: %s", e)
                    self._stop.wait(2.0)
            except CorralSDKError as e:
                log.warning("sync failed: %s", e)
                self._stop.wait(1.0)

    def _watch_loop(self) -> None:
        """Ship logs as they grow; report exits at once instead of waiting for the next long-poll."""
        while not self._stop.wait(self.watch_interval_s):
            try:
                for job_id in self._running_ids():
                    self.shipper.ship(job_id, self.log_path(job_id))
                if self.executor.collect_exits():
                    self.sync_once(0.0)
            except CorralSDKError as e:
                log.warning("report failed: %s", e)

    # ---- one exchange ---------------------------------------------------------
    def sync_once(self, wait_s: float) -> None:
        with self._lock:
            running = self._running_ids()
            exits = self.executor.collect_exits()
        for ex in exits:  # the whole log reaches the server before the exit does
            self.shipper.ship(int(ex.job_id), self.log_path(int(ex.job_id)))
        reply = self.client.sync(self.node, AgentSync(running=running, exits=[_report(e) for e in exits], wait_s=wait_s))
        for job_id in reply.acked_exits:
            self.executor.ack(str(job_id))
            self.shipper.forget(job_id)
            self._cancelled.discard(job_id)
        for a in reply.assignments:
            self.launch(a)
        for job_id in reply.cancels:
            if job_id not in self._cancelled:
                self._cancelled.add(job_id)
                self.executor.cancel(str(job_id), reply.cancel_grace_s)

    def launch(self, a: Assignment) -> None:
        spec = LaunchSpec(job_id=str(a.job_id), command=tuple(a.command), env=a.env, workdir=a.workdir,
                          gpu_indices=tuple(a.gpu_indices), gpu_uuids=tuple(a.gpu_uuids),
                          log_path=self.log_path(a.job_id))
        with self._lock:
            self.executor.launch(spec)
        log.info("job %s started on GPUs %s", a.job_id, a.gpu_indices)

    def log_path(self, job_id: int) -> Path:
        return self.log_dir / f"{job_id}.log"

    def _running_ids(self) -> list[int]:
        return sorted(int(j) for j in self.executor.running())


def _report(e: ExitRecord) -> ExitReport:
    return ExitReport(job_id=int(e.job_id), exit_code=e.exit_code, reason=e.reason)
