"""The agent's data staging (issue 19): copies a job's input into the node's content-addressed cache before its
GPUs are taken, lays it out in the job's stage dir at launch, and ships the stage dir's output after the job ends.
The server decides when (each sync lists the orders); the engine (engine.py) does the copying on worker threads,
over the cache (cache.py), the sources and targets it stages from and to (inputs.py, outputs.py, s3.py), symlink-safe
file operations (files.py) and the orders' pure rules (orders.py).

Layout:
    <cache_dir>/        0700 the agent: objects/<sha256> (root-owned 0444), index.json (source -> sha256, last
                        use), manifests/<job>.json (a job's staged input), out/<job>.json (a stage-out's result)
    <stage_root>/       0711 root when jobs run as other users (traverse, not list), else 0700
        <job>/          0700 the job's identity: CORRAL_STAGE_DIR

Everything a job or a tenant wrote (the stage dir, the shared storage) is walked with dir fds and O_NOFOLLOW: a
symlink planted there is never followed by the root agent. Credentials are passed to boto3 explicitly and never
appear in a message.
"""

from corral.agent.staging.engine import STAGE_DIRS, StageEngine
from corral.agent.staging.orders import StageFailed, StageMissing, compute_clashes, compute_parts
from corral.agent.staging.s3 import call_s3

__all__ = [
    "STAGE_DIRS",
    "StageEngine",
    "StageFailed",
    "StageMissing",
    "call_s3",
    "compute_clashes",
    "compute_parts",
]
