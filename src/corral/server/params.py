"""Path and query parameters with their bounds, shared by the routers: an id or an index that could never name a
row is refused with 422 before it reaches the database (where 2^63 overflowed into a 500)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Path, Query

from corral.api import bounds

Id = Annotated[int, Path(ge=1, le=bounds.MAX_ID, description="an id (1 .. 2^31-1)")]
GpuIndex = Annotated[int, Path(ge=0, le=bounds.MAX_GPUS_PER_NODE, description="a GPU's index on its node")]
Offset = Annotated[int, Query(ge=0, le=bounds.INT64_MAX, description="a byte offset")]
Limit = Annotated[int, Query(ge=1, le=10_000, description="at most this many items")]
BeforeId = Annotated[int | None, Query(ge=1, le=bounds.MAX_ID, description="page: only items with a smaller id")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=bounds.MAX_IDEMPOTENCY_KEY_CHARS,
        pattern=bounds.IDEMPOTENCY_KEY_PATTERN,
        description="a unique value per submission (a UUID); a retry with the same key and body returns the job the "
        "first request made instead of a second one. Kept 24 h.",
    ),
]
