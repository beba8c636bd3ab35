"""Behaviour the mutation sample of 2026-11-25 found untested: the words a user reads when a request fits
nowhere, the policy mixes the CLI accepts, backfill against several reservations, and gang jobs under defrag."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.scheduler.framework import Explanation
from corral.scheduler.plugins import get_policy
from corral.scheduler.queueing import QueuedJob
from corral.scheduler.queueing.backfill import Reservation, allow_backfill


def test_an_explanation_lists_reasons_most_common_first_separated_by_semicolons() -> None:
    e = Explanation()
    e.add("not enough free GPUs", 2)
    e.add("GPU model not allowed")
    assert e.summary() == "2 nodes: not enough free GPUs; 1 node: GPU model not allowed"
    assert Explanation().summary() == "no nodes registered"


def test_a_policy_mix_without_weights_weighs_each_part_alike() -> None:
    assert get_policy("bestfit+spread") is not None  # no weights: 1 each, not a "bad weight" error


def test_random_cannot_be_mixed_and_the_error_names_the_policy_flag() -> None:
    with pytest.raises(ValidationError) as err:
        get_policy("random:1+bestfit:1")
    assert (err.value.field, err.value.problem) == ("policy", "'random' cannot be combined with weights")


def test_backfill_checks_every_reservation_of_its_model_past_one_of_another() -> None:
    # A reservation on another model says nothing; the next one, on the job's model, has no spare GPU and
    # its head starts before this job (no time limit) would end: the job may not backfill.
    job = QueuedJob("b", "t", gpus=1, submit_s=0.0)
    reservations = [Reservation("h1", "T4-16GB", 100.0, 8000), Reservation("h2", "V100-32GB", 100.0, 0)]
    assert not allow_backfill(job, "V100-32GB", reservations, 0.0)
    assert allow_backfill(job, "A100-80GB", reservations, 0.0)  # no reservation on its model
