"""Jobs' web-UI ports (pure): the range Corral assigns them from, and the choice of one on a node."""

from __future__ import annotations

from collections.abc import Set

from corral.core.errors import ValidationError

DEFAULT_JOB_PORTS = "20000-29499"  # below the gangs' CORRAL_MASTER_PORT (29500 + job id % 20000)


def parse_port_range(text: str, field: str = "job_ports") -> range:
    """`LOW-HIGH` (inclusive, 1024..65535, at least 2 ports) as a range. Raises ValidationError naming `field`."""
    low, sep, high = text.strip().partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        raise ValidationError(field, f"expected LOW-HIGH such as {DEFAULT_JOB_PORTS}, got {text!r}") from None
    if not sep or not 1024 <= first < last <= 65535:
        raise ValidationError(field, f"expected 1024 <= LOW < HIGH <= 65535, got {text!r}")
    return range(first, last + 1)


def select_job_port(job_id: int, current: int | None, held: Set[int], ports: range, salt: int = 0) -> int | None:
    """The port a job's web UI gets on a node where `held` are the ports of its other jobs: the job's `current`
    port when it is in the range and free there (a repeated hand-over gives the same port), else the first free
    port from a point that depends on the job id and the cluster's `salt` only (two computations agree; two
    clusters sharing hosts, as tests do, rarely pick the same port for their job 1). None: the range is full."""
    if current is not None and current in ports and current not in held:
        return current
    start = (job_id * 7919 + salt) % len(ports)  # a prime stride spreads consecutive jobs over the range
    for k in range(len(ports)):
        port = ports[(start + k) % len(ports)]
        if port not in held:
            return port
    return None
