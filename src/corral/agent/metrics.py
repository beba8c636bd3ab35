"""Collection on the agent: host vitals (psutil) and GPU samples/events (the GpuBackend), in batches.

The Collector does no network I/O: every interval it hands a TelemetryBatch to a callback (the agent's
uploader). A second thread watches the backend's fault events; an event triggers a collection at once
so health checks see it within one round trip instead of one interval.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

import psutil

from corral.agent.gpu.base import GpuBackend, GpuBackendError
from corral.core.telemetry import GpuEvent, GpuEventKind, GpuReadout, HostSample, TelemetryBatch

log = logging.getLogger(__name__)

BatchSink = Callable[[TelemetryBatch], None]
HostReader = Callable[[float], HostSample]
_MIB = 1024 * 1024


def collect_host_sample(now: float, disk_path: str = "/") -> HostSample:
    """The host's vitals now. Reads /proc and statvfs (sub-millisecond); never sleeps.

    CPU % is measured since the previous call in this process (0.0 on the very first call).
    """
    memory = psutil.virtual_memory()
    disk = psutil.disk_usage(disk_path)
    io = psutil.disk_io_counters()
    net = psutil.net_io_counters()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return HostSample(
        ts=now,
        cpu_percent=float(psutil.cpu_percent(interval=None)),
        cpu_count=psutil.cpu_count() or 1,
        load_1m=load[0],
        load_5m=load[1],
        load_15m=load[2],
        memory_used_mib=int(memory.total - memory.available) // _MIB,
        memory_total_mib=int(memory.total) // _MIB,
        disk_used_bytes=int(disk.used),
        disk_total_bytes=int(disk.total),
        disk_read_bytes=int(io.read_bytes) if io else 0,
        disk_write_bytes=int(io.write_bytes) if io else 0,
        net_rx_bytes=int(net.bytes_recv) if net else 0,
        net_tx_bytes=int(net.bytes_sent) if net else 0,
    )


def compute_gpu_count(readout: GpuReadout) -> int:
    """GPUs the backend saw in a pass: those it read plus those it could only report a failure for."""
    return len({s.index for s in readout.samples} | {e.gpu_index for e in readout.events if e.gpu_index is not None})


class Collector:
    """Samples `backend` and the host every `interval_s` and passes each batch to `sink`.

    Call collect_once() yourself (tests, a custom loop), or start()/stop() the two daemon threads.
    `sink` runs on the collector thread: it should not block for long (hand off to a queue). An
    exception from `sink`, the backend or the host reader is logged, passed to `on_error`, and the
    loop goes on. Fault events wait in a buffer of `max_pending_events`; overflow is counted in the
    next batch's `dropped_events`.
    """

    def __init__(
        self,
        backend: GpuBackend,
        sink: BatchSink,
        *,
        node: str,
        interval_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        host_reader: HostReader | None = collect_host_sample,
        max_pending_events: int = 1000,
        collect_on_event: bool = True,
        on_error: Callable[[Exception], None] | None = None,
        event_wait_s: float = 1.0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.backend = backend
        self.node = node
        self.interval_s = interval_s
        self._sink = sink
        self._clock = clock
        self._host_reader = host_reader
        self._collect_on_event = collect_on_event
        self._on_error = on_error
        self._event_wait_s = event_wait_s
        self._pending: deque[GpuEvent] = deque()
        self._max_pending = max_pending_events
        self._dropped = 0
        self._lock = threading.Lock()
        self._collect_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []

    def add_events(self, events: Iterable[GpuEvent]) -> None:
        """Queue fault events for the next batch (called by the watcher; usable by other sources)."""
        added = False
        with self._lock:
            for e in events:
                if len(self._pending) >= self._max_pending:
                    self._dropped += 1
                else:
                    self._pending.append(e)
                    added = True
        if added and self._collect_on_event:
            self._wake.set()

    def collect_once(self, now: float | None = None) -> TelemetryBatch:
        """Sample everything once, hand the batch to the sink and return it. Raises what the sink raises."""
        with self._collect_lock:
            now = self._clock() if now is None else now
            try:
                readout = self.backend.sample(now)
            except GpuBackendError as e:
                readout = GpuReadout(events=(GpuEvent(now, GpuEventKind.NVML_ERROR, None, str(e)),))
            host = self._host_reader(now) if self._host_reader is not None else None
            with self._lock:
                events = tuple(self._pending) + readout.events
                self._pending.clear()
                dropped, self._dropped = self._dropped, 0
            batch = TelemetryBatch(
                node=self.node,
                ts=now,
                host=host,
                gpus=readout.samples,
                events=events,
                gpu_count=compute_gpu_count(readout),
                dropped_events=dropped,
            )
            self._sink(batch)
            return batch

    def start(self) -> None:
        """Start the sampling and event-watching threads. Idempotent while running."""
        if self._threads:
            return
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._sample_loop, name=f"corral-collector-{self.node}", daemon=True),
            threading.Thread(target=self._watch_loop, name=f"corral-gpu-events-{self.node}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop both threads and wait up to timeout_s for each (the watcher returns within event_wait_s)."""
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout_s)
        self._threads = []

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            self._guarded(self.collect_once)
            # Sleep one interval, or less when a fault event arrives.
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def _watch_loop(self) -> None:
        backoff_s = 1.0
        while not self._stop.is_set():
            try:
                self.add_events(self.backend.wait_events(self._event_wait_s))
                backoff_s = 1.0
            except GpuBackendError as e:
                # Event watching broke (or never worked here): samples still catch lost GPUs, so back off.
                self._report(e)
                self._stop.wait(backoff_s)
                backoff_s = min(backoff_s * 2, 60.0)

    def _guarded(self, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as e:  # noqa: BLE001 - one bad pass (sink, driver) must not end collection
            self._report(e)

    def _report(self, error: Exception) -> None:
        log.warning("telemetry collection on %s: %s", self.node, error)
        if self._on_error is not None:
            self._on_error(error)
