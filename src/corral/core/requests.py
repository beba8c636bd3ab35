"""What a job asks for: GPUs (whole or a share), models, memory, host resources."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from corral.core.errors import ValidationError
from corral.core.resources import FULL_GPU_MILLI


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """A request for devices on one node.

    gpus: number of GPUs; with gpu_milli < 1000 it must be 1 (a share of one GPU).
    gpu_models: allowed GPU models (empty = any); matched case-insensitively against the model name.
    """

    gpus: int = 0
    gpu_milli: int = FULL_GPU_MILLI
    gpu_models: tuple[str, ...] = ()
    min_gpu_memory_mib: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    # Placement constraints (defaulted; added for the scheduler, issue 3).
    nvlink: str = ""  # "" (don't care), "preferred" or "required": all GPUs on one NVLink island
    node_selector: tuple[tuple[str, str], ...] = ()  # node labels that must match exactly
    tolerations: tuple[str, ...] = ()  # node taints this request tolerates
    ecc: bool = False  # only GPUs with ECC enabled
    mig_profile: str = ""  # `gpus` MIG instances of this profile (e.g. "1g.10gb") instead of whole GPUs
    runtime: str = "process"  # what runs it: "process", or "docker" for a job with an image (core/containers.py)
    image: str = ""  # a container job's image ("" for a process): only breaks ties between equal placements

    def __post_init__(self) -> None:
        validate_request(self)

    @property
    def total_gpu_milli(self) -> int:
        return self.gpus * self.gpu_milli


def validate_request(req: ResourceRequest) -> None:
    """Raise ValidationError naming the field when the request is malformed."""
    if req.gpus < 0:
        raise ValidationError("gpus", "must be >= 0")
    if not 0 < req.gpu_milli <= FULL_GPU_MILLI:
        raise ValidationError("gpu_milli", "must be in 1..1000")
    if req.gpu_milli < FULL_GPU_MILLI and req.gpus != 1:
        raise ValidationError("gpu_milli", "a GPU share (< 1000 milli) needs gpus=1")
    if req.min_gpu_memory_mib < 0:
        raise ValidationError("min_gpu_memory_mib", "must be >= 0")
    if req.cpu_milli < 0:
        raise ValidationError("cpu_milli", "must be >= 0")
    if req.memory_mib < 0:
        raise ValidationError("memory_mib", "must be >= 0")
    if req.mig_profile and req.gpu_milli != FULL_GPU_MILLI:
        raise ValidationError("mig_profile", "a MIG instance is taken whole (gpu_milli must be 1000)")
    if req.mig_profile and req.gpus < 1:
        raise ValidationError("mig_profile", "a MIG request needs gpus >= 1 (the number of instances)")
    if req.nvlink not in NVLINK_MODES:
        raise ValidationError("nvlink", f"must be one of {', '.join(repr(m) for m in NVLINK_MODES)}")


NVLINK_MODES = ("", "preferred", "required")


@lru_cache(maxsize=65536)
def model_matches(model: str, allowed: tuple[str, ...]) -> bool:
    """True when `model` is allowed: an empty tuple allows all; an entry matches the whole model name
    or one of its words, so "H100" matches "H100-80GB" and "NVIDIA H100 80GB HBM3"."""
    if not allowed:
        return True
    name = model.lower()
    words = set(re.split(r"[\s\-_]+", name))
    return any(a.lower() == name or a.lower() in words for a in allowed)
