"""The agent's loops: register, long-poll for work, launch, watch exits, ship logs and telemetry, report.

Work is tracked per run (a job's attempt): a requeued job comes back as a new attempt, which the
executor keeps apart from the old one (`<job>.<attempt>`), so a stale exit never ends a new attempt.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil

from corral import __version__
from corral.agent.gpu.base import GpuBackend
from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.agent.journal import Journal
from corral.agent.logship import LogShipper
from corral.agent.metrics import Collector
from corral.agent.staging import StageEngine, StageMissing
from corral.agent.webports import WebPortWatch
from corral.api.schemas import (
    AgentRegister,
    AgentSync,
    Assignment,
    ExitReport,
    GpuReport,
    RunRef,
    SimFaultCommand,
)
from corral.api.staging import StageReport
from corral.core.containers import container_from_dict
from corral.core.errors import CorralError
from corral.core.simfault import parse_sim_fault
from corral.core.telemetry import TelemetryBatch, batch_to_dict
from corral.core.unix_identity import JobIdentity
from corral.executors.base import Executor, ExitRecord, LaunchSpec, RegistryLogin
from corral.executors.jobhome import write_notice
from corral.sdk.client import AgentClient, CorralAPIError, CorralSDKError

log = logging.getLogger("corral.agent")
PHASE_REPORT_EVERY_S = 1.0  # a pull's progress reaches the server at most this often
TELEMETRY_QUEUE = 120  # batches kept while the server is unreachable (10 min at 5 s); older ones drop
EXIT_STOPPED_BEFORE_START = 143  # as SIGTERM: a run cancelled while it waited for its GPUs


class Agent:
    """One node's agent. `run()` blocks until `stop()`; jobs keep running across agent restarts."""

    def __init__(
        self,
        client: AgentClient,
        node: str,
        backend: GpuBackend,
        executor: Executor,
        log_dir: Path,
        poll_wait_s: float = 20.0,
        watch_interval_s: float = 0.25,
        labels: dict[str, str] | None = None,
        metrics_interval_s: float = 5.0,
        checkpoint_dir: Path | None = None,
        address: str = "",
        runtimes: tuple[str, ...] = ("process",),
        image_digests: Callable[[], dict[str, str]] | None = None,
        phases: Callable[[], dict[str, str]] | None = None,
        cached_images: Callable[[], list[str] | None] | None = None,
        journal: Journal | None = None,
        stager: StageEngine | None = None,
    ) -> None:
        self.client = client
        self.node = node
        self.backend = backend
        self.executor = executor
        self.log_dir = log_dir
        self.poll_wait_s = poll_wait_s
        self.watch_interval_s = watch_interval_s
        self.labels = labels or {}
        self.metrics_interval_s = metrics_interval_s
        self.address = address
        self.runtimes = runtimes
        self._image_digests = image_digests or dict
        self._phases = phases or dict
        self._cached_images = cached_images or (lambda: None)
        self._phases_sent: dict[str, str] = {}
        self._phase_sync_at = 0.0
        self._images_sent: list[str] | None = None  # as last sent; None: send them with the next report
        self.checkpoint_dir = checkpoint_dir or log_dir.parent / "checkpoints"
        self._noticed: set[RunRef] = set()  # runs told of a spot interruption notice
        self.shipper = LogShipper(client, node)
        self.journal = journal or Journal(log_dir)  # the agent's own dir in `corral agent`: not the log disk
        self.stager = stager  # data staging (None: this agent stages nothing; a job that asks fails to start)
        self._staging_sent: tuple[dict[str, StageReport], dict[str, StageReport]] = ({}, {})
        self._stage_outs: set[int] = set()  # jobs the server asks this node to stage (output, or input again)
        self._stage_dirs: dict[RunRef, Path] = {}  # runs' stage dirs, made at their launch
        self._preparing: set[RunRef] = set()
        self._journaled_exits: set[RunRef] = set()
        self._lock = threading.Lock()  # launches and the running/exits view happen under it
        # Each report's place in the order of snapshots (the long poll and the watch loop each send one; the
        # server applies an older one that arrives late for its exits only): a random id per process, a count.
        self._boot = uuid.uuid4().hex
        self._seq = 0
        self._cancelled: set[RunRef] = set()
        self._run_gpus: dict[RunRef, tuple[int, ...]] = {}
        # Runs given to this node whose GPUs a run it was told to stop still holds (a node back from LOST: the
        # server freed the old attempts' GPUs, the old attempts take their grace to end): started when they free.
        self._deferred: dict[RunRef, Assignment] = {}
        self._local_exits: dict[RunRef, ExitReport] = {}  # deferred runs cancelled before they started
        self._stop = threading.Event()
        self._wake = threading.Event()  # set: the watch loop looks at once (a job ended), not after its interval
        # Held by the watch loop while its report is on its way: the next long poll waits for it, so that it does
        # not carry the same exits again (and the server does not work out the same assignments twice).
        self._reporting = threading.Lock()
        self._batches: queue.Queue[TelemetryBatch] = queue.Queue(TELEMETRY_QUEUE)
        self.collector: Collector | None = None
        # who listens on its jobs' web-UI ports (job proxy): a process job's own processes, a container's engine
        self.web_ports = WebPortWatch(executor.leader_pid, published_of=executor.published_port)
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    # ---- registration -------------------------------------------------------
    def registration(self) -> AgentRegister:
        gpus = [GpuReport.from_info(g) for g in self.backend.discover()]
        return AgentRegister(
            name=self.node,
            hostname=socket.gethostname(),
            address=self.address,
            backend=self.backend.name,
            cpu_milli=(os.cpu_count() or 1) * 1000,
            memory_mib=psutil.virtual_memory().total // (1 << 20),
            labels=self.labels,
            gpus=gpus,
            agent_version=__version__,
            isolation=self.executor.isolation,
            runtimes=list(self.runtimes),
            images=self._cached_images(),
        )

    def register(self, retry_s: float = 1.0) -> None:
        """Register, retrying while the server is unreachable; auth and validation errors are fatal."""
        body = self.registration()
        while not self._stop.is_set():
            try:
                self.client.register(body)
                self._images_sent = body.images
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
        threads = [
            threading.Thread(target=self._watch_loop, name="corral-agent-watch", daemon=True),
            threading.Thread(target=self._telemetry_loop, name="corral-agent-telemetry", daemon=True),
        ]
        for t in threads:
            t.start()
        if self.metrics_interval_s > 0:
            self.collector = Collector(
                self.backend, self._enqueue_batch, node=self.node, interval_s=self.metrics_interval_s
            )
            self.collector.start()
        try:
            self._poll_loop()
        finally:
            if self.collector is not None:
                self.collector.stop()
            if self.stager is not None:
                self.stager.close()  # running stagings stop; the server hands them out again
            for t in threads:
                t.join(timeout=5)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Have the watch loop look now instead of after watch_interval_s: a job ended (the executor's exit
        listener). Any thread; returns at once. Wake-ups while the loop is busy fold into one more look."""
        self._wake.set()

    def _poll_loop(self) -> None:
        """Long-poll the server for assignments and cancels; this is also the heartbeat."""
        while not self._stop.is_set():
            with self._reporting:
                pass
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
        """Ship logs as they grow; report exits at once instead of waiting for the next long-poll. Looks every
        watch_interval_s, and at once when woken (wake(): a job ended); exits that come while a report is on its
        way go together in the next one."""
        while True:
            self._wake.wait(self.watch_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                for run in self._running_runs():
                    self._ship_log(run)
                exited = bool(self.executor.collect_exits())
                started = bool(self._deferred) and self.launch_deferred()
                staging = self._staging_news()
                if self.web_ports.refresh() or exited or started or self._phase_news() or staging:  # reported at once
                    with self._reporting:
                        self.sync_once(0.0)
            except CorralSDKError as e:
                log.warning("report failed: %s", e)

    def _phase_news(self) -> bool:
        """A run's phase changed (a pull progressed, or its command started): report it, at most once a second
        while only percentages move."""
        phases = self._all_phases()
        if phases == self._phases_sent:
            return False
        now = time.monotonic()
        if set(phases) == set(self._phases_sent) and now - self._phase_sync_at < PHASE_REPORT_EVERY_S:
            return False
        self._phase_sync_at = now
        return True

    def _staging_news(self) -> bool:
        """A staging's state changed (or its bytes moved: at most once a second): report it."""
        if self.stager is None:
            return False
        reports = self.stager.reports()
        if reports == self._staging_sent:
            return False
        states = tuple({k: r.state for k, r in side.items()} for side in reports)
        sent = tuple({k: r.state for k, r in side.items()} for side in self._staging_sent)
        now = time.monotonic()
        if states == sent and now - self._phase_sync_at < PHASE_REPORT_EVERY_S:
            return False
        self._phase_sync_at = now
        return True

    def _enqueue_batch(self, batch: TelemetryBatch) -> None:
        """Collector sink (its thread): hand over, never block; the oldest batch goes when full."""
        while True:
            try:
                self._batches.put_nowait(batch)
                return
            except queue.Full:
                try:
                    self._batches.get_nowait()
                except queue.Empty:
                    pass

    def _telemetry_loop(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._batches.get(timeout=0.5)
            except queue.Empty:
                continue
            self._update_sim_load()
            try:
                self.client.send_telemetry(self.node, batch_to_dict(batch))
            except CorralAPIError as e:
                log.warning("telemetry refused: %s", e)
            except CorralSDKError as e:
                log.warning("telemetry not delivered (%s); keeping it", e)
                self._enqueue_batch(batch)
                self._stop.wait(1.0)

    def _update_sim_load(self) -> None:
        """Simulated GPUs are busy exactly while a job runs on them."""
        if isinstance(self.backend, SimulatedGpuBackend):
            running = set(self._running_runs())
            busy = {i for run, gpus in self._run_gpus.items() if run in running for i in gpus}
            self.backend.set_load({i: 1.0 for i in busy})

    # ---- one exchange ---------------------------------------------------------
    def sync_once(self, wait_s: float) -> None:
        with self._lock:
            running = self._running_runs()
            exits = self.executor.collect_exits()
            digests = self._image_digests()
            phases = self._all_phases()
            images = self._cached_images()
            self._seq += 1
            seq = self._seq
            self._journal_exits(exits)  # the node's own record, before the report that frees their GPUs
            local_exits = list(self._local_exits.values())
            staging_in, staging_out = self.stager.reports() if self.stager is not None else ({}, {})
        for ex in exits:  # the whole log reaches the server before the exit does
            self._ship_log(RunRef.from_key(ex.job_id))
        reply = self.client.sync(
            self.node,
            AgentSync(
                running=running,
                exits=[_report(e) for e in exits] + local_exits,
                wait_s=wait_s,
                web_ports=self.web_ports.reports(),
                boot=self._boot,
                seq=seq,
                image_digests=digests,
                phases=phases,
                images=images if images != self._images_sent else None,
                staging_in=staging_in,
                staging_out=staging_out,
            ),
        )
        self._staging_sent = (staging_in, staging_out)
        if self.stager is not None:
            self.stager.set_orders(reply.stage_in, reply.stage_out)
            self._stage_outs = {o.job_id for o in reply.stage_out} | {o.job_id for o in reply.stage_in}
        self._phases_sent = phases
        self._images_sent = images
        self.web_ports.set_checks(reply.web_ports)
        for run in reply.acked_exits:
            self._local_exits.pop(run, None)
            self.executor.ack(run.key)
            self.shipper.forget(run.job_id, run.attempt, run.rank)
            # The server holds the whole log (shipped before the exit was reported): the node's copy goes, or a
            # node's log disk would fill with every job it ever ran.
            self.log_path(run).unlink(missing_ok=True)
            self._cancelled.discard(run)
            self._noticed.discard(run)
            self._run_gpus.pop(run, None)
            self._journaled_exits.discard(run)
            self._stage_dirs.pop(run, None)
            if self.stager is not None and run.job_id not in self._stage_outs:
                # its stage dir goes, unless the server asked for its output (then it goes once shipped) or it
                # stages the job's input here again (a requeued job)
                self.stager.discard(run.job_id)
        # Runs already here are told to stop first, so that a new run given one of their GPUs in the same reply
        # waits for it; a cancel of a run in this very reply is applied once that run is launched (or deferred).
        launched = [r for r in reply.cancels if r in self._run_gpus]
        if reply.notice_s is not None:
            self._write_notices(reply.notice_s)
        self._stop_runs(launched, reply.cancel_grace_s)
        for a in reply.assignments:
            self.launch(a)
        self._stop_runs([r for r in reply.cancels if r not in launched], reply.cancel_grace_s)
        for fault in reply.faults:
            self.apply_fault(fault)
        if reply.assignments or reply.acked_exits:
            self._update_sim_load()

    def _write_notices(self, seconds: float) -> None:
        """A spot interruption notice: each job here finds its seconds in its CORRAL_NOTICE_FILE (once)."""
        for run in list(self._run_gpus):
            if run in self._noticed:
                continue
            self._noticed.add(run)
            folder = self.checkpoint_dir / str(run.job_id)
            try:
                if folder.is_dir():
                    write_notice(folder, seconds)
            except OSError as e:
                log.warning("job %s: cannot write its notice file: %s", run.job_id, e)

    def _stop_runs(self, runs: list[RunRef], grace_s: float) -> None:
        for run in runs:
            if run in self._cancelled:
                continue
            self._cancelled.add(run)
            with self._lock:
                waiting = self._deferred.pop(run, None)
                if waiting is not None:  # never started: its exit is made here
                    self._local_exits[run] = ExitReport(
                        job_id=run.job_id, attempt=run.attempt, rank=run.rank, exit_code=EXIT_STOPPED_BEFORE_START,
                        reason="stopped before it started (its GPUs were still held by a run being stopped)",
                    )  # fmt: skip
                    continue
            self.executor.cancel(run.key, grace_s)

    def _held_gpus(self) -> set[int]:
        """GPUs held by runs this agent was told to stop and that still run (under self._lock)."""
        running = set(self.executor.running())
        return {
            g for run, gpus in self._run_gpus.items() if run in self._cancelled and run.key in running for g in gpus
        }

    def _journal_exits(self, exits: list[ExitRecord]) -> None:
        """Each exit once in the journal (under self._lock)."""
        for ex in exits:
            run = RunRef.from_key(ex.job_id)
            if run not in self._journaled_exits:
                self._journaled_exits.add(run)
                self.journal.exited(run.job_id, run.attempt, run.rank, ex.exit_code)

    def launch_deferred(self) -> bool:
        """Start the deferred runs whose GPUs are free now; whether any started."""
        with self._lock:
            waiting = list(self._deferred.values())
        started = False
        for a in waiting:
            started |= self.launch(a)
        return started

    def _all_phases(self) -> dict[str, str]:
        phases = self._phases()
        for run, a in list(self._deferred.items()):  # a copy made at once (no lock: callers may hold it)
            phases[run.key] = f"waiting for GPU {','.join(map(str, a.gpu_indices))} (a stopped run still holds it)"
        return phases

    def launch(self, a: Assignment) -> bool:
        """Start a run (once); deferred while a run being stopped holds one of its GPUs. Whether it started."""
        run = a.run
        # The server resolved whom the job runs as; the executor creates its dirs owned by that identity.
        identity = JobIdentity(a.uid, a.gid if a.gid is not None else a.uid, a.unix_user) if a.uid is not None else None
        stage_dir: Path | None = None
        if a.stage_dir:
            stage_dir = self._prepare_stage_dir(a, identity)
            if stage_dir is None:
                return False
        spec = LaunchSpec(
            job_id=run.key,
            command=tuple(a.command),
            env=dict(a.env),
            workdir=a.workdir,
            gpu_indices=tuple(a.gpu_indices),
            gpu_uuids=tuple(a.gpu_uuids),
            log_path=self.log_path(run),
            identity=identity,
            checkpoint_dir=self.checkpoint_dir / str(a.job_id),
            secret_env=dict(a.secret_env),
            registry_login=(
                RegistryLogin(a.registry_auth.host, a.registry_auth.username, a.registry_auth.password)
                if a.registry_auth
                else None
            ),
            container=container_from_dict(a.container),
            cpu_milli=a.cpu_milli,
            memory_mib=a.memory_mib,
            log_max_bytes=a.log_max_bytes,
            web_port=a.web_port,
            stage_dir=stage_dir,
        )
        with self._lock:
            if run in self._run_gpus or run in self._local_exits:  # two syncs in flight can both carry it: once
                return False
            held = self._held_gpus() & set(a.gpu_indices)
            if held:
                if run not in self._deferred:
                    log.warning("job %s (attempt %s) waits: GPU %s still held by a run being stopped", a.job_id,
                                a.attempt, sorted(held))  # fmt: skip
                self._deferred[run] = a
                return False
            self._deferred.pop(run, None)
            # Every exit seen so far goes in the journal before this start: its GPUs' history stays in order.
            self._journal_exits(self.executor.collect_exits())
            self.executor.launch(spec)
            self._run_gpus[run] = tuple(a.gpu_indices)
            self.journal.started(run.job_id, run.attempt, run.rank, tuple(a.gpu_indices))
        log.info("job %s (attempt %s) started on GPUs %s", a.job_id, a.attempt, a.gpu_indices)
        return True

    def _prepare_stage_dir(self, a: Assignment, identity: JobIdentity | None) -> Path | None:
        """The run's stage dir with its staged input laid out, made once (two syncs in flight may both carry the
        run); None when the run is already here or being prepared, or when it cannot be made (its exit says why)."""
        run = a.run
        with self._lock:
            if run in self._run_gpus or run in self._local_exits or run in self._preparing:
                return None
            ready = self._stage_dirs.get(run)
            if ready is not None:
                return ready
            self._preparing.add(run)
        try:
            if self.stager is None:
                raise StageMissing("this agent stages no data (it was started without a stage engine)")
            made = self.stager.materialize(a.job_id, identity, a.staged_in)
        except (StageMissing, OSError) as e:
            with self._lock:
                self._local_exits[run] = ExitReport(
                    job_id=run.job_id, attempt=run.attempt, rank=run.rank, exit_code=1,
                    reason=f"cannot start: its staged data: {e}",
                )  # fmt: skip
            return None
        finally:
            with self._lock:
                self._preparing.discard(run)
        with self._lock:
            self._stage_dirs[run] = made
        return made

    def apply_fault(self, cmd: SimFaultCommand) -> None:
        """Inject (or clear) a simulated GPU fault; refused on real GPUs (the server checks that too)."""
        if not isinstance(self.backend, SimulatedGpuBackend):
            log.error("fault injection refused: node %s has real GPUs", self.node)
            return
        try:
            fault = parse_sim_fault(cmd.model_dump(exclude={"gpu_index"}, exclude_defaults=True))
            if fault is None:
                self.backend.clear_faults(cmd.gpu_index)
            else:
                self.backend.inject_fault(cmd.gpu_index, fault)
            log.warning("simulated fault on GPU %d: %s", cmd.gpu_index, fault or "cleared")
        except (CorralError, KeyError, IndexError) as e:
            log.error("bad fault for GPU %d: %s", cmd.gpu_index, e)
        if self.collector is not None:
            self.collector.add_events(())  # wake the collector: the fault shows in the next batch at once

    def log_path(self, run: RunRef) -> Path:
        return self.log_dir / f"{run.key}.log"

    def _ship_log(self, run: RunRef) -> None:
        """Ship what the server lacks of a run's log; nothing while the log is empty (the server then has it all:
        this spares a request per run, the shipper's first look at what the server holds, to jobs that say
        nothing)."""
        try:
            if self.log_path(run).stat().st_size == 0:
                return
        except FileNotFoundError:
            return
        self.shipper.ship(run.job_id, run.attempt, self.log_path(run), run.rank)

    def _running_runs(self) -> list[RunRef]:
        """What runs here, and what waits here for its GPUs (given to this node: the server holds them for it)."""
        runs = {RunRef.from_key(k) for k in self.executor.running()} | set(self._deferred)
        return sorted(runs, key=lambda r: (r.job_id, r.attempt, r.rank))


def _report(e: ExitRecord) -> ExitReport:
    run = RunRef.from_key(e.job_id)
    return ExitReport(job_id=run.job_id, attempt=run.attempt, rank=run.rank, exit_code=e.exit_code, reason=e.reason)
