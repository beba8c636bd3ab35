"""Which Unix identity a job runs as: the UID range, the admin's mapping, and the ids no mapping may take."""

from __future__ import annotations

import pytest

from corral.core.errors import ValidationError
from corral.core.unix_identity import (
    ANONYMOUS_JOB_USER,
    MAX_ID,
    JobIdentity,
    UidRange,
    check_mapped_identity,
    compute_job_identity,
    parse_uid_range,
)

UIDS = UidRange(200000, 265535)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("200000-265535", UidRange(200000, 265535), id="default"),
        pytest.param(" 5000 - 6000 ", UidRange(5000, 6000), id="spaces"),
        pytest.param("1000-1001", UidRange(1000, 1001), id="lowest-two-ids"),
        pytest.param(f"{MAX_ID - 1}-{MAX_ID}", UidRange(MAX_ID - 1, MAX_ID), id="highest-two-ids"),
    ],
)
def test_uid_ranges(text: str, expected: UidRange) -> None:
    assert parse_uid_range(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("", "expected START-END (e.g. 200000-265535), got ''", id="empty"),
        pytest.param("200000", "expected START-END (e.g. 200000-265535), got '200000'", id="one-number"),
        pytest.param("a-b", "expected START-END (e.g. 200000-265535), got 'a-b'", id="words"),
        pytest.param("999-2000", f"'999-2000': need 1000 <= START < END <= {MAX_ID}", id="system-ids"),
        pytest.param(f"5000-{MAX_ID + 1}", f"need 1000 <= START < END <= {MAX_ID}", id="the-unchanged-id"),
        pytest.param("5000-5000", f"need 1000 <= START < END <= {MAX_ID}", id="one-id"),
        pytest.param("6000-5000", f"need 1000 <= START < END <= {MAX_ID}", id="reversed"),
    ],
)
def test_bad_uid_ranges_name_the_field_and_the_rule(text: str, words: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_uid_range(text)
    assert e.value.field == "job_uids"
    assert words in e.value.problem


def test_a_uid_range_error_names_the_callers_field() -> None:
    with pytest.raises(ValidationError) as e:
        parse_uid_range("nope", field="CORRAL_JOB_UIDS")
    assert e.value.field == "CORRAL_JOB_UIDS"


def test_a_range_holds_its_ends_and_only_ints() -> None:
    r = UidRange(5000, 6000)
    assert 5000 in r and 6000 in r and 5500 in r
    assert 4999 not in r and 6001 not in r
    assert "5500" not in r and 5500.0 not in r


def test_the_admins_mapping_wins() -> None:
    assert compute_job_identity(3, "alice", (1500, 1600), UIDS) == JobIdentity(uid=1500, gid=1600, user="alice")
    # even for a user id the range cannot hold
    assert compute_job_identity(10**9, "bob", (1500, 1600), UIDS) == JobIdentity(uid=1500, gid=1600, user="bob")


def test_an_unmapped_user_gets_start_plus_id_as_uid_and_gid() -> None:
    assert compute_job_identity(1, "alice", None, UIDS) == JobIdentity(uid=200001, gid=200001, user="alice")
    assert compute_job_identity(7, "bob", None, UIDS) == JobIdentity(uid=200007, gid=200007, user="bob")
    last = UIDS.end - UIDS.start
    assert compute_job_identity(last, "carol", None, UIDS) == JobIdentity(uid=UIDS.end, gid=UIDS.end, user="carol")


def test_an_ownerless_job_runs_as_the_ranges_first_uid() -> None:
    ident = compute_job_identity(None, "ignored", None, UIDS)
    assert ident == JobIdentity(uid=200000, gid=200000, user=ANONYMOUS_JOB_USER)
    assert ident.user == "corral-job"


@pytest.mark.parametrize("user_id", [0, -1, 65536, 10**6])
def test_a_user_id_the_range_cannot_hold_is_an_error_not_a_wrap(user_id: int) -> None:
    with pytest.raises(ValidationError) as e:
        compute_job_identity(user_id, "dave", None, UIDS)
    assert e.value.field == "job_uids"
    assert e.value.problem == (
        f"user 'dave' (id {user_id}) has no UID in 200000-265535: "
        "widen CORRAL_JOB_UIDS or map the user to an account (corral users unix)"
    )


@pytest.mark.parametrize(("uid", "gid"), [(1000, 1000), (MAX_ID, MAX_ID), (5000, 100000), (199999, 265536)])
def test_mappings_outside_system_ids_and_the_range_are_allowed(uid: int, gid: int) -> None:
    check_mapped_identity(uid, gid, UIDS)


@pytest.mark.parametrize(
    ("uid", "gid", "field", "value"),
    [
        pytest.param(0, 5000, "uid", 0, id="root-uid"),
        pytest.param(999, 5000, "uid", 999, id="system-uid"),
        pytest.param(5000, 999, "gid", 999, id="system-gid"),
        pytest.param(MAX_ID + 1, 5000, "uid", MAX_ID + 1, id="unchanged-uid"),
        pytest.param(5000, MAX_ID + 1, "gid", MAX_ID + 1, id="unchanged-gid"),
    ],
)
def test_mappings_to_system_ids_are_refused(uid: int, gid: int, field: str, value: int) -> None:
    with pytest.raises(ValidationError) as e:
        check_mapped_identity(uid, gid, UIDS)
    assert e.value.field == field
    assert e.value.problem == (
        f"{value} is not allowed: mapped ids are 1000..{MAX_ID} (0 and system accounts never run jobs)"
    )


@pytest.mark.parametrize(
    ("uid", "gid", "field", "value"),
    [
        pytest.param(200000, 5000, "uid", 200000, id="range-start-uid"),
        pytest.param(5000, 265535, "gid", 265535, id="range-end-gid"),
        pytest.param(230000, 230000, "uid", 230000, id="uid-checked-first"),
    ],
)
def test_mappings_into_the_range_are_refused(uid: int, gid: int, field: str, value: int) -> None:
    with pytest.raises(ValidationError) as e:
        check_mapped_identity(uid, gid, UIDS)
    assert e.value.field == field
    assert e.value.problem == (
        f"{value} lies in CORRAL_JOB_UIDS (200000-265535), which Corral gives to users without a mapping"
    )
