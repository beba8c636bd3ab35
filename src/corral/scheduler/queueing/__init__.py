"""Multi-tenant queueing (pure): ordering, quotas, fair share, gang admission, backfill, preemption, and
"why pending". Entry point: `compute_admission(state, ledger, policy, now_s)`; see docs/queueing.md."""

from corral.scheduler.queueing.admission import Admission, AdmissionPlan, QueueState, compute_admission
from corral.scheduler.queueing.capacity import CountLedger, Ledger
from corral.scheduler.queueing.fairshare import compute_decayed_usage, compute_fair_shares
from corral.scheduler.queueing.jobs import QueueConfig, QueuedJob, RunningJob
from corral.scheduler.queueing.policy import DEFAULT_QUEUEING, POLICIES, QueueingPolicy, get_queueing_policy
from corral.scheduler.queueing.preemption import Preemption, select_victims
from corral.scheduler.queueing.quota import TOTAL, QuotaBook, TenantQuota, validate_quotas
from corral.scheduler.queueing.reasons import PendingStatus

__all__ = [
    "Admission",
    "AdmissionPlan",
    "CountLedger",
    "DEFAULT_QUEUEING",
    "Ledger",
    "POLICIES",
    "PendingStatus",
    "Preemption",
    "QueueConfig",
    "QueueState",
    "QueuedJob",
    "QueueingPolicy",
    "QuotaBook",
    "RunningJob",
    "TOTAL",
    "TenantQuota",
    "compute_admission",
    "compute_decayed_usage",
    "compute_fair_shares",
    "get_queueing_policy",
    "select_victims",
    "validate_quotas",
]
