"""A cluster pool's backend, by its kind (the one place that knows every backend)."""

from __future__ import annotations

from collections.abc import Mapping

from corral.clusters.base import ClusterBackend, ClusterError
from corral.core.errors import ValidationError
from corral.core.pools import KUBERNETES, SLURM, PoolSpec


def check_cluster_settings(kind: str, settings: Mapping[str, str]) -> dict[str, str]:
    """The settings of a `kind` pool, checked (ValidationError naming `settings.<key>`)."""
    if kind == SLURM:
        from corral.clusters.slurm import check_settings

        return check_settings(settings)
    if kind == KUBERNETES:
        from corral.clusters.kubernetes import check_settings as check_kube

        return check_kube(settings)
    raise ValidationError("kind", f"{kind!r} is not a cluster pool kind")


def create_backend(spec: PoolSpec) -> ClusterBackend:
    """The backend of a cluster pool. Raises ClusterError (one line why) for bad settings."""
    try:
        if spec.kind == SLURM:  # the CLI tools, or slurmrestd when the pool names a rest_url
            from corral.clusters.slurm_rest import slurm_backend

            return slurm_backend(spec.settings)
        if spec.kind == KUBERNETES:
            from corral.clusters.kubernetes import KubernetesBackend

            return KubernetesBackend(spec.settings)
    except ValidationError as e:
        raise ClusterError(str(e)) from e
    raise ClusterError(f"pool {spec.name} is not a cluster pool ({spec.kind})")


__all__ = ["check_cluster_settings", "create_backend"]
