"""The job-state transition table, over every (from, to) pair: terminal states stay terminal."""

from __future__ import annotations

import itertools

import pytest

from corral.core.states import TERMINAL_STATES, TRANSITIONS, JobState, can_transition, compute_sources, state_for_exit

P, R, S, F, C = JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED

# Written out by hand, not derived from TRANSITIONS: a change to the table must change this list too.
ALLOWED = {
    (P, R),  # placed and handed to an agent
    (P, C),  # cancelled before it started
    (P, F),  # can never start
    (R, S),  # exit code 0
    (R, F),  # non-zero exit, or lost
    (R, C),  # cancelled and stopped
    (R, P),  # requeued (GPU or node failure, preemption)
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(JobState, JobState)), ids=lambda s: s.value)
def test_every_pair(src: JobState, dst: JobState) -> None:
    assert can_transition(src, dst) is ((src, dst) in ALLOWED)


def test_the_table_has_a_row_per_state() -> None:
    assert set(TRANSITIONS) == set(JobState)


def test_terminal_states_have_no_way_out() -> None:
    assert {S, F, C} == TERMINAL_STATES
    assert {st for st in JobState if st.terminal} == {S, F, C}
    for st in TERMINAL_STATES:
        assert TRANSITIONS[st] == frozenset()


@pytest.mark.parametrize(
    ("dst", "sources"),
    [(P, (R,)), (R, (P,)), (S, (R,)), (F, (P, R)), (C, (P, R))],
    ids=lambda v: v.value if isinstance(v, JobState) else "",
)
def test_sources_are_what_the_store_guards_match(dst: JobState, sources: tuple[JobState, ...]) -> None:
    assert compute_sources(dst) == sources


@pytest.mark.parametrize(
    ("exit_code", "cancel", "state"),
    [(0, False, S), (1, False, F), (-9, False, F), (0, True, C), (137, True, C)],
)
def test_state_for_exit(exit_code: int, cancel: bool, state: JobState) -> None:
    assert state_for_exit(exit_code, cancel) is state
