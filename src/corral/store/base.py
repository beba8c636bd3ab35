"""StateStore: every store role at once (corral.store.protocols), kept so that older annotations keep working.

New code types against the narrowest role it needs (JobStore, NodeStore, SchedulingStore...). The contracts of each
method are written on its role in corral.store.protocols.
"""

from __future__ import annotations

from typing import Protocol

from corral.store.protocols import (
    AlertStore,
    AuditStore,
    ClusterJobStore,
    DirectoryStore,
    IdentityStore,
    JobStore,
    LifecycleStore,
    NodeIdentityStore,
    NodeStore,
    OperationsStore,
    PoolStore,
    ReplicaStore,
    ScheduleStore,
    SchedulingStore,
    SecretStore,
    ServiceStore,
    StagingStore,
    TelemetryStore,
    TenancyStore,
)

__all__ = [
    "ReplicaStore",
    "AlertStore",
    "AuditStore",
    "DirectoryStore",
    "IdentityStore",
    "JobStore",
    "LifecycleStore",
    "NodeIdentityStore",
    "NodeStore",
    "OperationsStore",
    "PoolStore",
    "ScheduleStore",
    "SchedulingStore",
    "SecretStore",
    "ServiceStore",
    "StateStore",
    "TelemetryStore",
    "TenancyStore",
]


class StateStore(
    LifecycleStore,
    JobStore,
    NodeStore,
    TenancyStore,
    IdentityStore,
    NodeIdentityStore,
    TelemetryStore,
    AlertStore,
    ScheduleStore,
    SecretStore,
    DirectoryStore,
    AuditStore,
    OperationsStore,
    ReplicaStore,
    ServiceStore,
    PoolStore,
    StagingStore,
    ClusterJobStore,
    Protocol,
):
    """Every role: what SqlStore implements."""
