"""Why a job is pending, as stable codes (the API's `pending_reason`), plus the estimated start."""

from __future__ import annotations

from dataclasses import dataclass

QUOTA = "quota"  # admitting it would exceed the tenant's maximum
BORROW = "borrow-limit"  # it needs borrowed GPUs and the cohort has none idle
CAPACITY = "capacity"  # not enough free GPUs of an allowed model
MODEL = "model-constraint"  # no GPU of the asked model in the pool at all (waiting won't help)
GANG = "gang-incomplete"  # a multi-node job: some but not all of its nodes' GPUs are free; it starts all at once
BEHIND_HEAD = "behind-head"  # a strict queue's head is blocked and this job is behind it
RESERVED = "backfill-reserved"  # it would delay the reserved start of a blocked head
PREEMPTING = "preempting"  # victims were signalled; it starts when they exit
PRIORITY = "priority"  # higher-ranked jobs (priority, fair share) take the free GPUs first
ARRAY_LIMIT = "array-limit"  # its job array already runs as many tasks as its %N limit allows

DESCRIPTIONS = {
    QUOTA: "the tenant's maximum quota would be exceeded",
    BORROW: "needs GPUs above the tenant's guarantee and none are idle to borrow",
    CAPACITY: "not enough free GPUs of an allowed model",
    MODEL: "no GPU of the requested model exists in the pool",
    GANG: "only part of the gang's GPUs are free; it starts all at once or not at all",
    BEHIND_HEAD: "waiting behind the blocked head of a strict queue",
    RESERVED: "would delay the reserved start of the job at the head",
    PREEMPTING: "lower-ranked jobs are being preempted to make room",
    PRIORITY: "higher-ranked jobs take the free GPUs first",
    ARRAY_LIMIT: "its array already runs as many tasks at once as its limit allows",
}


@dataclass(frozen=True, slots=True)
class PendingStatus:
    """`reason` is one of the codes above; `eta_s` an estimated start (None = unknown, e.g. running jobs
    without time limits); `position` the job's 0-based rank among pending jobs; `text` the one plain sentence
    shown to users (wording.compute_wait_sentence), `detail` the engine's own note."""

    reason: str
    detail: str
    position: int
    eta_s: float | None = None
    text: str = ""
