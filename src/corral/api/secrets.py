"""Wire schemas of tenant secrets (/api/v1/secrets) and the bounds on secret names, values and references."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

SECRET_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62})$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_SECRET_BYTES = 64 * 1024  # a value becomes one environment variable of the job
MAX_SECRET_REFS = 64
RESERVED_PREFIXES = ("CORRAL_", "CUDA_", "NVIDIA_")  # Corral sets these for the job; a secret may not
RESERVED_NAMES = frozenset({"PORT"})  # the job's web UI port (CORRAL_JOB_PORT)


class SecretKind(StrEnum):
    GENERIC = "generic"  # one value, given to jobs through --secret-env
    REGISTRY = "registry"  # a container registry login: `host` and `username` public, the password secret
    # S3 credentials for data staging (`submit --stage-secret`): `username` is the access key id, `host` an
    # S3-compatible endpoint (none: AWS's own), `region`; the value is the secret access key
    S3 = "s3"


def check_secret_name(name: str) -> str:
    if not SECRET_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a secret name (letters, digits, '.', '_', '-'; 1-64 characters)")
    return name


def check_secret_env(refs: dict[str, str]) -> dict[str, str]:
    """VAR -> secret name: both well formed, at most MAX_SECRET_REFS. The message never repeats a value."""
    if len(refs) > MAX_SECRET_REFS:
        raise ValueError(f"at most {MAX_SECRET_REFS} secret variables")
    for var, name in refs.items():
        if not ENV_NAME.fullmatch(var):
            raise ValueError(f"invalid environment variable name {var[:130]!r}")
        if var.upper().startswith(RESERVED_PREFIXES) or var in RESERVED_NAMES:
            raise ValueError(f"{var} is reserved for Corral (CORRAL_*, CUDA_*, NVIDIA_*, PORT)")
        check_secret_name(name)
    return refs


def check_secret_value(value: str) -> str:
    """Never echoes the value back: an error message is shown and may be logged."""
    if not value:
        raise ValueError("must not be empty")
    if len(value.encode("utf-8")) > MAX_SECRET_BYTES:
        raise ValueError(f"longer than {MAX_SECRET_BYTES} bytes")
    if "\x00" in value:
        raise ValueError("contains a NUL byte (an environment variable cannot hold one)")
    return value


_REGISTRY_HOST = re.compile(r"^(https?://)?[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?/?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_registry_host(host: str) -> str:
    """A registry's host[:port] (a scheme allowed, as `docker login` takes it); nothing else."""
    if not _REGISTRY_HOST.fullmatch(host):
        raise ValueError(f"{host[:80]!r} is not a registry host (host or host:port, e.g. registry.example.com:5000)")
    return host


def check_registry_user(username: str) -> str:
    if _CONTROL.search(username) or username != username.strip():
        raise ValueError("must not hold control characters or surrounding spaces")
    return username


S3Region = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[a-z0-9-]+$")]

# A registry login's public half, as SecretIn and SecretUpdate take it.
RegistryHost = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(check_registry_host)]
RegistryUser = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(check_registry_user)]


class SecretIn(BaseModel):
    """A new secret. The value is write-only: no response ever contains it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="unique in the tenant: letters, digits, . _ -")
    value: str = Field(
        min_length=1,
        max_length=MAX_SECRET_BYTES,
        repr=False,
        description="the secret (write-only; at most 64 KiB, no NUL byte)",
    )
    kind: SecretKind = Field(
        SecretKind.GENERIC, description="generic, registry (a container registry login) or s3 (data staging)"
    )
    host: RegistryHost | None = Field(
        None, description="registry host[:port] (kind registry); an S3-compatible endpoint URL (kind s3; none: AWS)"
    )
    username: RegistryUser | None = Field(None, description="registry user (kind registry); access key id (kind s3)")
    region: S3Region | None = Field(None, description="the S3 region (kind s3; default us-east-1)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_secret_name(v)

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        return check_secret_value(v)

    @model_validator(mode="after")
    def _kind_fields(self) -> SecretIn:
        if self.kind is SecretKind.REGISTRY and not (self.host and self.username):
            raise ValueError("a registry secret needs host and username")
        if self.kind is SecretKind.S3 and not self.username:
            raise ValueError("an s3 secret needs its access key id (username)")
        if self.kind is SecretKind.GENERIC and (self.host or self.username):
            raise ValueError("host and username are for registry and s3 secrets")
        if self.region and self.kind is not SecretKind.S3:
            raise ValueError("region is for s3 secrets")
        return self


class SecretUpdate(BaseModel):
    """A new value for an existing secret (and, for a registry login, its host or username)."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=1, max_length=MAX_SECRET_BYTES, repr=False, description="the new value (write-only)")
    host: RegistryHost | None = None
    username: RegistryUser | None = None

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        return check_secret_value(v)


class SecretOut(BaseModel):
    """What anyone may see of a secret: never its value."""

    name: str
    tenant: str | None
    kind: SecretKind
    host: str | None = None
    username: str | None = None
    region: str | None = None
    created_by: str
    created_at: datetime
    updated_at: datetime


class KeyRotationOut(BaseModel):
    key_id: str = Field(description="id of the new primary key (a hash, not the key)")
    resealed: int = Field(description="stored values sealed again with the new key")
    retired_keys: list[str] = Field(description="ids of old keys dropped from the key file")
