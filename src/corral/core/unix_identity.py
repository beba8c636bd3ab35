"""Which Unix identity a user's jobs run as (pure): an admin-set mapping, else a UID from the configured range."""

from __future__ import annotations

import re
from dataclasses import dataclass

from corral.core.errors import ValidationError

MIN_MAPPED_ID = 1000  # below: system accounts and groups (root, daemon, shadow, docker...): never a job's identity
MAX_ID = 2**32 - 2  # (uid_t)-1 means "unchanged" to setuid(2)
DEFAULT_JOB_UIDS = "200000-265535"
ANONYMOUS_JOB_USER = "corral-job"  # jobs without an owner (rows older than users) run as the range's first UID
_RANGE = re.compile(r"^\s*(\d{1,10})\s*-\s*(\d{1,10})\s*$")


@dataclass(frozen=True, slots=True)
class UidRange:
    """UIDs (and GIDs, the same number) Corral gives users without a mapping: start + user id."""

    start: int
    end: int  # inclusive

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.start <= value <= self.end


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """The Unix identity one job runs as on every node: resolved by the server, applied by the agent."""

    uid: int
    gid: int
    user: str  # USER and LOGNAME of the job (the Corral user name, or the mapped account's when the node knows it)


def parse_uid_range(text: str, field: str = "job_uids") -> UidRange:
    """`START-END`, both within 1000..2^32-2. Raises ValidationError naming `field`."""
    m = _RANGE.match(text)
    if m is None:
        raise ValidationError(field, f"expected START-END (e.g. {DEFAULT_JOB_UIDS}), got {text!r}")
    start, end = int(m.group(1)), int(m.group(2))
    if start < MIN_MAPPED_ID or end > MAX_ID or end <= start:
        raise ValidationError(field, f"{text!r}: need {MIN_MAPPED_ID} <= START < END <= {MAX_ID}")
    return UidRange(start, end)


def compute_job_identity(
    user_id: int | None, user_name: str, mapped: tuple[int, int] | None, uids: UidRange
) -> JobIdentity:
    """The admin's mapping wins; else start + user id. A user id the range cannot hold is an error, never a wrap."""
    if mapped is not None:
        return JobIdentity(uid=mapped[0], gid=mapped[1], user=user_name)
    if user_id is None:
        return JobIdentity(uid=uids.start, gid=uids.start, user=ANONYMOUS_JOB_USER)
    uid = uids.start + user_id
    if user_id < 1 or uid > uids.end:
        raise ValidationError(
            "job_uids",
            f"user {user_name!r} (id {user_id}) has no UID in {uids.start}-{uids.end}: "
            "widen CORRAL_JOB_UIDS or map the user to an account (corral users unix)",
        )
    return JobIdentity(uid=uid, gid=uid, user=user_name)


def check_mapped_identity(uid: int, gid: int, uids: UidRange) -> None:
    """An admin-set mapping: never a system account, never a UID or GID Corral gives another user from the range."""
    for field, value in (("uid", uid), ("gid", gid)):
        if value < MIN_MAPPED_ID or value > MAX_ID:
            raise ValidationError(
                field,
                f"{value} is not allowed: mapped ids are {MIN_MAPPED_ID}..{MAX_ID} "
                "(0 and system accounts never run jobs)",
            )
        if value in uids:
            raise ValidationError(
                field,
                f"{value} lies in CORRAL_JOB_UIDS ({uids.start}-{uids.end}), which Corral "
                "gives to users without a mapping",
            )
