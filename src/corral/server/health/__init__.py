"""Health and telemetry on the server: ingest, GPU health, what a failure leads to, simulated faults."""

from corral.server.health.consequences import (
    CapacityWaker,
    SchedulerAndAgentWaker,
    apply_gpu_failure,
    apply_node_failure,
    requeue_after_failure,
)
from corral.server.health.service import IngestResult, TelemetryService

__all__ = [
    "CapacityWaker",
    "IngestResult",
    "SchedulerAndAgentWaker",
    "TelemetryService",
    "apply_gpu_failure",
    "apply_node_failure",
    "requeue_after_failure",
]
