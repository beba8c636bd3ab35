"""Why a job waits, in one plain sentence a user can act on (pure).

The code (`reasons.*`, the API's `pending_code`) is the machine-readable answer; this is the API's
`pending_reason`: the same wording for the same situation from one cycle to the next, with the numbers that say
what would change it (how many GPUs it waits for, where some are free, which running job frees the next ones
and when), as `squeue`'s reason column does, in words.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.jobs import QueuedJob

MAX_NODES_NAMED = 3  # nodes listed with their free GPUs; the rest are counted
_MAXIMUM = re.compile(r"^(?P<key>.+): (?P<want>[\d.]+) GPUs > maximum (?P<max>[\d.]+)$")  # quota.check_quota's
_NO_QUOTA_FOR = re.compile(r"has no quota for model '(?P<model>[^']*)'")
_ANY_MODEL = "*"  # quota.TOTAL: the tenant's quota over every model


@dataclass(frozen=True, slots=True)
class WaitFacts:
    """What the cycle knows about a waiting job's chances: fully free GPUs of its models per node (most first;
    `free_by_node` None when the ledger counts GPUs and knows no nodes, then `free_gpus` is the count), and
    when it is expected to start (`eta_s`, None = unknown) because which running job ends (`freed_by`: its id,
    "" when it is another tenant's, True when it reaches its time limit, False when it is being preempted)."""

    now_s: float
    free_by_node: tuple[tuple[str, int], ...] | None = None
    free_gpus: float = 0.0
    eta_s: float | None = None
    freed_by: tuple[str, bool] | None = None
    position: int = 0


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def format_clock(ts: float, now_s: float) -> str:
    """`14:05 UTC`; with the date when it is not within the next 20 hours (`Nov 27 14:05 UTC`). Computed from
    the epoch seconds (the scheduler reads no clock and imports no time module)."""
    minutes = int(ts // 60)
    clock = f"{minutes // 60 % 24:02d}:{minutes % 60:02d} UTC"
    if -60 <= ts - now_s <= 20 * 3600:
        return clock
    _, month, day = civil_from_days(minutes // 1440)
    return f"{_MONTHS[month - 1]} {day} {clock}"


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01 (proleptic Gregorian; H. Hinnant's algorithm)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _plural(n: float, word: str) -> str:
    return f"{n:g} {word}" if n == 1 else f"{n:g} {word}s"


def compute_need_words(job: QueuedJob) -> str:
    """What the job waits for: `4 free GPUs`, `8 free H100 GPUs on one node`, `2 nodes with 8 free GPUs each`,
    `a 25% share of a GPU`."""
    model = f"{job.model} " if job.model else ""
    if job.gpu_milli < 1000:
        return f"a {job.gpu_milli / 10:g}% share of a {model}GPU"
    if job.nodes > 1:
        return f"{job.nodes} nodes with {_plural(job.gpus, 'free ' + model + 'GPU')} each"
    return _plural(job.gpus, f"free {model}GPU")


def compute_free_words(facts: WaitFacts) -> str:
    """`none is free`, `3 are free on node gpu-a, 1 on node gpu-b` or, counting only, `3 are free`."""
    if facts.free_by_node is None:
        n = facts.free_gpus
        return "none is free" if n <= 0 else f"{n:g} {'is' if n == 1 else 'are'} free"
    # most free first: the nodes with any free are a prefix (found by bisection: one cycle words this for every job
    # waiting on capacity, over the same list of every node)
    nodes = facts.free_by_node[: bisect.bisect_left(facts.free_by_node, 0, key=lambda kv: -kv[1])]
    if not nodes:
        return "none is free"
    first_name, first = nodes[0]
    words = [f"{first} {'is' if first == 1 else 'are'} free on node {first_name}"]
    words += [f"{free} on node {name}" for name, free in nodes[1:MAX_NODES_NAMED]]
    text = ", ".join(words)
    if len(nodes) > MAX_NODES_NAMED:
        text += f" and more on {_plural(len(nodes) - MAX_NODES_NAMED, 'other node')}"
    return text


def compute_eta_words(facts: WaitFacts) -> str:
    """`the next frees at 14:05 UTC when job 12 reaches its time limit`, or why there is no estimate."""
    if facts.eta_s is None:
        return "no start time can be estimated: the jobs holding its GPUs have no time limit"
    if facts.eta_s <= facts.now_s:
        return ""
    when = format_clock(facts.eta_s, facts.now_s)
    if facts.freed_by is None:
        return f"expected to start about {when}"
    job_id, by_limit = facts.freed_by
    how = "reaches its time limit" if by_limit else "has stopped (it is being preempted)"
    which = f"job {job_id}" if job_id else "a running job"  # another tenant's job is not named
    return f"the next frees at {when} when {which} {how}"


def compute_wait_sentence(code: str, detail: str, job: QueuedJob, facts: WaitFacts) -> str:
    """One plain sentence for a pending job from its reason code, the engine's detail and the cycle's facts."""
    if code in (reasons.CAPACITY, reasons.GANG):
        parts = [f"waiting for {compute_need_words(job)}", compute_free_words(facts)]
        if "reserved for a job waiting on preemption" in detail:
            parts.append("the free ones are kept for a higher-ranked job that is making room by preemption")
        elif "kept for it" in detail:
            parts.append("nodes are kept for it while the jobs there end")
        parts.append(compute_eta_words(facts))
        return "; ".join(p for p in parts if p)
    if code == reasons.QUOTA:
        return _quota_sentence(job, detail)
    if code == reasons.BORROW:
        return (
            f"waiting for GPUs within tenant {job.tenant}'s guarantee: it is above its guarantee and its cohort"
            " has no idle guaranteed GPUs to lend"
        )
    if code == reasons.MODEL:
        if detail == job.no_gpus_detail():
            wanted = job.wanted_models()
            if not wanted:
                return "no GPU is in the pool yet; it waits until a node joins"
            return f"no {wanted} GPU is in the pool; it waits until a node with one joins"
        return f"no node in the pool can ever hold it ({detail}); it waits until a node that can joins"
    if code == reasons.BEHIND_HEAD:
        return f"waiting behind the blocked job at the head of queue {job.queue_name} (a strict queue starts in order)"
    if code == reasons.RESERVED:
        eta = compute_eta_words(facts)
        tail = f"; {eta}" if eta and not eta.startswith("no start") else ""
        return f"waiting so as not to delay the job at the head of the queue, which has GPUs reserved{tail}"
    if code == reasons.PREEMPTING:
        when = f", by {format_clock(facts.eta_s, facts.now_s)}" if facts.eta_s and facts.eta_s > facts.now_s else ""
        return f"lower-ranked jobs are being stopped to make room; it starts when they have exited{when}"
    if code == reasons.PRIORITY:
        return f"higher-ranked jobs take the free GPUs first; it is number {facts.position + 1} in line"
    if code == reasons.ARRAY_LIMIT:
        return f"its array already runs {detail.rsplit('at most ', 1)[-1].split(' ')[0]} tasks at once, its limit"
    return reasons.DESCRIPTIONS.get(code, code)


def _quota_sentence(job: QueuedJob, detail: str) -> str:
    got = _MAXIMUM.match(detail)
    if got:
        key = got["key"]
        what = "GPUs" if key == _ANY_MODEL else f"{key} GPUs"
        return (
            f"waiting for tenant {job.tenant}'s own jobs to free GPUs: this one would bring it to {got['want']} {what},"
            f" above its maximum of {got['max']}"
        )
    no_model = _NO_QUOTA_FOR.search(detail)
    if no_model:
        return f"tenant {job.tenant} has no quota for {no_model['model']} GPUs; ask for a model its quotas cover"
    if detail.endswith("has no quota"):
        return (
            f"tenant {job.tenant} has no GPU quota and this cluster runs jobs only within one;"
            " an admin sets it with `corral tenants quota`"
        )
    return f"the tenant's quota does not allow it now ({detail})"


def merge_free_by_node(per_model: Sequence[Sequence[tuple[str, int]]]) -> tuple[tuple[str, int], ...]:
    """Free GPUs per node over the job's models, most free first (ties by name)."""
    total: dict[str, int] = {}
    for rows in per_model:
        for name, free in rows:
            total[name] = total.get(name, 0) + free
    return tuple(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))
