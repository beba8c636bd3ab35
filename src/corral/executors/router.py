"""RuntimeRouter: one Executor for the agent over the runtimes its node has (process; container when an engine
answers): a job with an image goes to the container executor, any other to the process executor."""

from __future__ import annotations

import threading

from corral.executors.base import EXIT_CANNOT_EXECUTE, ExitRecord, LaunchSpec, PublishedPort
from corral.executors.container import ContainerExecutor
from corral.executors.process import ProcessExecutor


class RuntimeRouter:
    """Executor protocol over a ProcessExecutor and, maybe, a ContainerExecutor. Thread-safe, non-blocking.

    A job with an image on a node without an engine (the scheduler never sends one: see the runtime filter) ends
    at once with 126 and a reason, kept in memory until acknowledged.
    """

    def __init__(self, process: ProcessExecutor, container: ContainerExecutor | None = None) -> None:
        self.process = process
        self.container = container
        self._refused: dict[str, ExitRecord] = {}
        self._lock = threading.Lock()

    @property
    def runtimes(self) -> tuple[str, ...]:
        return ("process", "docker") if self.container is not None else ("process",)

    @property
    def isolation(self) -> str:
        return self.process.isolation

    def launch(self, spec: LaunchSpec) -> None:
        if spec.container is None:
            self.process.launch(spec)
        elif self.container is not None:
            self.container.launch(spec)
        else:
            with self._lock:
                self._refused.setdefault(
                    spec.job_id, ExitRecord(spec.job_id, EXIT_CANNOT_EXECUTE, "refused: this node runs no containers")
                )

    def running(self) -> list[str]:
        return self.process.running() + (self.container.running() if self.container else [])

    def leader_pid(self, job_id: str) -> int | None:
        return self.process.leader_pid(job_id)

    def published_port(self, job_id: str) -> PublishedPort | None:
        if self.container is not None and self.container.knows(job_id):
            return self.container.published_port(job_id)
        return None

    def collect_exits(self) -> list[ExitRecord]:
        with self._lock:
            refused = list(self._refused.values())
        return self.process.collect_exits() + (self.container.collect_exits() if self.container else []) + refused

    def ack(self, job_id: str) -> None:
        with self._lock:
            if self._refused.pop(job_id, None) is not None:
                return
        if self.container is not None and self.container.knows(job_id):
            self.container.ack(job_id)
        else:
            self.process.ack(job_id)

    def cancel(self, job_id: str, grace_s: float) -> None:
        if self.container is not None and self.container.knows(job_id):
            self.container.cancel(job_id, grace_s)
        else:
            self.process.cancel(job_id, grace_s)

    def image_digests(self) -> dict[str, str]:
        return self.container.image_digests() if self.container is not None else {}

    def phases(self) -> dict[str, str]:
        return self.container.phases() if self.container is not None else {}

    def cached_images(self) -> list[str] | None:
        return self.container.cached_images() if self.container is not None else None

    def close(self) -> None:
        self.process.close()
        if self.container is not None:
            self.container.close()
