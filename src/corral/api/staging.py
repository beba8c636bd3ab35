"""The agent protocol's staging bodies (issue 19): what the server asks a node to stage in or out (in the sync
reply), and what the node reports back (in its sync)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from corral.core.staging import MAX_LOCATION_CHARS, MAX_SHARED_ROOTS, MAX_STAGE_ITEMS

Location = Annotated[str, Field(max_length=MAX_LOCATION_CHARS)]
StageState = Literal["running", "done", "failed"]
MAX_BYTES = 1 << 60  # an exbibyte: more than any node stages
MAX_FILES = 1 << 40


class S3Login(BaseModel):
    """A tenant's S3 credentials (a secret of kind s3), opened by the server for the agent that stages."""

    access_key_id: str = Field(max_length=256)
    secret_access_key: str = Field(max_length=4096, repr=False)
    endpoint: str | None = Field(None, max_length=1024, description="an S3-compatible endpoint (None: AWS's own)")
    region: str | None = Field(None, max_length=64)


class StageItemWire(BaseModel):
    source: Location
    target: Location


class SharedRootWire(BaseModel):
    path: Location
    writable: bool = True


class StageOrder(BaseModel):
    """One job's staging in one direction. In: `items` copy remote sources into the node's cache and the job's
    manifest (materialised in its stage dir when it starts). Out: `items` copy paths of the job's stage dir to
    remote targets; files written to shared storage are given `uid`:`gid`."""

    job_id: int = Field(ge=1, le=2**53)
    attempt: int = Field(0, ge=0, le=2**53)
    items: list[StageItemWire] = Field(max_length=MAX_STAGE_ITEMS)
    s3: S3Login | None = None
    roots: list[SharedRootWire] = Field(default_factory=list, max_length=MAX_SHARED_ROOTS)
    uid: int | None = Field(None, ge=0, le=2**32 - 1)
    gid: int | None = Field(None, ge=0, le=2**32 - 1)


class StageReport(BaseModel):
    """How a job's staging goes on the node: bytes done of the total (known once the sources are listed)."""

    state: StageState
    done_bytes: int = Field(0, ge=0, le=MAX_BYTES)
    total_bytes: int = Field(0, ge=0, le=MAX_BYTES)
    files: int = Field(0, ge=0, le=MAX_FILES)
    message: str = Field("", max_length=1000)
