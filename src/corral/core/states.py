"""Job states and the table of allowed transitions (one comment per edge)."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset(
        {
            JobState.RUNNING,  # the scheduler placed it and handed it to a node's agent
            JobState.CANCELLED,  # the user cancelled it before it started
            JobState.FAILED,  # it can never start (e.g. its node vanished with it assigned)
        }
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,  # the agent reported exit code 0
            JobState.FAILED,  # non-zero exit, or the agent lost the process
            JobState.CANCELLED,  # the user cancelled it and the agent stopped it
            JobState.PENDING,  # requeued: its GPU or node failed, or it was preempted
        }
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def can_transition(src: JobState, dst: JobState) -> bool:
    return dst in TRANSITIONS[src]


def compute_sources(dst: JobState) -> tuple[JobState, ...]:
    """The states from which a job may move to `dst` (declaration order): what the store's compare-and-set
    guard for that move matches on, so a terminal job never changes again."""
    return tuple(src for src in JobState if dst in TRANSITIONS[src])


def state_for_exit(exit_code: int, cancel_requested: bool) -> JobState:
    """The final state of a job whose process exited with `exit_code`."""
    if cancel_requested:
        return JobState.CANCELLED
    return JobState.SUCCEEDED if exit_code == 0 else JobState.FAILED
