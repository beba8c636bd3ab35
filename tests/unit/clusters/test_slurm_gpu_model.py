"""A job's GPU model reaches Slurm as the nodes name it: the GRES type where the nodes' GRES is typed
(`--gres=gpu:a100:2`), else the node feature that names it (`--constraint=a100`), else nothing beyond the count (the
pool's nodes are of one model). Parsed from the same sinfo records the inventory reads; sbatch's argv checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.clusters.base import Submission
from corral.clusters.slurm import SlurmCliBackend
from corral.clusters.slurm_common import feature_for, gres_type_for, read_nodes

TYPED = [{"name": "a1", "gres": "gpu:a100:4(S:0-1)", "partitions": ["gpu"]},
         {"name": "h1", "gres": "gpu:h100:8", "partitions": ["gpu"]}]  # fmt: skip
FEATURED = [{"name": "n1", "gres": "gpu:4", "active_features": "ib,a100", "partitions": ["gpu"]},
            {"name": "n2", "gres": "gpu:4", "active_features": "ib,v100", "partitions": ["gpu"]}]  # fmt: skip


def _argv(tmp_path: Path, nodes: list[dict[str, object]], model: str) -> list[str]:
    b = SlurmCliBackend({"slurm_conf": "/etc/slurm/slurm.conf", "log_dir": str(tmp_path / "out")})
    calls: list[list[str]] = []

    def run(args: list[str], stdin: str | None = None) -> str:
        calls.append(list(args))
        if args[0] == "sinfo":
            return json.dumps({"nodes": nodes})
        if args[0] == "squeue":
            return json.dumps({"jobs": []})
        return "77\n"

    b._run = run  # type: ignore[method-assign]
    b.submit(Submission(job_id=1, attempt=1, tenant="t", command=("true",), gpus=2, gpu_model=model,
                        uid=61001, gid=61001, uid_mapped=True))  # fmt: skip
    (argv,) = [c for c in calls if c[0] == "sbatch"]
    return argv


@pytest.mark.parametrize(
    ("nodes", "model", "gres", "constraint"),
    [
        (TYPED, "A100-80GB", "--gres=gpu:a100:2", None),
        (TYPED, "H100", "--gres=gpu:h100:2", None),
        (FEATURED, "A100-40GB", "--gres=gpu:2", "--constraint=a100"),
        (FEATURED, "V100", "--gres=gpu:2", "--constraint=v100"),
        (FEATURED, "L4", "--gres=gpu:2", None),  # no node names it: the count alone
        (TYPED, "", "--gres=gpu:2", None),
    ],
)
def test_the_model_is_asked_for_as_the_nodes_name_it(
    tmp_path: Path, nodes: list[dict[str, object]], model: str, gres: str, constraint: str | None
) -> None:
    argv = _argv(tmp_path, nodes, model)
    assert gres in argv, argv
    assert [a for a in argv if a.startswith("--constraint")] == ([constraint] if constraint else []), argv


def test_a_feature_is_a_name_never_a_constraint_expression() -> None:
    nodes = read_nodes([{"name": "n1", "gres": "gpu:4", "active_features": "a100|h100,a100&ib"}], [], "")
    assert feature_for(nodes, "A100") == ""  # an expression would widen what the job may land on
    assert gres_type_for(nodes, "A100", "") == ""
