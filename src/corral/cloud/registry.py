"""A pool's provider, by its `provider` name (the one place that knows every provider)."""

from __future__ import annotations

from pathlib import Path

from corral.cloud.base import Provider, ProviderError
from corral.core.pools import PoolSpec


def create_provider(spec: PoolSpec, local_root: Path) -> Provider:
    """The provider of `spec` (its region and settings). `local_root`: where the local provider keeps its agents.
    Raises ProviderError (one line why) for an unknown provider or bad settings."""
    if spec.provider == "local":
        from corral.cloud.local import LocalProvider

        return LocalProvider(spec.name, local_root, spec.settings)
    if spec.provider == "aws":
        from corral.cloud.aws import AwsProvider

        return AwsProvider(spec.name, spec.region, spec.settings)
    raise ProviderError(f"unknown provider {spec.provider!r}")


def check_provider_settings(spec: PoolSpec, local_root: Path) -> None:
    """Raise ProviderError when the pool's settings are not what its provider takes (at create and update)."""
    create_provider(spec, local_root)


__all__ = ["check_provider_settings", "create_provider"]
