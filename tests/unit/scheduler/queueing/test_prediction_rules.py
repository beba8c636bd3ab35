"""Run-time prediction (prediction.py): learns from finished jobs, backs off from the most specific key to
coarser ones, cold-starts to unknown, stays bounded (constant work per prediction), and explains itself."""

from __future__ import annotations

import pytest

from corral.scheduler.queueing.prediction import (
    BACKOFF,
    HISTORY_PER_KEY,
    MIN_JOBS,
    NUM_BINS,
    DurationPredictor,
    JobFeatures,
    compute_name_key,
    compute_script_key,
)


def feats(user: str = "ann", name: str = "train-1", gpus: int = 1, **kw: object) -> JobFeatures:
    return JobFeatures(user=user, tenant=str(kw.pop("tenant", "lab")), name=name, gpus=gpus, **kw)  # type: ignore[arg-type]


def learned(*runs: tuple[JobFeatures, float]) -> DurationPredictor:
    p = DurationPredictor()
    for f, d in runs:
        p.record(f, d)
    return p


def test_a_cold_start_is_unknown_until_enough_jobs_have_finished() -> None:
    p = DurationPredictor()
    assert p.predict(feats()) is None
    for _ in range(MIN_JOBS - 1):
        p.record(feats(), 600.0)
    assert p.predict(feats()) is None  # 7 finished jobs: not yet
    p.record(feats(), 600.0)
    got = p.predict(feats())
    assert got is not None and got.basis.jobs == MIN_JOBS and got.basis.median_s == 600.0


def test_it_learns_as_jobs_finish_and_follows_recent_ones() -> None:
    p = learned(*[(feats(), 100.0)] * HISTORY_PER_KEY)
    first = p.predict(feats())
    assert first is not None and first.basis.median_s == 100.0
    for _ in range(HISTORY_PER_KEY // 2 + 1):
        p.record(feats(), 10_000.0)
    later = p.predict(feats())
    assert later is not None and later.basis.median_s == 10_000.0  # the older half has aged out
    assert 5_000 < later.median_s < 20_000  # the distribution (bin midpoints) agrees


@pytest.mark.parametrize(
    ("asked", "label", "key"),
    [
        (feats(name="train-7"), "user+name+gpus", ("ann", "train-*", "1")),  # digits stripped: same name
        (feats(name="train-7", gpus=4), "user+name", ("ann", "train-*")),  # the user never ran it on 4 GPUs
        (feats(user="bob", name="train-9"), "name+gpus", ("train-*", "1")),  # another user's job of that name
        (feats(user="bob", name="eval", gpus=4), "tenant+gpus", ("lab", "4")),  # the tenant's jobs on 4 GPUs
        (feats(user="bob", name="eval", gpus=4, tenant="other"), "gpus", ("4",)),  # only the GPU count alike
        (feats(user="bob", name="eval", gpus=2, tenant="other"), "all", ("*",)),  # nothing alike at all
    ],
    ids=["same-key", "user+name", "name+gpus", "tenant+gpus", "gpus", "all"],
)
def test_it_backs_off_from_the_most_specific_key(asked: JobFeatures, label: str, key: tuple[str, ...]) -> None:
    p = learned(*[(feats(name=f"train-{i}"), 3600.0) for i in range(MIN_JOBS)], *[(feats("cy", "x", 4), 60.0)] * 8)
    got = p.predict(asked)
    assert got is not None and (got.basis.label, got.basis.key) == (label, key)


def test_a_key_with_an_empty_part_is_skipped() -> None:
    # Unnamed jobs of different users share no `name` key: an unnamed job falls back to its user's jobs.
    p = learned(*[(feats("ann", "", 1), 60.0)] * MIN_JOBS, *[(feats("bob", "", 1), 6000.0)] * MIN_JOBS)
    got = p.predict(feats("bob", "", 1))
    assert got is not None and got.basis.label == "user+gpus" and got.basis.median_s == 6000.0


def test_every_structure_is_bounded_so_a_prediction_is_constant_work() -> None:
    p = DurationPredictor(max_keys=50)
    for i in range(2_000):
        p.record(feats(f"u{i % 40}", f"job{i}", 1 + i % 3, script=f"run{i % 7}.py"), float(1 + i))
    assert max(p.history_sizes()) == HISTORY_PER_KEY  # the busiest key keeps only its recent run times
    assert p.key_count == 50  # least recently updated keys dropped
    got = p.predict(feats("u1", "job5", 2))
    assert got is not None
    assert len(got.counts) == NUM_BINS and sum(got.counts) == got.basis.jobs <= HISTORY_PER_KEY
    assert len(BACKOFF) == 10  # keys looked up per prediction


def test_what_was_learned_survives_a_restart_as_plain_data() -> None:
    p = learned(*[(feats(name=f"train-{i}"), 60.0 * (1 + i)) for i in range(40)], *[(feats("bob", "x", 2), 9.0)] * 9)
    again = DurationPredictor()
    again.restore_state(p.export_state())
    for f in (feats(name="train-3"), feats("bob", "x", 2), feats("cy", "y", 8)):
        assert again.predict(f) == p.predict(f)
    assert again.export_state() == p.export_state()


def test_a_prediction_asked_again_answers_what_was_learnt_since() -> None:
    """predict remembers its answers between records (a scheduler asks for every pending job each pass): a record,
    or a restore, makes the next answer new."""
    p = learned(*[(feats(), 100.0)] * MIN_JOBS)
    first = p.predict(feats())
    assert first is not None and p.predict(feats()) is first  # nothing learnt since: the same answer
    p.record(feats(name="eval"), 5.0)  # another key: the answer's figures stay, but it is looked up again
    assert p.predict(feats()) == first
    for _ in range(MIN_JOBS):
        p.record(feats(), 10_000.0)
    grown = p.predict(feats())
    assert grown is not None and grown.basis.jobs == 2 * MIN_JOBS and grown.expected_remaining_s(0.0) > 2_000
    p.restore_state(learned(*[(feats(), 30.0)] * MIN_JOBS).export_state())
    restored = p.predict(feats())
    assert restored is not None and restored.basis.median_s == 30.0 and restored.expected_remaining_s() < 60
    strict = learned(*[(feats(), 100.0)] * 3)
    assert strict.predict(feats()) is None  # 3 finished jobs: fewer than MIN_JOBS
    strict.min_jobs = 3
    assert strict.predict(feats()) is not None  # the threshold lowered: asked again, not remembered


def test_a_job_with_a_huge_command_is_predicted_but_not_remembered() -> None:
    """A tenant's jobs with long, distinct commands must not fill the server's memory through the memo."""
    p = learned(*[(feats(), 100.0)] * MIN_JOBS)
    for i in range(50):
        got = p.predict(feats(script=f"python train.py --blob={'x' * 4096}{i}"))
        assert got is not None and got.basis.label == "user+name+gpus"
    assert len(p._memo) == 0  # noqa: SLF001


def test_a_time_limit_caps_the_prediction() -> None:
    p = learned(*[(feats(), 7200.0)] * MIN_JOBS)
    got = p.predict(feats(time_limit_s=1800.0))
    assert got is not None and got.median_s == 1800.0 and got.expected_remaining_s(0.0) == 1800.0


def test_what_is_left_grows_once_a_job_outlives_its_history() -> None:
    got = learned(*[(feats(), 100.0)] * MIN_JOBS).predict(feats())
    assert got is not None
    assert got.expected_remaining_s(0.0) < 150
    assert got.expected_remaining_s(1000.0) == 1000.0  # outlived every earlier job: as long again
    assert got.gittins_s(0.0) < got.gittins_s(1000.0)


def test_it_explains_itself_in_words() -> None:
    p = learned(*[(feats(name=f"train-{i}"), 7800.0) for i in range(38)])
    got = p.predict(feats(user="bob", name="train-99"))
    assert got is not None
    assert got.describe() == "median of 38 earlier jobs named train-* on 1 GPU: 2 h 10 m"
    assert (got.basis.label, got.basis.jobs, got.basis.median_s) == ("name+gpus", 38, 7800.0)


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("train-0042", "train-*"),
        ("resnet50-lr3e-4", "resnet*-lr*e-*"),
        ("", ""),
    ],
)
def test_name_keys_strip_numbers(given: str, key: str) -> None:
    assert compute_name_key(given) == key


@pytest.mark.parametrize(
    ("command", "key"),
    [
        ("python /home/a/train_v2.py --lr 3", "train_v*.py"),
        ("bash scripts/run.sh 12", "run.sh"),
        ("torchrun --nproc 8 -m pkg.main", "torchrun"),
        ("", ""),
    ],
)
def test_script_keys_name_the_script_run(command: str, key: str) -> None:
    assert compute_script_key(command) == key
